package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/syncd-dev/syncd/log"
)

// The meta shard is a Raft group, hosted by every node of a managed cluster, whose state is the
// cluster map: the nodes, which nodes should hold a replica of each data shard, and the slot
// table that routes keys to shards (every node routes by this one table, whatever its own
// configuration says). The map is
// small and changes rarely, so its state machine keeps it in memory and persists it through
// Raft snapshots and the Raft log (restored at start), unlike the data shards' persistent state
// machines.
//
// Commands are JSON (an operator-facing, slowly changing format; the version field lets a later
// release read what an earlier one wrote):
//
//	{"v":1, "op":"init",   "map":{…}}            first map of a new cluster (ignored once there is one)
//	{"v":1, "op":"join",   "node":{…}}           add a node or update its address and attributes
//	{"v":1, "op":"remove", "id":"n2"}            mark a node for removal: placement moves its replicas away
//	{"v":1, "op":"forget", "id":"n2"}            drop a node that holds no replica any more
//	{"v":1, "op":"place",  "replicas":{"3":[…]}} set the desired members of some shards
//	{"v":1, "op":"add-shard", "shard":9}         create data shard 9 (the next id) online
//	{"v":1, "op":"created",   "shard":9}         shard 9's group has a leader: stop bootstrapping it
//	{"v":1, "op":"revoke", "revoke":{"user":"alice","device":"phone","before":…,"until":…}}
//	                                             revoke a device's tokens (Revocation)
//
// "place" and "forget" carry "if_index", the map's Index the decision was made on: if the map
// changed since, they are refused and the meta leader decides again on the new map. Without it
// a decision made just before a node was marked for removal could place replicas back on it.

// Besides the map, the meta shard holds device revocations: every node hosts it, so every node
// learns of a revocation by applying it (and closes the device's sessions, through
// Config.DeviceRevoked), and checks tokens against its own replica without asking anyone. A
// revocation is kept until no token it covers can be valid any more (Revocation.Until), so the
// set stays as small as the revocations of one maximum token lifetime. Revocations are not part
// of ClusterMap (they neither change its Index nor wake the management loop); snapshots carry
// them under "revoked" next to the map's fields.

// ClusterMap is the cluster's layout as the meta shard holds it.
type ClusterMap struct {
	Index    uint64               `json:"index"`  // Raft index of the last change
	Shards   int                  `json:"shards"` // data shards, numbered 1..Shards
	RF       int                  `json:"rf"`     // replicas per data shard (capped by the nodes)
	Nodes    map[string]NodeInfo  `json:"nodes"`
	Replicas map[ShardID][]string `json:"replicas"` // desired members of each data shard, sorted
	// Slots is the slot table: which shard owns each hash slot. Maps written before the table
	// was part of the map lack it; they read as EvenSlots(Shards), which is what was used then.
	Slots []SlotRange `json:"slots,omitempty"`
	// Creating holds the shards added online whose Raft group has not had a leader yet, with the
	// members it is created with. Each of those nodes bootstraps the group with exactly these
	// members (so all of them write the same first configuration, as the first nodes of a new
	// cluster do); every other node, and each of them once the entry is gone, joins it instead.
	// The meta leader drops the entry once the group has a leader.
	Creating map[ShardID][]string `json:"creating,omitempty"`
	// Overrides pins moved users to their shard, before their slot (moves.go).
	Overrides map[string]ShardID `json:"overrides,omitempty"`
	// ConvOverrides pins moved conversations to their home shard, before their slot.
	ConvOverrides map[string]ShardID `json:"conv_overrides,omitempty"`
	// Moves holds the moves in progress by id (moves.go).
	Moves map[uint64]*MoveInfo `json:"moves,omitempty"`
	// Splits holds the users whose streams are split into sub-logs, once their split is done
	// (moves.go, docs/MOVES.md "Sub-logs").
	Splits map[string]SplitInfo `json:"splits,omitempty"`
}

// NodeInfo is one node of the cluster map.
type NodeInfo struct {
	ID       string            `json:"id"`
	RaftAddr string            `json:"raft_addr"`
	Attrs    map[string]string `json:"attrs,omitempty"`
	Removing bool              `json:"removing,omitempty"` // being removed: hosts nothing once placement is done
}

