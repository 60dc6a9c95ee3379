// Package cluster is the control plane of a managed cluster: what the cluster looks like and how
// it changes. Its state is the cluster map, held by the meta group every node hosts
// (raftstore.MetaGroup): the nodes, which of them hold a replica of each data shard, the slot
// table that routes users and conversations to shards, the users, conversations and slot ranges
// being moved or split, and device revocations. Around it run placement (place), the management
// loop that makes replicas and groups match the map, and the proposals operators and the move
// driver make (StartMove, AddShard, RevokeDevice, …).
//
// raftstore replicates and knows nothing of this: the package drives it through the node's
// exported seam (host the meta group, start and drop replicas, change a group's members, hand
// its leadership over, ask nodes for their status).
package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/raftstore"
)

// ShardID and Peer are raftstore's.
type (
	ShardID = raftstore.ShardID
	Peer    = raftstore.Peer
)

// MetaShard is the meta group's id (raftstore.MetaShard).
const MetaShard = raftstore.MetaShard

// ErrMetaRefused reports a refused change of the map (raftstore.ErrMetaRefused).
var ErrMetaRefused = raftstore.ErrMetaRefused

// Config configures a node of a managed cluster. Zero fields take the defaults of
// DefaultConfig.
type Config struct {
	// Node configures the node (raftstore.New). Its Shards must be nil: the cluster places its
	// data shards itself. On a new cluster's first start its Peers are the first nodes (nil:
	// this node alone); a node joining an existing cluster sets Join instead.
	Node raftstore.Config
	// ShardCount is the number of data shards (numbered 1..ShardCount) of a new cluster; the
	// same on every node. Required.
	ShardCount int
	// ReplicationFactor is the replicas per data shard (capped by the number of nodes).
	// Default 3.
	ReplicationFactor int
	// Join is the Raft address of any member of the cluster this new node joins.
	Join string
	// DeadAfter is how long a node may go unheard before its replicas are placed elsewhere.
	// Default 30s.
	DeadAfter time.Duration
	// ReconcileInterval is how often the node compares the cluster map with what it hosts and
	// what its groups are. Default 500ms.
	ReconcileInterval time.Duration
	// DeviceRevoked, if set, is called with every device revocation the meta group applies (and
	// with each one a snapshot installed on this node holds), on the meta group's apply
	// goroutine: it must not block. syncd closes the device's sessions on this node.
	DeviceRevoked func(Revocation)
}

// DefaultConfig returns what the zero fields of a Config stand for (the Node's own defaults are
// raftstore.DefaultConfig's).
func DefaultConfig() Config {
	return Config{ReplicationFactor: 3, DeadAfter: 30 * time.Second, ReconcileInterval: 500 * time.Millisecond}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.ReplicationFactor = cmp.Or(c.ReplicationFactor, d.ReplicationFactor)
	c.DeadAfter = cmp.Or(c.DeadAfter, d.DeadAfter)
	c.ReconcileInterval = cmp.Or(c.ReconcileInterval, d.ReconcileInterval)
	return c
}

// Validate reports every problem with the configuration (after defaults), the node's included,
// joined.
func (c Config) Validate() error {
	c = c.withDefaults()
	errs := []error{c.Node.Validate()}
	if c.Node.Shards != nil || c.ShardCount < 1 {
		errs = append(errs, errors.New("cluster: a managed node needs ShardCount ≥ 1 and no Shards list"))
	}
	if c.Join != "" && c.Node.Peers != nil {
		errs = append(errs, errors.New("cluster: Join and Peers exclude each other: join an existing cluster, or start a new one"))
	}
	if len(c.Node.Peers) > 0 && !slices.ContainsFunc(c.Node.Peers, func(p Peer) bool { return p.ID == c.Node.NodeID }) {
		errs = append(errs, fmt.Errorf("cluster: Peers must include this node (%q)", c.Node.NodeID))
	}
	if c.DeadAfter < 0 || c.ReconcileInterval < 0 {
		errs = append(errs, errors.New("cluster: DeadAfter and ReconcileInterval must not be negative (0 means the default)"))
	}
	return errors.Join(errs...)
}

