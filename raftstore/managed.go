package raftstore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
)

// A managed cluster (Config.Managed) places its data shards itself. Every node hosts the meta
// shard (see meta.go) and runs one management loop, which does up to three jobs each round:
//
//   - every node registers itself in the cluster map (address and attributes) and makes its
//     replicas match the map: it starts a replica of a shard placed on it (the replica joins
//     the shard's group), and drops a replica once the shard's group no longer counts it;
//   - the leader of a data shard makes the group match the map, one change at a time: it adds
//     a missing member as a non-voter, promotes it once it has caught up, and only then removes
//     a member the map no longer lists (handing leadership over first if that member is itself);
//   - the meta leader keeps the map true: it initializes it, tracks which nodes answer, adds new
//     nodes to the meta group, recomputes placement (place) over the live nodes that are not
//     being removed, and forgets removed nodes once they hold nothing.
//
// Every step is idempotent and driven by comparing the map with what Raft reports, so a crash
// or a leader change at any point only delays the next step.

// metaReplica is this node's member of the meta shard.
type metaReplica struct {
	*raftGroup
	fsm  *metaFSM
	logs *raftLog
}

// managed holds the management loop's memory (only that goroutine touches it).
type managed struct {
	lastSeen      map[string]time.Time // when each node last answered the meta leader
	leaderSince   time.Time            // when this node last became meta leader
	removedLogged bool                 // the "this node was removed" warning was given
}

// startManaged starts the meta replica and the data replicas this node holds, bootstrapping a
// new cluster if this is its first start.
func (n *Node) startManaged() error {
	cfg := n.cfg
	logs, err := newRaftLog(n.db, MetaShard)
	if err != nil {
		return err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(n.snapshotDir(MetaShard), 2, newRaftLogger(n.logger, MetaShard))
	if err != nil {
		return err
	}
	fresh := logs.last.Load() == 0
	if list, err := snaps.List(); err != nil || len(list) > 0 {
		fresh = false
	}
	var peers []Peer // nil: join an existing cluster
	if cfg.Join == "" {
		peers = cfg.Peers
		if peers == nil {
			peers = []Peer{{ID: cfg.NodeID, Addr: n.addr}}
		}
	}
	fsm := newMetaFSM()
	fsm.onChange = n.kickManage
	if app := cfg.App; app != nil {
		fsm.onRevoke = app.DeviceRevoked
	}
	n.metaStart = logs.last.Load() // what the meta replica must apply before its state is current
	rg, err := n.startRaft(MetaShard, fsm, false, snaps, logs, peers)
	if err != nil {
		return fmt.Errorf("raftstore: start meta shard: %w", err)
	}
	n.meta = &metaReplica{raftGroup: rg, fsm: fsm, logs: logs}

	onDisk, err := raftShardsOnDisk(n.db)
	if err != nil {
		return err
	}
	for _, id := range onDisk {
		if id != MetaShard {
			if err := n.addReplica(id, nil); err != nil {
				return err
			}
		}
	}
	if fresh && peers != nil {
		// A new cluster: every node computes the same first placement from the same peers and
		// bootstraps the groups of the shards placed on it.
		for s, members := range initialPlacement(peers, cfg.ShardCount, cfg.ReplicationFactor) {
			if slices.Contains(members, cfg.NodeID) {
				if err := n.addReplica(s, peersNamed(peers, members)); err != nil {
					return err
				}
			}
		}
	}
	n.wg.Add(1)
	go n.manageLoop()
	return nil
}

// initialPlacement is the placement of a new cluster's shards over its first peers.
func initialPlacement(peers []Peer, shards, rf int) map[ShardID][]string {
	ids := make([]string, len(peers))
	for i, p := range peers {
		ids[i] = p.ID
	}
	slices.Sort(ids)
	return place(nil, shardRange(shards), ids, rf, true)
}

func peersNamed(peers []Peer, ids []string) []Peer {
	out := []Peer{}
	for _, p := range peers {
		if slices.Contains(ids, p.ID) {
			out = append(out, p)
		}
	}
	return out
}

// raftShardsOnDisk lists the shards with a Raft keyspace in db: the replicas this node held when
// it stopped.
func raftShardsOnDisk(db *pebble.DB) ([]ShardID, error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{raftKeyspace}, UpperBound: []byte{raftKeyspace + 1}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []ShardID
	for ok := it.First(); ok; {
		k := it.Key()
		if len(k) < 5 {
			ok = it.Next()
			continue
		}
		id := binary.BigEndian.Uint32(k[1:5])
		out = append(out, ShardID(id))
		if id == ^uint32(0) {
			break
		}
		ok = it.SeekGE(binary.BigEndian.AppendUint32([]byte{raftKeyspace}, id+1))
	}
	return out, it.Error()
}

// kickManage wakes the management loop (after a cluster-map change). It never blocks.
func (n *Node) kickManage() {
	select {
	case n.manageKick <- struct{}{}:
	default:
	}
}

// manageLoop runs the management rounds until the node closes.
func (n *Node) manageLoop() {
	defer n.wg.Done()
	st := &managed{lastSeen: map[string]time.Time{}}
	interval := n.cfg.ReconcileInterval
	for {
		t := time.NewTimer(interval + rand.N(interval/4+1))
		select {
		case <-n.stop:
			t.Stop()
			return
		case <-t.C:
		case <-n.manageKick:
			t.Stop()
		}
		n.manageRound(st)
	}
}

// manageRound is one round of the management loop.
func (n *Node) manageRound(st *managed) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*n.cfg.ReconcileInterval+time.Second)
	defer cancel()
	m := n.meta.fsm.snapshot()
	if n.meta.raft.State() == raft.Leader {
		if st.leaderSince.IsZero() {
			st.leaderSince = time.Now()
		}
		n.controlMeta(ctx, st, m)
	} else {
		st.leaderSince = time.Time{}
	}
	if _, member := m.Nodes[n.cfg.NodeID]; !member {
		if m.Shards == 0 && n.cfg.Join != "" {
			n.register(ctx, m) // a new node asks to join; the map arrives once it is in the meta group
		} else if m.Shards > 0 {
			// The map has been seen, without this node: it was removed. Never re-add it on its
			// own; drop what it still holds once the groups no longer count it.
			for _, s := range m.DataShards() {
				if r, hosted := n.replica(s); hosted {
					n.dropIfRemoved(ctx, r, m.Replicas[s], m)
				}
			}
			if !st.removedLogged && len(n.Shards()) == 0 {
				n.logger.Warn("this node is not in the cluster map (it was removed); it hosts nothing and can be shut down")
				st.removedLogged = true
			}
		}
		return
	}
	n.register(ctx, m)
	n.reconcile(ctx, m)
}