// Clone returns a deep copy of m.
func (m ClusterMap) Clone() ClusterMap {
	out := m
	out.Nodes = make(map[string]NodeInfo, len(m.Nodes))
	for id, n := range m.Nodes {
		n.Attrs = maps.Clone(n.Attrs)
		out.Nodes[id] = n
	}
	out.Slots = slices.Clone(m.Slots)
	out.Replicas = make(map[ShardID][]string, len(m.Replicas))
	for s, r := range m.Replicas {
		out.Replicas[s] = slices.Clone(r)
	}
	if m.Creating != nil {
		out.Creating = make(map[ShardID][]string, len(m.Creating))
		for s, r := range m.Creating {
			out.Creating[s] = slices.Clone(r)
		}
	}
	out.Overrides = maps.Clone(m.Overrides)
	out.ConvOverrides = maps.Clone(m.ConvOverrides)
	out.Splits = maps.Clone(m.Splits)
	if m.Moves != nil {
		out.Moves = make(map[uint64]*MoveInfo, len(m.Moves))
		for id, mv := range m.Moves {
			out.Moves[id] = mv.clone()
		}
	}
	return out
}

// DataShards returns the ids of the data shards, 1..Shards.
func (m ClusterMap) DataShards() []ShardID { return shardRange(m.Shards) }

const metaCommandV1 = 1

type metaCommand struct {
	V        int                  `json:"v"`
	Op       string               `json:"op"`
	Map      *ClusterMap          `json:"map,omitempty"`
	Node     *NodeInfo            `json:"node,omitempty"`
	ID       string               `json:"id,omitempty"`
	Replicas map[ShardID][]string `json:"replicas,omitempty"`
	IfIndex  uint64               `json:"if_index,omitempty"`
	Revoke   *Revocation          `json:"revoke,omitempty"`
	Shard    ShardID              `json:"shard,omitempty"`
	Move     *MoveInfo            `json:"move,omitempty"`
	MoveID   uint64               `json:"move_id,omitempty"`
	Step     Phase                `json:"step,omitempty"`
	Cutovers map[ShardID]uint64   `json:"cutovers,omitempty"`
	Split    *SplitInfo           `json:"split,omitempty"`
}

// Revocation is an operator's revocation of a device: every token of User's Device issued at
// or before Before is refused, and the device's sessions are closed. Tokens issued later are
// accepted (a revoked device comes back only with a token minted after the revocation). Times
// are Unix seconds, the precision of tokens, chosen by the proposer (the state machine reads no
// clock).
type Revocation struct {
	User   string `json:"user"`
	Device string `json:"device"`
	Before int64  `json:"before"` // tokens with iat ≤ Before are refused
	// Until is when the revocation may be forgotten: Before plus the longest token lifetime the
	// cluster accepts, after which every token it covers has expired. A later revocation's apply
	// drops those whose Until is before its Before.
	Until int64 `json:"until"`
}

// revKey is a Revocation's key in metaFSM.revoked.
func revKey(user, device string) string { return user + "\x00" + device }

// metaFSM applies meta commands to the in-memory cluster map.
type metaFSM struct {
	mu sync.RWMutex
	m  ClusterMap
	// slots is m.Slots in lookup form, nil until the map is initialized; routing reads it on
	// every request, so it is swapped atomically rather than read under mu.
	slots atomic.Pointer[SlotTable]
	// onChange, if set, is called after every applied change of the map (on raft's apply
	// goroutine).
	onChange func()

	// revoked holds the revocations by revKey, under mu; onRevoke, if set, is called with each
	// revocation applied (and each one a restored snapshot holds), on raft's apply goroutine.
	revoked  map[string]Revocation
	onRevoke func(Revocation)
}

func newMetaFSM() *metaFSM {
	return &metaFSM{m: ClusterMap{Nodes: map[string]NodeInfo{}, Replicas: map[ShardID][]string{}}, revoked: map[string]Revocation{}}
}

// revocation returns the revocation of user's device, if any.
func (f *metaFSM) revocation(user, device string) (Revocation, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r, ok := f.revoked[revKey(user, device)]
	return r, ok
}

// applyRevoke records c's revocation (a later one of the same device replaces an earlier one)
// and forgets those no token can be covered by any more.
// REQUIRES: f.mu
func (f *metaFSM) applyRevokeLocked(r *Revocation) error {
	if r == nil || !log.ValidID(r.User) || !log.ValidID(r.Device) || r.Before <= 0 || r.Until < r.Before {
		return fmt.Errorf("%w: revoke needs a user, a device, before > 0 and until ≥ before", ErrMetaRefused)
	}
	for k, old := range f.revoked {
		if old.Until < r.Before {
			delete(f.revoked, k)
		}
	}
	k := revKey(r.User, r.Device)
	if old, ok := f.revoked[k]; ok && old.Before > r.Before {
		return nil // an earlier revocation covers more already
	}
	f.revoked[k] = *r
	return nil
}