// Cluster is this node's part of a managed cluster: the node, its member of the meta group, and
// the management loop. It is safe for concurrent use.
type Cluster struct {
	cfg    Config
	node   *raftstore.Node
	meta   *raftstore.MetaGroup
	fsm    *metaFSM
	logger *slog.Logger

	kick      chan struct{} // wakes the management loop
	stop      chan struct{} // closed by Close
	done      chan struct{} // closed when the management loop has returned
	closeOnce sync.Once
	closeErr  error
}

// managed holds the management loop's memory (only that goroutine touches it).
type managed struct {
	lastSeen      map[string]time.Time // when each node last answered the meta leader
	leaderSince   time.Time            // when this node last became meta leader
	removedLogged bool                 // the "this node was removed" warning was given
	// inMap: this node has seen itself in the map since it started. A node joining for the first
	// time may receive a map without itself first (the meta group's snapshot, older than its
	// join): that is not a removal.
	inMap bool
}

// Start opens the node (raftstore.New), starts its member of the meta group and the data
// replicas it held, bootstraps a new cluster on its first start, and runs the management loop.
func Start(cfg Config) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ncfg := cfg.Node
	ncfg.Shards = []ShardID{} // the map places them
	n, err := raftstore.New(ncfg)
	if err != nil {
		return nil, err
	}
	logger := cmp.Or(cfg.Node.Logger, slog.Default()).With("node", ncfg.NodeID)
	c := &Cluster{cfg: cfg, node: n, logger: logger, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if err := c.start(); err != nil {
		close(c.done)
		return nil, errors.Join(err, n.Close())
	}
	go c.manageLoop()
	return c, nil
}