// register puts this node's address and attributes in the map if they are missing or stale.
// Only a member, or a new node joining, registers: a removed node stays out.
func (n *Node) register(ctx context.Context, m ClusterMap) {
	me := NodeInfo{ID: n.cfg.NodeID, RaftAddr: n.addr}
	if n.cfg.App != nil {
		me.Attrs = n.cfg.App.Attrs()
	}
	have, ok := m.Nodes[me.ID]
	if ok && have.RaftAddr == me.RaftAddr && mapsEqual(have.Attrs, me.Attrs) {
		return
	}
	if err := n.ProposeMeta(ctx, metaCommand{Op: "join", Node: &me}); err != nil {
		n.logger.Debug("registering in the cluster map", "err", err)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// reconcile makes this node's replicas, and the groups it leads, match the map.
func (n *Node) reconcile(ctx context.Context, m ClusterMap) {
	self := n.cfg.NodeID
	for _, s := range m.DataShards() {
		desired := m.Replicas[s]
		in := slices.Contains(desired, self)
		r, hosted := n.replica(s)
		switch {
		case in && !hosted:
			var peers []Peer // nil: join the group
			if members, creating := m.Creating[s]; creating && slices.Contains(members, self) {
				peers = []Peer{} // one of the members it is created with: bootstrap it with them
				for _, id := range members {
					peers = append(peers, Peer{ID: id, Addr: m.Nodes[id].RaftAddr})
				}
			}
			if err := n.addReplica(s, peers); err != nil {
				n.logger.Warn("starting a replica placed here", "shard", uint32(s), "err", err)
			}
		case hosted && r.raft.State() == raft.Leader:
			n.reconcileGroup(ctx, r, desired, m)
		case hosted && !in:
			n.dropIfRemoved(ctx, r, desired, m)
		}
	}
}

// reconcileGroup makes the group of r (led by this node) match desired, one change per round.
func (n *Node) reconcileGroup(ctx context.Context, r *replica, desired []string, m ClusterMap) {
	voters, nonvoters := ids(r.members(true)), ids(r.members(false))
	for _, id := range desired {
		if !slices.Contains(voters, id) && !slices.Contains(nonvoters, id) {
			n.membershipChange(r.id, "add non-voter "+id, n.AddNonvoter(ctx, r.id, id, m.Nodes[id].RaftAddr))
			return
		}
	}
	for _, id := range nonvoters {
		if slices.Contains(desired, id) && n.caughtUp(ctx, r, m.Nodes[id]) {
			n.membershipChange(r.id, "promote "+id, n.AddVoter(ctx, r.id, id, m.Nodes[id].RaftAddr))
			return
		}
	}
	for _, id := range desired {
		if !slices.Contains(voters, id) {
			return // wait until every desired member votes before removing anyone
		}
	}
	for _, id := range slices.Concat(nonvoters, voters) {
		if slices.Contains(desired, id) {
			continue
		}
		if id == n.cfg.NodeID {
			// Leaving a group this node leads: hand leadership to a desired member first, so the
			// group does not wait out an election. If a hand-over already failed in this term,
			// the leader removes itself instead (it steps down once the change commits).
			err := r.transferLeadership(desired[0], m.Nodes[desired[0]].RaftAddr, 0)
			if errors.Is(err, errTransferSpent) {
				n.membershipChange(r.id, "remove "+id+" (this node, the leader)", n.RemoveMember(ctx, r.id, id))
				return
			}
			n.membershipChange(r.id, "hand leadership to "+desired[0]+" before leaving", err)
			return
		}
		n.membershipChange(r.id, "remove "+id, n.RemoveMember(ctx, r.id, id))
		return
	}
}

func (n *Node) membershipChange(shard ShardID, what string, err error) {
	if err != nil {
		n.logger.Warn("shard membership change failed; retrying next round", "shard", uint32(shard), "change", what, "err", err)
		return
	}
	n.logger.Debug("shard membership changed", "shard", uint32(shard), "change", what)
}

func ids(peers []Peer) []string {
	out := make([]string, len(peers))
	for i, p := range peers {
		out[i] = p.ID
	}
	return out
}

// caughtUp reports whether node's replica of r's shard has applied nearly everything this
// leader has.
func (n *Node) caughtUp(ctx context.Context, r *replica, node NodeInfo) bool {
	st, err := n.fwd.status(ctx, nodeAt{node.ID, n.dialAddr(node.ID, node.RaftAddr)})
	if err != nil {
		return false
	}
	for _, s := range st.Shards {
		if s.Shard == r.id {
			return s.AppliedIndex > 0 && s.AppliedIndex+256 >= r.raft.LastIndex()
		}
	}
	return false
}

// dropIfRemoved removes this node's replica of r's shard once the shard's group, as a member the
// map lists sees it, no longer counts this node.
func (n *Node) dropIfRemoved(ctx context.Context, r *replica, desired []string, m ClusterMap) {
	for _, id := range desired {
		node, ok := m.Nodes[id]
		if !ok {
			continue
		}
		st, err := n.fwd.status(ctx, nodeAt{id, n.dialAddr(id, node.RaftAddr)})
		if err != nil {
			continue
		}
		for _, s := range st.Shards {
			if s.Shard != r.id || s.State != "leader" {
				continue
			}
			members := slices.Concat(ids(s.Voters), ids(s.Nonvoters))
			if !slices.Contains(members, n.cfg.NodeID) {
				if err := n.RemoveReplica(r.id); err != nil {
					n.logger.Warn("dropping a replica no longer placed here", "shard", uint32(r.id), "err", err)
				}
			}
			return
		}
	}
}

// controlMeta is the meta leader's part of a round.
func (n *Node) controlMeta(ctx context.Context, st *managed, m ClusterMap) {
	if m.Shards == 0 {
		n.initMap(ctx)
		return
	}
	statuses := n.pingNodes(ctx, st, m)
	n.reconcileMetaGroup(ctx, st, m)
	alive := func(id string) bool {
		seen := st.lastSeen[id]
		if seen.Before(st.leaderSince) {
			seen = st.leaderSince // a new leader gives every node a full grace period
		}
		return time.Since(seen) < n.cfg.DeadAfter
	}
	var eligible []string
	for id, node := range m.Nodes {
		if !node.Removing && alive(id) {
			eligible = append(eligible, id)
		}
	}
	slices.Sort(eligible)
	settled := true
	for _, s := range m.DataShards() {
		leader, ok := leaderView(statuses, s)
		if !ok || len(leader.Nonvoters) > 0 || !slices.Equal(slices.Sorted(slices.Values(ids(leader.Voters))), m.Replicas[s]) {
			n.logger.Debug("placement not settled", "shard", uint32(s), "leader_known", ok, "voters", ids(leader.Voters),
				"nonvoters", ids(leader.Nonvoters), "desired", m.Replicas[s])
			settled = false
			break
		}
	}
	desired := place(m.Replicas, m.DataShards(), eligible, m.RF, settled)
	changes := map[ShardID][]string{}
	for s, members := range desired {
		if !slices.Equal(members, m.Replicas[s]) {
			changes[s] = members
		}
	}
	if len(changes) > 0 {
		if err := n.ProposeMeta(ctx, metaCommand{Op: "place", Replicas: changes, IfIndex: m.Index}); err != nil {
			n.logger.Warn("placing replicas", "err", err)
		} else {
			n.logger.Info("placement changed", "shards", changes, "eligible", eligible, "settled", settled)
		}
		return // the map changed: decide again on the new one
	}
	// A shard added online is created once its group has a leader: from then on a node placed on
	// it joins rather than bootstraps.
	for s := range m.Creating {
		if _, ok := leaderView(statuses, s); ok {
			if err := n.ProposeMeta(ctx, metaCommand{Op: "created", Shard: s}); err != nil {
				n.logger.Warn("recording a new shard as created", "shard", uint32(s), "err", err)
			} else {
				n.logger.Info("new shard created", "shard", uint32(s), "members", m.Creating[s])
			}
			return // the map changed: decide again on the new one
		}
	}
	// Forget removed nodes once nothing lists them and no group counts them.
	for id, node := range m.Nodes {
		if !node.Removing || !settled {
			continue
		}
		held := false
		for _, s := range m.DataShards() {
			held = held || slices.Contains(m.Replicas[s], id)
		}
		if !held {
			if err := n.ProposeMeta(ctx, metaCommand{Op: "forget", ID: id, IfIndex: m.Index}); err != nil {
				n.logger.Warn("forgetting a removed node", "node", id, "err", err)
			}
			return // the map changed: decide again on the new one
		}
	}
}

// leaderView returns the status of shard s as its leader reported it.
func leaderView(statuses map[string]NodeStatus, s ShardID) (ShardStatus, bool) {
	for _, st := range statuses {
		for _, sh := range st.Shards {
			if sh.Shard == s && sh.State == "leader" {
				return sh, true
			}
		}
	}
	return ShardStatus{}, false
}

// initMap proposes the first cluster map: the meta group's members and the first placement.
func (n *Node) initMap(ctx context.Context) {
	peers := n.meta.members(true)
	m := ClusterMap{Shards: n.cfg.ShardCount, RF: n.cfg.ReplicationFactor, Nodes: map[string]NodeInfo{},
		Replicas: initialPlacement(peers, n.cfg.ShardCount, n.cfg.ReplicationFactor), Slots: EvenSlots(n.cfg.ShardCount)}
	for _, p := range peers {
		m.Nodes[p.ID] = NodeInfo{ID: p.ID, RaftAddr: p.Addr}
	}
	if err := n.ProposeMeta(ctx, metaCommand{Op: "init", Map: &m}); err != nil {
		n.logger.Warn("initializing the cluster map", "err", err)
	}
}

// members returns the meta group's voters (voters true) or non-voters.
func (mr *metaReplica) members(voters bool) []Peer { return groupMembers(mr.raft, voters) }

// pingNodes asks every node of the map for its status, records who answered, and returns the
// answers by node id (this node's own included).
func (n *Node) pingNodes(ctx context.Context, st *managed, m ClusterMap) map[string]NodeStatus {
	out := map[string]NodeStatus{}
	for _, p := range n.ClusterStatusOf(ctx, m) {
		if p.Status != nil {
			out[p.ID] = *p.Status
			st.lastSeen[p.ID] = time.Now()
		}
	}
	return out
}

// reconcileMetaGroup adds the map's nodes to the meta group (as non-voters, promoted while there
// are fewer than maxMetaVoters voters) and removes forgotten ones.
func (n *Node) reconcileMetaGroup(ctx context.Context, st *managed, m ClusterMap) {
	const maxMetaVoters = 5
	voters, nonvoters := ids(n.meta.members(true)), ids(n.meta.members(false))
	for id, node := range m.Nodes {
		if !slices.Contains(voters, id) && !slices.Contains(nonvoters, id) && !node.Removing {
			err := n.meta.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(node.RaftAddr), 0, time.Second).Error()
			n.membershipChange(MetaShard, "add non-voter "+id, err)
			return
		}
	}
	for _, id := range nonvoters {
		if node, ok := m.Nodes[id]; ok && !node.Removing && len(voters) < maxMetaVoters && !st.lastSeen[id].IsZero() {
			err := n.meta.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(node.RaftAddr), 0, time.Second).Error()
			n.membershipChange(MetaShard, "promote "+id, err)
			return
		}
	}
	for _, id := range slices.Concat(nonvoters, voters) {
		if _, ok := m.Nodes[id]; ok || id == n.cfg.NodeID {
			continue
		}
		err := n.meta.raft.RemoveServer(raft.ServerID(id), 0, time.Second).Error()
		n.membershipChange(MetaShard, "remove forgotten "+id, err)
		return
	}
}