// Nodes implements raftstore.MetaFSM: the map's nodes, id → Raft address.
func (f *metaFSM) Nodes() map[string]string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[string]string, len(f.m.Nodes))
	for id, node := range f.m.Nodes {
		out[id] = node.RaftAddr
	}
	return out
}

// Placed implements raftstore.MetaFSM: the nodes the map places shard on.
func (f *metaFSM) Placed(shard ShardID) []Peer {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []Peer
	for _, id := range f.m.Replicas[shard] {
		if node, ok := f.m.Nodes[id]; ok {
			out = append(out, Peer{ID: id, Addr: node.RaftAddr})
		}
	}
	return out
}

// snapshot returns a copy of the map.
func (f *metaFSM) snapshot() ClusterMap {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.m.Clone()
}

// Apply implements raft.FSM. The response is nil or an error wrapping ErrMetaRefused.
func (f *metaFSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	var c metaCommand
	if err := json.Unmarshal(l.Data, &c); err != nil || c.V != metaCommandV1 {
		return fmt.Errorf("%w: undecodable meta command (version %d): %v", ErrMetaRefused, c.V, err)
	}
	if c.Op == "revoke" {
		f.mu.Lock()
		err := f.applyRevokeLocked(c.Revoke)
		f.mu.Unlock()
		if err == nil && f.onRevoke != nil {
			f.onRevoke(*c.Revoke)
		}
		return err
	}
	f.mu.Lock()
	var err error
	if strings.HasPrefix(c.Op, "move-") {
		err = f.applyMove(&f.m, &c, l.Index)
	} else {
		err = f.apply(&c)
	}
	if err == nil {
		f.m.Index = l.Index
	}
	f.mu.Unlock()
	if err == nil && f.onChange != nil {
		f.onChange()
	}
	return err
}

func (f *metaFSM) apply(c *metaCommand) error {
	m := &f.m
	if (c.Op == "place" || c.Op == "forget") && c.IfIndex != m.Index {
		return fmt.Errorf("%w: %s decided on map %d, which is now %d", ErrMetaRefused, c.Op, c.IfIndex, m.Index)
	}
	switch c.Op {
	case "init":
		if m.Shards > 0 || c.Map == nil || c.Map.Shards < 1 {
			return nil // a cluster is initialized once; a repeated init is harmless
		}
		init := c.Map.Clone()
		if err := f.setSlots(&init); err != nil {
			return err
		}
		*m = init
	case "join":
		if m.Shards == 0 {
			return fmt.Errorf("%w: the cluster map is not initialized yet; retry", ErrMetaRefused)
		}
		if c.Node == nil || c.Node.ID == "" || c.Node.RaftAddr == "" {
			return fmt.Errorf("%w: join needs a node id and address", ErrMetaRefused)
		}
		n := *c.Node
		n.Removing = m.Nodes[n.ID].Removing
		m.Nodes[n.ID] = n
	case "remove":
		n, ok := m.Nodes[c.ID]
		if !ok {
			return fmt.Errorf("%w: no node %q in the cluster", ErrMetaRefused, c.ID)
		}
		if !n.Removing && len(m.Nodes)-removing(m) <= 1 {
			return fmt.Errorf("%w: %q is the last node", ErrMetaRefused, c.ID)
		}
		n.Removing = true
		m.Nodes[c.ID] = n
	case "forget":
		for s, r := range m.Replicas {
			if slices.Contains(r, c.ID) {
				return fmt.Errorf("%w: %q still holds a replica of shard %d", ErrMetaRefused, c.ID, s)
			}
		}
		delete(m.Nodes, c.ID)
	case "place":
		for s, r := range c.Replicas {
			if s == MetaShard || int(s) > m.Shards {
				return fmt.Errorf("%w: no data shard %d", ErrMetaRefused, s)
			}
			for _, id := range r {
				if node, ok := m.Nodes[id]; !ok || node.Removing {
					return fmt.Errorf("%w: shard %d placed on unknown or departing node %q", ErrMetaRefused, s, id)
				}
			}
		}
		for s, r := range c.Replicas {
			m.Replicas[s] = slices.Sorted(slices.Values(r))
		}
	case "add-shard":
		return f.addShard(m, c.Shard)
	case "created":
		delete(m.Creating, c.Shard)
	default:
		return fmt.Errorf("%w: unknown meta operation %q", ErrMetaRefused, c.Op)
	}
	return nil
}

