package raftstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// ShardStatus is a point-in-time view of this node's replica of one shard, for status pages,
// metrics and tests.
type ShardStatus struct {
	Shard        ShardID `json:"shard"`
	State        string  `json:"state"`     // "leader", "follower", "candidate" or "shutdown"
	LeaderID     string  `json:"leader_id"` // "" when no leader is known
	LeaderAddr   string  `json:"leader_addr"`
	Voters       []Peer  `json:"voters"`              // the shard's voters as this replica knows them
	Nonvoters    []Peer  `json:"nonvoters,omitempty"` // members still catching up
	Term         uint64  `json:"term"`
	LastIndex    uint64  `json:"last_index"` // last index in this replica's Raft log
	CommitIndex  uint64  `json:"commit_index"`
	AppliedIndex uint64  `json:"applied_index"` // last index Raft has handed to the state machine (applied or skipped)
	// StateIndex is the last index reflected in the stored state (persisted with it). It can stay
	// below AppliedIndex on an idle shard: raft counts its leader no-op entries as applied but
	// never hands them to the state machine.
	StateIndex uint64 `json:"state_index"`
	Applies    uint64 `json:"applies"`  // commands applied since start
	Skips      uint64 `json:"skips"`    // entries skipped since start because the state already had them
	Restores   uint64 `json:"restores"` // snapshots installed since start (a follower that fell far behind)
	// Checksums are the replica's checksums of its state at the indexes of the last checksum
	// commands it applied (ChecksumCommand), in index order. A check (Node.CheckReplicas) reads
	// them here on every member: a replica whose StateIndex has reached a command's index holds
	// its checksum, unless it skipped that entry (a snapshot installed past it, a restart) or has
	// dropped it for later ones since.
	Checksums []Checksum `json:"checksums,omitempty"`
}

// NodeStatus is a node's view of itself: its identity, the attributes the application gave it
// (App.Attrs, such as its client and admin addresses) and the status of every replica it
// hosts. Any node can ask any other for it (see Node.ClusterStatus).
type NodeStatus struct {
	ID       string            `json:"id"`
	RaftAddr string            `json:"raft_addr"`
	Attrs    map[string]string `json:"attrs,omitempty"`
	Shards   []ShardStatus     `json:"shards"`
	// DiskLow says the node is below its disk watermark (DiskSpace.Low): it refuses new writes
	// and hands its leaderships away, and no node hands it one.
	DiskLow bool `json:"disk_low,omitempty"`
}

// NodeStatus returns this node's status.
func (n *Node) NodeStatus() NodeStatus {
	return NodeStatus{ID: n.cfg.NodeID, RaftAddr: n.addr, Attrs: n.Attrs(), Shards: n.Status(), DiskLow: n.disk.low()}
}

// Attrs returns the attributes the application gives this node (App.Attrs), nil without one.
func (n *Node) Attrs() map[string]string {
	if n.cfg.App == nil {
		return nil
	}
	return n.cfg.App.Attrs()
}

// PeerStatus is one node's answer to Node.ClusterStatus: its status, or why it could not be had.
type PeerStatus struct {
	ID     string      `json:"id"`
	Addr   string      `json:"addr"` // the Raft address it was asked at
	Status *NodeStatus `json:"status,omitempty"`
	Err    string      `json:"error,omitempty"`
}

// ClusterStatus asks every node named in the Raft configuration of a shard this node hosts (or,
// in a managed cluster, known to the meta group) for its status (this node answers for itself), in
// parallel within ctx, and returns the answers by node id.
func (n *Node) ClusterStatus(ctx context.Context) []PeerStatus {
	if g := n.meta.Load(); g != nil {
		if nodes := g.fsm.Nodes(); len(nodes) > 0 {
			return n.StatusOf(ctx, nodes)
		}
	}
	peers := map[string]string{n.cfg.NodeID: n.addr}
	for _, st := range n.Status() {
		for _, v := range slices.Concat(st.Voters, st.Nonvoters) {
			if _, ok := peers[v.ID]; !ok {
				peers[v.ID] = v.Addr
			}
		}
	}
	return n.StatusOf(ctx, peers)
}