// ClusterStatusOf asks every node of the map for its status, like ClusterStatus.
func (n *Node) ClusterStatusOf(ctx context.Context, m ClusterMap) []PeerStatus {
	peers := map[string]string{}
	for id, node := range m.Nodes {
		peers[id] = node.RaftAddr
	}
	return n.statusOf(ctx, peers)
}

// ClusterMap returns the cluster map as this node's meta replica has it; ok is false for a node
// that is not part of a managed cluster.
func (n *Node) ClusterMap() (m ClusterMap, ok bool) {
	if n.meta == nil {
		return ClusterMap{}, false
	}
	return n.meta.fsm.snapshot(), true
}

// SlotTable returns the cluster map's slot table, which routes keys to shards; nil until this
// node has the map (a joining node gets it once it has joined) or for an unmanaged node.
func (n *Node) SlotTable() *SlotTable {
	if n.meta == nil {
		return nil
	}
	return n.meta.fsm.slots.Load()
}

// RemoveNode marks node id for removal: its replicas move to other nodes, after which it is
// dropped from the map and can be shut down. It fails with ErrMetaRefused for an unknown node or
// the last one.
func (n *Node) RemoveNode(ctx context.Context, id string) error {
	return n.ProposeMeta(ctx, metaCommand{Op: "remove", ID: id})
}

