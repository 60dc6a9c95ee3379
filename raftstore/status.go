package raftstore

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// ShardStatus is a point-in-time view of this node's replica of one shard, for status pages,
// metrics and tests.
type ShardStatus struct {
	Shard        ShardID
	State        string // "leader", "follower", "candidate" or "shutdown"
	LeaderID     string // "" when no leader is known
	LeaderAddr   string
	Term         uint64
	LastIndex    uint64 // last index in this replica's Raft log
	CommitIndex  uint64
	AppliedIndex uint64 // last index Raft has handed to the state machine (applied or skipped)
	// StateIndex is the last index reflected in the stored state (persisted with it). It can stay
	// below AppliedIndex on an idle shard: raft counts its leader no-op entries as applied but
	// never hands them to the state machine.
	StateIndex uint64
	Applies    uint64 // commands applied since start
	Skips      uint64 // entries skipped since start because the state already had them
	Restores   uint64 // snapshots installed since start (a follower that fell far behind)
}

// Status returns the status of every shard this node hosts, by shard id.
func (n *Node) Status() []ShardStatus {
	out := make([]ShardStatus, 0, len(n.shards))
	for _, id := range n.Shards() {
		out = append(out, n.shards[id].status())
	}
	return out
}

// ShardStatus returns the status of one shard.
func (n *Node) ShardStatus(shard ShardID) (ShardStatus, error) {
	r, ok := n.shards[shard]
	if !ok {
		return ShardStatus{}, ErrNoShard
	}
	return r.status(), nil
}

func (r *replica) status() ShardStatus {
	addr, id := r.raft.LeaderWithID()
	state := r.raft.State()
	return ShardStatus{
		Shard:        r.id,
		State:        stateName(state),
		LeaderID:     string(id),
		LeaderAddr:   string(addr),
		Term:         r.raft.CurrentTerm(),
		LastIndex:    r.raft.LastIndex(),
		CommitIndex:  r.raft.CommitIndex(),
		AppliedIndex: r.raft.AppliedIndex(),
		StateIndex:   r.fsm.applied.Load(),
		Applies:      r.fsm.applies.Load(),
		Skips:        r.fsm.skips.Load(),
		Restores:     r.fsm.restores.Load(),
	}
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
	r, ok := n.shards[shard]
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
	r, ok := n.shards[shard]
	if !ok {
		return ErrNoShard
	}
	if err := r.raft.Snapshot().Error(); err != nil {
		return n.mapRaftError(r, err)
	}
	return nil
}