// StatusOf asks the nodes of peers (id → Raft address) for their status, in parallel within
// ctx (this node answers for itself), and returns the answers sorted by node id.
func (n *Node) StatusOf(ctx context.Context, peers map[string]string) []PeerStatus {
	out := make([]PeerStatus, 0, len(peers))
	for id, addr := range peers {
		out = append(out, PeerStatus{ID: id, Addr: addr})
	}
	slices.SortFunc(out, func(a, b PeerStatus) int { return strings.Compare(a.ID, b.ID) })
	var wg sync.WaitGroup
	for i := range out {
		p := &out[i]
		if p.ID == n.cfg.NodeID {
			st := n.NodeStatus()
			p.Status = &st
			continue
		}
		dial := nodeAt{p.ID, n.dialAddr(p.ID, p.Addr)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := n.fwd.status(ctx, dial)
			if err != nil {
				p.Err = err.Error()
				return
			}
			p.Status = &st
		}()
	}
	wg.Wait()
	return out
}

// Status returns the status of every shard this node hosts, by shard id.
func (n *Node) Status() []ShardStatus {
	reps := *n.shards.Load()
	out := make([]ShardStatus, 0, len(reps))
	for _, id := range slices.Sorted(maps.Keys(reps)) {
		out = append(out, reps[id].status())
	}
	return out
}

// Leads reports whether this node's replica of shard leads its group: Raft's own state, without
// the configuration read ShardStatus makes.
func (n *Node) Leads(shard ShardID) bool {
	r, ok := n.replica(shard)
	return ok && r.raft.State() == raft.Leader
}

// ShardStatus returns the status of one shard.
func (n *Node) ShardStatus(shard ShardID) (ShardStatus, error) {
	r, ok := n.replica(shard)
	if !ok {
		return ShardStatus{}, ErrNoShard
	}
	return r.status(), nil
}

func (r *replica) status() ShardStatus {
	// The applied index first, the checksums after: the state machine records a checksum before
	// it publishes the index of its command, so a StateIndex at or past it means the checksum,
	// if the replica took one, is in the list.
	stateIndex := r.fsm.applied.Load()
	sums := r.fsm.checksums.list()
	addr, id := r.raft.LeaderWithID()
	state := r.raft.State()
	return ShardStatus{
		Shard:        r.id,
		State:        stateName(state),
		LeaderID:     string(id),
		LeaderAddr:   string(addr),
		Voters:       r.members(true),
		Nonvoters:    r.members(false),
		Term:         r.raft.CurrentTerm(),
		LastIndex:    r.raft.LastIndex(),
		CommitIndex:  r.raft.CommitIndex(),
		AppliedIndex: r.raft.AppliedIndex(),
		StateIndex:   stateIndex,
		Applies:      r.fsm.applies.Load(),
		Skips:        r.fsm.skips.Load(),
		Restores:     r.fsm.restores.Load(),
		Checksums:    sums,
	}
}

// voters returns the shard's voters as this replica knows them.
func (r *replica) voters() []Peer { return r.members(true) }

// members returns the voters (voters true) or the non-voters of r's group as this replica knows
// them.
func (r *replica) members(voters bool) []Peer { return groupMembers(r.raft, voters) }

func groupMembers(rf *raft.Raft, voters bool) []Peer {
	f := rf.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var out []Peer
	for _, s := range f.Configuration().Servers {
		if (s.Suffrage == raft.Voter) == voters {
			out = append(out, Peer{ID: string(s.ID), Addr: string(s.Address)})
		}
	}
	return out
}

func stateName(s raft.RaftState) string {
	switch s {
	case raft.Leader:
		return "leader"
	case raft.Follower:
		return "follower"
	case raft.Candidate:
		return "candidate"
	}
	return "shutdown"
}

// WaitLeader waits until shard has a known leader and returns its id and address.
func (n *Node) WaitLeader(ctx context.Context, shard ShardID) (id, addr string, err error) {
	r, ok := n.replica(shard)
	if !ok {
		return "", "", ErrNoShard
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if a, i := r.raft.LeaderWithID(); i != "" {
			return string(i), string(a), nil
		}
		select {
		case <-ctx.Done():
			return "", "", fmt.Errorf("%w: no leader for shard %d: %v", ErrTimeout, shard, ctx.Err())
		case <-t.C:
		}
	}
}

// Snapshot makes shard take a Raft snapshot now (normally it does on its own after
// SnapshotThreshold entries), letting Raft trim its log.
func (n *Node) Snapshot(shard ShardID) error {
	r, ok := n.replica(shard)
	if !ok {
		return ErrNoShard
	}
	if err := r.raft.Snapshot().Error(); err != nil {
		return n.mapRaftError(r, err)
	}
	return nil
}