// ProposeMeta replicates c in the meta shard, through its leader wherever it is: the local meta
// replica's leader, or, for a node still joining, the node named by Config.Join.
func (n *Node) ProposeMeta(ctx context.Context, c metaCommand) error {
	if n.meta == nil {
		return errors.New("raftstore: not a managed cluster")
	}
	c.V = metaCommandV1
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	var hint nodeAt
	for hop := 0; hop <= fwdMaxHops; hop++ {
		to := hint
		for to.addr == "" {
			if n.meta.raft.State() == raft.Leader {
				return n.proposeMetaLocal(ctx, data)
			}
			a, id := n.meta.raft.LeaderWithID()
			switch {
			case id != "":
				to = nodeAt{string(id), n.dialAddr(string(id), string(a))}
			case n.cfg.Join != "":
				to = nodeAt{"", n.cfg.Join} // an address only: any node of the cluster relays the join
			default: // an election is under way: wait for its outcome, within ctx
				select {
				case <-ctx.Done():
					return &NotLeaderError{Shard: MetaShard}
				case <-time.After(10 * time.Millisecond):
				}
			}
		}
		r, err := n.fwd.roundTrip(ctx, to, &fwdRequest{kind: fwdPropose, shard: MetaShard, command: data})
		if err == nil {
			err = r.err
		}
		var nl *NotLeaderError
		if !errors.As(err, &nl) || nl.LeaderID == "" {
			return err
		}
		hint = nodeAt{nl.LeaderID, n.dialAddr(nl.LeaderID, nl.LeaderAddr)}
	}
	return &NotLeaderError{Shard: MetaShard}
}