// addShard creates data shard id, which must be the next id (Shards+1); a shard that exists
// already makes it a no-op, so a resent request does not add a second shard. The new shard owns
// no slot (moving slots to it routes keys there) and is placed on the RF nodes holding fewest
// replicas among those not being removed: the state machine reads no liveness, so a node that is
// down may be chosen; the group then starts with the others' quorum and placement moves the
// replica away like any other on a dead node.
func (f *metaFSM) addShard(m *ClusterMap, id ShardID) error {
	switch {
	case m.Shards == 0:
		return fmt.Errorf("%w: the cluster map is not initialized yet; retry", ErrMetaRefused)
	case id >= 1 && int(id) <= m.Shards:
		return nil
	case int(id) != m.Shards+1:
		return fmt.Errorf("%w: the next shard is %d, not %d", ErrMetaRefused, m.Shards+1, id)
	}
	var eligible []string
	for nid, node := range m.Nodes {
		if !node.Removing {
			eligible = append(eligible, nid)
		}
	}
	slices.Sort(eligible)
	// Placed with every shard, so that the loads count; only the new shard's members are taken.
	members := place(m.Replicas, append(m.DataShards(), id), eligible, m.RF, false)[id]
	if len(members) == 0 {
		return fmt.Errorf("%w: no node can hold shard %d", ErrMetaRefused, id)
	}
	m.Shards = int(id)
	m.Replicas[id] = members
	if m.Creating == nil {
		m.Creating = map[ShardID][]string{}
	}
	m.Creating[id] = slices.Clone(members)
	return nil
}

// setSlots checks m's slot table (filling in the even table of maps that predate it) and makes
// it the one routing reads.
func (f *metaFSM) setSlots(m *ClusterMap) error {
	if len(m.Slots) == 0 {
		m.Slots = EvenSlots(m.Shards)
	}
	t, err := NewSlotTable(m.Slots)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrMetaRefused, err)
	}
	if last := t.Shards()[len(t.Shards())-1]; int(last) > m.Shards {
		return fmt.Errorf("%w: slot table names shard %d of %d", ErrMetaRefused, last, m.Shards)
	}
	var receiving []ShardID
	for _, mv := range m.Moves {
		receiving = append(receiving, mv.To)
	}
	if old := f.slots.Swap(t.withKeys(maps.Clone(m.Overrides), maps.Clone(m.ConvOverrides), receiving, maps.Clone(m.Splits))); old != nil {
		close(old.replaced)
	}
	return nil
}

func removing(m *ClusterMap) int {
	n := 0
	for _, node := range m.Nodes {
		if node.Removing {
			n++
		}
	}
	return n
}

// metaState is the meta shard's snapshot: the map's fields and, next to them, the revocations
// sorted by user and device (absent from snapshots written before revocations existed).
type metaState struct {
	ClusterMap
	Revoked []Revocation `json:"revoked,omitempty"`
}

// Snapshot implements raft.FSM.
func (f *metaFSM) Snapshot() (raft.FSMSnapshot, error) {
	b, err := json.Marshal(f.state())
	if err != nil {
		return nil, err
	}
	return metaSnapshot(b), nil
}

// state returns a copy of the whole state, as snapshots hold it.
func (f *metaFSM) state() metaState {
	f.mu.RLock()
	st := metaState{ClusterMap: f.m.Clone(), Revoked: slices.Collect(maps.Values(f.revoked))}
	f.mu.RUnlock()
	slices.SortFunc(st.Revoked, func(a, b Revocation) int {
		return strings.Compare(revKey(a.User, a.Device), revKey(b.User, b.Device))
	})
	return st
}

// Restore implements raft.FSM.
func (f *metaFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var st metaState
	if err := json.NewDecoder(rc).Decode(&st); err != nil {
		return fmt.Errorf("raftstore: restore cluster map: %w", err)
	}
	m := st.ClusterMap
	if m.Nodes == nil {
		m.Nodes = map[string]NodeInfo{}
	}
	if m.Replicas == nil {
		m.Replicas = map[ShardID][]string{}
	}
	if m.Shards > 0 {
		if err := f.setSlots(&m); err != nil {
			return fmt.Errorf("raftstore: restore cluster map: %w", err)
		}
	}
	revoked := make(map[string]Revocation, len(st.Revoked))
	for _, r := range st.Revoked {
		revoked[revKey(r.User, r.Device)] = r
	}
	f.mu.Lock()
	f.m, f.revoked = m, revoked
	f.mu.Unlock()
	if f.onChange != nil {
		f.onChange()
	}
	if f.onRevoke != nil {
		for _, r := range st.Revoked { // some may be new to this node: their sessions close
			f.onRevoke(r)
		}
	}
	return nil
}

type metaSnapshot []byte

func (s metaSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		return errors.Join(err, sink.Cancel()) // Cancel removes the partial snapshot
	}
	return sink.Close()
}

func (s metaSnapshot) Release() {}