func (c *Cluster) start() error {
	var peers []Peer // nil: join an existing cluster
	if c.cfg.Join == "" {
		peers = c.cfg.Node.Peers
		if peers == nil {
			peers = []Peer{{ID: c.cfg.Node.NodeID, Addr: c.node.Addr()}}
		}
	}
	c.fsm = newMetaFSM()
	c.fsm.onChange = c.kickManage
	c.fsm.onRevoke = c.cfg.DeviceRevoked
	var err error
	if c.meta, err = c.node.HostMeta(c.fsm, peers); err != nil {
		return err
	}
	onDisk, err := c.node.ShardsOnDisk()
	if err != nil {
		return err
	}
	for _, id := range onDisk {
		if id != MetaShard {
			if err := c.node.AddReplica(id); err != nil {
				return err
			}
		}
	}
	if c.meta.Fresh() && peers != nil {
		// A new cluster: every node computes the same first placement from the same peers and
		// bootstraps the groups of the shards placed on it.
		for s, members := range initialPlacement(peers, c.cfg.ShardCount, c.cfg.ReplicationFactor) {
			if slices.Contains(members, c.cfg.Node.NodeID) {
				if err := c.node.BootstrapReplica(s, peersNamed(peers, members)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Node returns the node this cluster runs on.
func (c *Cluster) Node() *raftstore.Node { return c.node }

// Close stops the management loop, then the node. It is safe to call more than once.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		close(c.stop)
		<-c.done
		c.closeErr = c.node.Close()
	})
	return c.closeErr
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

// kickManage wakes the management loop (after a cluster-map change). It never blocks.
func (c *Cluster) kickManage() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// manageLoop runs the management rounds until Close.
func (c *Cluster) manageLoop() {
	defer close(c.done)
	st := &managed{lastSeen: map[string]time.Time{}}
	interval := c.cfg.ReconcileInterval
	for {
		t := time.NewTimer(interval + rand.N(interval/4+1))
		select {
		case <-c.stop:
			t.Stop()
			return
		case <-t.C:
		case <-c.kick:
			t.Stop()
		}
		c.manageRound(st)
	}
}

// manageRound is one round of the management loop.
func (c *Cluster) manageRound(st *managed) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*c.cfg.ReconcileInterval+time.Second)
	defer cancel()
	m := c.fsm.snapshot()
	if c.meta.Leads() {
		if st.leaderSince.IsZero() {
			st.leaderSince = time.Now()
		}
		c.controlMeta(ctx, st, m)
	} else {
		st.leaderSince = time.Time{}
	}
	_, member := m.Nodes[c.cfg.Node.NodeID]
	st.inMap = st.inMap || member
	if !member {
		joining := c.cfg.Join != "" && c.meta.Fresh() && !st.inMap
		if m.Shards == 0 && c.cfg.Join != "" || joining {
			c.register(ctx, m) // a new node asks to join; the map arrives once it is in the meta group
		} else if m.Shards > 0 {
			// The map has been seen, without this node: it was removed. Never re-add it on its
			// own; drop what it still holds once the groups no longer count it.
			for _, s := range m.DataShards() {
				if slices.Contains(c.node.Shards(), s) {
					c.dropIfRemoved(ctx, s, m.Replicas[s], m)
				}
			}
			if !st.removedLogged && len(c.node.Shards()) == 0 {
				c.logger.Warn("this node is not in the cluster map (it was removed); it hosts nothing and can be shut down")
				st.removedLogged = true
			}
		}
		return
	}
	c.register(ctx, m)
	c.reconcile(ctx, m)
}

// register puts this node's address and attributes in the map if they are missing or stale.
// Only a member, or a new node joining, registers: a removed node stays out.
func (c *Cluster) register(ctx context.Context, m ClusterMap) {
	me := NodeInfo{ID: c.cfg.Node.NodeID, RaftAddr: c.node.Addr(), Attrs: c.node.Attrs()}
	have, ok := m.Nodes[me.ID]
	if ok && have.RaftAddr == me.RaftAddr && mapsEqual(have.Attrs, me.Attrs) {
		return
	}
	if err := c.propose(ctx, metaCommand{Op: "join", Node: &me}); err != nil {
		c.logger.Debug("registering in the cluster map", "err", err)
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
func (c *Cluster) reconcile(ctx context.Context, m ClusterMap) {
	self := c.cfg.Node.NodeID
	hostedShards := c.node.Shards()
	for _, s := range m.DataShards() {
		desired := m.Replicas[s]
		in := slices.Contains(desired, self)
		hosted := slices.Contains(hostedShards, s)
		switch {
		case in && !hosted:
			var err error
			if members, creating := m.Creating[s]; creating && slices.Contains(members, self) {
				// One of the members it is created with: bootstrap it with them.
				var peers []Peer
				for _, id := range members {
					peers = append(peers, Peer{ID: id, Addr: m.Nodes[id].RaftAddr})
				}
				err = c.node.BootstrapReplica(s, peers)
			} else {
				err = c.node.AddReplica(s) // join the group
			}
			if err != nil {
				c.logger.Warn("starting a replica placed here", "shard", uint32(s), "err", err)
			}
		case hosted && c.node.Leads(s):
			// The group's members, as the leader knows them, only for a group this node leads.
			if st, err := c.node.ShardStatus(s); err == nil && st.State == "leader" {
				c.reconcileGroup(ctx, st, desired, m)
			}
		case hosted && !in:
			c.dropIfRemoved(ctx, s, desired, m)
		}
	}
}

// reconcileGroup makes the group of the shard st is this node's (leading) replica of match
// desired, one change per round.
func (c *Cluster) reconcileGroup(ctx context.Context, st raftstore.ShardStatus, desired []string, m ClusterMap) {
	n, s := c.node, st.Shard
	voters, nonvoters := ids(st.Voters), ids(st.Nonvoters)
	for _, id := range desired {
		if !slices.Contains(voters, id) && !slices.Contains(nonvoters, id) {
			c.membershipChange(s, "add non-voter "+id, n.AddNonvoter(ctx, s, id, m.Nodes[id].RaftAddr))
			return
		}
	}
	for _, id := range nonvoters {
		if slices.Contains(desired, id) && c.caughtUp(ctx, st, m.Nodes[id]) {
			c.membershipChange(s, "promote "+id, n.AddVoter(ctx, s, id, m.Nodes[id].RaftAddr))
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
		if id == c.cfg.Node.NodeID {
			// Leaving a group this node leads: hand leadership to a desired member first, so the
			// group does not wait out an election. If a hand-over already failed in this term,
			// the leader removes itself instead (it steps down once the change commits).
			err := n.TransferLeadership(s, desired[0])
			if errors.Is(err, raftstore.ErrTransferSpent) {
				c.membershipChange(s, "remove "+id+" (this node, the leader)", n.RemoveMember(ctx, s, id))
				return
			}
			c.membershipChange(s, "hand leadership to "+desired[0]+" before leaving", err)
			return
		}
		c.membershipChange(s, "remove "+id, n.RemoveMember(ctx, s, id))
		return
	}
}

func (c *Cluster) membershipChange(shard ShardID, what string, err error) {
	if err != nil {
		c.logger.Warn("shard membership change failed; retrying next round", "shard", uint32(shard), "change", what, "err", err)
		return
	}
	c.logger.Debug("shard membership changed", "shard", uint32(shard), "change", what)
}

func ids(peers []Peer) []string {
	out := make([]string, len(peers))
	for i, p := range peers {
		out[i] = p.ID
	}
	return out
}

// statusOf asks node for its status.
func (c *Cluster) statusOf(ctx context.Context, node NodeInfo) (raftstore.NodeStatus, bool) {
	sts := c.node.StatusOf(ctx, map[string]string{node.ID: node.RaftAddr})
	if len(sts) != 1 || sts[0].Status == nil {
		return raftstore.NodeStatus{}, false
	}
	return *sts[0].Status, true
}

// caughtUp reports whether node's replica of the shard whose leader's status is leader has
// applied nearly everything the leader has.
func (c *Cluster) caughtUp(ctx context.Context, leader raftstore.ShardStatus, node NodeInfo) bool {
	st, ok := c.statusOf(ctx, node)
	if !ok {
		return false
	}
	for _, s := range st.Shards {
		if s.Shard == leader.Shard {
			return s.AppliedIndex > 0 && s.AppliedIndex+256 >= leader.LastIndex
		}
	}
	return false
}

// dropIfRemoved removes this node's replica of shard once the shard's group, as a member the map
// lists sees it, no longer counts this node.
func (c *Cluster) dropIfRemoved(ctx context.Context, shard ShardID, desired []string, m ClusterMap) {
	for _, id := range desired {
		node, ok := m.Nodes[id]
		if !ok {
			continue
		}
		st, ok := c.statusOf(ctx, node)
		if !ok {
			continue
		}
		for _, s := range st.Shards {
			if s.Shard != shard || s.State != "leader" {
				continue
			}
			members := slices.Concat(ids(s.Voters), ids(s.Nonvoters))
			if !slices.Contains(members, c.cfg.Node.NodeID) {
				if err := c.node.RemoveReplica(shard); err != nil {
					c.logger.Warn("dropping a replica no longer placed here", "shard", uint32(shard), "err", err)
				}
			}
			return
		}
	}
}

// controlMeta is the meta leader's part of a round.
func (c *Cluster) controlMeta(ctx context.Context, st *managed, m ClusterMap) {
	if m.Shards == 0 {
		c.initMap(ctx)
		return
	}
	statuses := c.pingNodes(ctx, st, m)
	c.reconcileMetaGroup(st, m)
	alive := func(id string) bool {
		seen := st.lastSeen[id]
		if seen.Before(st.leaderSince) {
			seen = st.leaderSince // a new leader gives every node a full grace period
		}
		return time.Since(seen) < c.cfg.DeadAfter
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
			c.logger.Debug("placement not settled", "shard", uint32(s), "leader_known", ok, "voters", ids(leader.Voters),
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
		if err := c.propose(ctx, metaCommand{Op: "place", Replicas: changes, IfIndex: m.Index}); err != nil {
			c.logger.Warn("placing replicas", "err", err)
		} else {
			c.logger.Info("placement changed", "shards", changes, "eligible", eligible, "settled", settled)
		}
		return // the map changed: decide again on the new one
	}
	// A shard added online is created once its group has a leader: from then on a node placed on
	// it joins rather than bootstraps.
	for s := range m.Creating {
		if _, ok := leaderView(statuses, s); ok {
			if err := c.propose(ctx, metaCommand{Op: "created", Shard: s}); err != nil {
				c.logger.Warn("recording a new shard as created", "shard", uint32(s), "err", err)
			} else {
				c.logger.Info("new shard created", "shard", uint32(s), "members", m.Creating[s])
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
			if err := c.propose(ctx, metaCommand{Op: "forget", ID: id, IfIndex: m.Index}); err != nil {
				c.logger.Warn("forgetting a removed node", "node", id, "err", err)
			}
			return // the map changed: decide again on the new one
		}
	}
}

// leaderView returns the status of shard s as its leader reported it.
func leaderView(statuses map[string]raftstore.NodeStatus, s ShardID) (raftstore.ShardStatus, bool) {
	for _, st := range statuses {
		for _, sh := range st.Shards {
			if sh.Shard == s && sh.State == "leader" {
				return sh, true
			}
		}
	}
	return raftstore.ShardStatus{}, false
}

// initMap proposes the first cluster map: the meta group's members and the first placement.
func (c *Cluster) initMap(ctx context.Context) {
	peers := c.meta.Members(true)
	m := ClusterMap{Shards: c.cfg.ShardCount, RF: c.cfg.ReplicationFactor, Nodes: map[string]NodeInfo{},
		Replicas: initialPlacement(peers, c.cfg.ShardCount, c.cfg.ReplicationFactor), Slots: EvenSlots(c.cfg.ShardCount)}
	for _, p := range peers {
		m.Nodes[p.ID] = NodeInfo{ID: p.ID, RaftAddr: p.Addr}
	}
	if err := c.propose(ctx, metaCommand{Op: "init", Map: &m}); err != nil {
		c.logger.Warn("initializing the cluster map", "err", err)
	}
}

// pingNodes asks every node of the map for its status, records who answered, and returns the
// answers by node id (this node's own included).
func (c *Cluster) pingNodes(ctx context.Context, st *managed, m ClusterMap) map[string]raftstore.NodeStatus {
	out := map[string]raftstore.NodeStatus{}
	for _, p := range c.StatusOf(ctx, m) {
		if p.Status != nil {
			out[p.ID] = *p.Status
			st.lastSeen[p.ID] = time.Now()
		}
	}
	return out
}

// reconcileMetaGroup adds the map's nodes to the meta group (as non-voters, promoted while there
// are fewer than maxMetaVoters voters) and removes forgotten ones.
func (c *Cluster) reconcileMetaGroup(st *managed, m ClusterMap) {
	const maxMetaVoters = 5
	voters, nonvoters := ids(c.meta.Members(true)), ids(c.meta.Members(false))
	for id, node := range m.Nodes {
		if !slices.Contains(voters, id) && !slices.Contains(nonvoters, id) && !node.Removing {
			c.membershipChange(MetaShard, "add non-voter "+id, c.meta.AddNonvoter(id, node.RaftAddr))
			return
		}
	}
	for _, id := range nonvoters {
		if node, ok := m.Nodes[id]; ok && !node.Removing && len(voters) < maxMetaVoters && !st.lastSeen[id].IsZero() {
			c.membershipChange(MetaShard, "promote "+id, c.meta.AddVoter(id, node.RaftAddr))
			return
		}
	}
	for _, id := range slices.Concat(nonvoters, voters) {
		if _, ok := m.Nodes[id]; ok || id == c.cfg.Node.NodeID {
			continue
		}
		c.membershipChange(MetaShard, "remove forgotten "+id, c.meta.RemoveMember(id))
		return
	}
}

// StatusOf asks every node of the map for its status, like raftstore.Node.ClusterStatus.
func (c *Cluster) StatusOf(ctx context.Context, m ClusterMap) []raftstore.PeerStatus {
	peers := map[string]string{}
	for id, node := range m.Nodes {
		peers[id] = node.RaftAddr
	}
	return c.node.StatusOf(ctx, peers)
}

// Map returns the cluster map as this node's member of the meta group has it. ok is false for a
// nil Cluster (a node that is not part of a managed cluster), so that callers holding one
// optionally need not check.
func (c *Cluster) Map() (m ClusterMap, ok bool) {
	if c == nil {
		return ClusterMap{}, false
	}
	return c.fsm.snapshot(), true
}

// SlotTable returns the cluster map's slot table, which routes keys to shards; nil until this
// node has the map (a joining node gets it once it has joined) or for a nil Cluster.
func (c *Cluster) SlotTable() *SlotTable {
	if c == nil {
		return nil
	}
	return c.fsm.slots.Load()
}

// RemoveNode marks node id for removal: its replicas move to other nodes, after which it is
// dropped from the map and can be shut down. It fails with ErrMetaRefused for an unknown node or
// the last one.
func (c *Cluster) RemoveNode(ctx context.Context, id string) error {
	return c.propose(ctx, metaCommand{Op: "remove", ID: id})
}

// propose replicates cmd in the meta group, through its leader wherever it is (or, for a node
// still joining, through the node named by Config.Join).
func (c *Cluster) propose(ctx context.Context, cmd metaCommand) error {
	cmd.V = metaCommandV1
	return c.meta.Propose(ctx, cmd, c.cfg.Join)
}

// RevokeDevice replicates r in the meta group (see Revocation): once applied, every node refuses
// the device's tokens issued at or before r.Before and closes its sessions
// (Config.DeviceRevoked). It fails with ErrMetaRefused for a revocation without valid ids or
// times.
func (c *Cluster) RevokeDevice(ctx context.Context, r Revocation) error {
	return c.propose(ctx, metaCommand{Op: "revoke", Revoke: &r})
}

// Revocation returns the revocation of user's device as this node's member of the meta group
// has it, if any. A nil Cluster has none.
func (c *Cluster) Revocation(user, device string) (Revocation, bool) {
	if c == nil {
		return Revocation{}, false
	}
	return c.fsm.revocation(user, device)
}

// Current reports whether the meta group's member has applied every entry its Raft log held
// when the node started (raftstore.MetaGroup.Current): until then its revocations (and map) may
// be older than what the node knew before a restart. True for a nil Cluster.
func (c *Cluster) Current() bool {
	return c == nil || c.meta.Current()
}

// AddNode registers node id at Raft address raftAddr in the cluster map before it starts (it can
// also just start with Config.Join, which registers it). Placement counts it once it answers.
func (c *Cluster) AddNode(ctx context.Context, id, raftAddr string) error {
	return c.propose(ctx, metaCommand{Op: "join", Node: &NodeInfo{ID: id, RaftAddr: raftAddr}})
}

// AddShard creates a data shard online and returns its id, the next one: a Raft group placed on
// the RF nodes holding fewest replicas, owning no hash slot until slots are moved to it. A shard
// created by an earlier, unanswered attempt is not created twice: the call returns the id it
// asked for.
func (c *Cluster) AddShard(ctx context.Context) (ShardID, error) {
	m, _ := c.Map()
	if m.Shards == 0 {
		return 0, fmt.Errorf("%w: this node does not have the cluster map yet; retry", ErrMetaRefused)
	}
	id := ShardID(m.Shards + 1)
	return id, c.propose(ctx, metaCommand{Op: "add-shard", Shard: id})
}

// Removed reports whether this node has seen the cluster map without itself: it was removed
// from the cluster, hosts nothing and should stop serving. False for a nil Cluster.
func (c *Cluster) Removed() bool {
	m, ok := c.Map()
	if !ok || m.Shards == 0 {
		return false
	}
	_, member := m.Nodes[c.cfg.Node.NodeID]
	return !member
}