// proposeMetaLocal applies an encoded meta command through this node's meta replica.
func (n *Node) proposeMetaLocal(ctx context.Context, data []byte) error {
	if n.meta == nil {
		return ErrNoShard
	}
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		if timeout = time.Until(dl); timeout <= 0 {
			return ErrTimeout
		}
	}
	f := n.meta.raft.Apply(data, timeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			a, id := n.meta.raft.LeaderWithID()
			return &NotLeaderError{Shard: MetaShard, LeaderID: string(id), LeaderAddr: string(a)}
		}
		return fmt.Errorf("raftstore: meta shard: %w", err)
	}
	if err, ok := f.Response().(error); ok {
		return err
	}
	return nil
}

// RevokeDevice replicates r in the meta shard (see Revocation): once applied, every node refuses
// the device's tokens issued at or before r.Before and closes its sessions (App.DeviceRevoked).
// It fails with ErrMetaRefused for a revocation without valid ids or times.
func (n *Node) RevokeDevice(ctx context.Context, r Revocation) error {
	return n.ProposeMeta(ctx, metaCommand{Op: "revoke", Revoke: &r})
}

// Revocation returns the revocation of user's device as this node's meta replica has it, if
// any. A node that is not part of a managed cluster has none.
func (n *Node) Revocation(user, device string) (Revocation, bool) {
	if n.meta == nil {
		return Revocation{}, false
	}
	return n.meta.fsm.revocation(user, device)
}

// MetaCurrent reports whether the meta replica has applied every entry its Raft log held when
// the node started: until then its revocations (and map) may be older than what the node knew
// before a restart, since Raft re-applies the log only once the node hears of the commit index.
// True for a node that is not part of a managed cluster.
func (n *Node) MetaCurrent() bool {
	return n.meta == nil || n.meta.raft.AppliedIndex() >= n.metaStart
}

// AddNode registers node id at Raft address raftAddr in the cluster map before it starts (it can
// also just start with Config.Join, which registers it). Placement counts it once it answers.
func (n *Node) AddNode(ctx context.Context, id, raftAddr string) error {
	return n.ProposeMeta(ctx, metaCommand{Op: "join", Node: &NodeInfo{ID: id, RaftAddr: raftAddr}})
}

// AddShard creates a data shard online and returns its id, the next one: a Raft group placed on
// the RF nodes holding fewest replicas, owning no hash slot until slots are moved to it. A shard
// created by an earlier, unanswered attempt is not created twice: the call returns the id it
// asked for.
func (n *Node) AddShard(ctx context.Context) (ShardID, error) {
	m, ok := n.ClusterMap()
	if !ok || m.Shards == 0 {
		return 0, fmt.Errorf("%w: this node does not have the cluster map yet; retry", ErrMetaRefused)
	}
	id := ShardID(m.Shards + 1)
	return id, n.ProposeMeta(ctx, metaCommand{Op: "add-shard", Shard: id})
}

// Removed reports whether this node has seen the cluster map without itself: it was removed
// from the cluster, hosts nothing and should stop serving.
func (n *Node) Removed() bool {
	m, ok := n.ClusterMap()
	if !ok || m.Shards == 0 {
		return false
	}
	_, member := m.Nodes[n.cfg.NodeID]
	return !member
}
