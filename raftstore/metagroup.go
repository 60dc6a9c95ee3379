package raftstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// The meta group is a Raft group every node of a managed cluster hosts beside its data shards,
// whose state machine belongs to the control plane above this package (raftstore/cluster: the
// cluster map, moves, revocations). This package replicates its commands, forwards them to its
// leader and changes its membership, and never reads them: what the map means is not its
// business. Its state machine is in memory and rebuilt from the group's snapshots and log at
// start (D17), unlike the data shards' persistent ones.

// MetaShard is the id of the meta group. Data shards are numbered from 1.
const MetaShard ShardID = 0

// ErrMetaRefused reports a meta command its state machine refused (an unknown node, a move that
// conflicts with another, …); the error's text says why. A MetaFSM answers refusals with errors
// wrapping it, so that a refusal at the meta leader is one on the node that forwarded it too.
var ErrMetaRefused = errors.New("raftstore: cluster map change refused")

// MetaFSM is the meta group's state machine. Apply answers nil or an error wrapping
// ErrMetaRefused.
type MetaFSM interface {
	raft.FSM
	// Nodes returns the cluster's nodes as the state machine knows them, id → Raft address: the
	// nodes ClusterStatus asks, and the address of a node id found nowhere else. It must not block.
	Nodes() map[string]string
	// Placed returns the nodes that should hold a replica of shard, in the state machine's order:
	// where the node forwards a proposal for a shard it hosts no replica of, and whom a replica
	// check asks. It must not block.
	Placed(shard ShardID) []Peer
}

// MetaGroup is this node's member of the meta group (Node.HostMeta).
type MetaGroup struct {
	n     *Node
	rg    *raftGroup
	logs  *raftLog
	fsm   MetaFSM
	start uint64 // the last index of the group's Raft log when it started (Current)
	fresh bool
}

// HostMeta starts this node's member of the meta group, applying to fsm. Without earlier state
// it bootstraps the group with peers as voters (empty: this node alone), or, with nil peers,
// waits to be added by the group's leader (a node joining a cluster). A node hosts one meta
// group; a second call fails.
func (n *Node) HostMeta(fsm MetaFSM, peers []Peer) (*MetaGroup, error) {
	n.shardsMu.Lock()
	defer n.shardsMu.Unlock()
	if n.closed.Load() {
		return nil, ErrShutdown
	}
	if n.meta.Load() != nil {
		return nil, errors.New("raftstore: the meta group is hosted already")
	}
	logs, err := newRaftLog(n.db, MetaShard)
	if err != nil {
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(n.snapshotDir(MetaShard), 2, newRaftLogger(n.logger, MetaShard))
	if err != nil {
		return nil, err
	}
	logs.writeTime = n.lat.logWrite
	g := &MetaGroup{n: n, logs: logs, fsm: fsm, start: logs.last.Load(), fresh: logs.last.Load() == 0}
	if list, err := snaps.List(); err != nil || len(list) > 0 {
		g.fresh = false
	}
	if g.rg, err = n.startRaft(MetaShard, fsm, false, snaps, logs, peers); err != nil {
		return nil, fmt.Errorf("raftstore: start meta group: %w", err)
	}
	n.meta.Store(g)
	n.startBalancing()
	return g, nil
}

// Fresh reports whether the group had no state on this node when it started: a new cluster's
// first start, or a node's first join.
func (g *MetaGroup) Fresh() bool { return g.fresh }

// Current reports whether this member has applied every entry its Raft log held when it
// started: until then its state may be older than what the node knew before a restart, since
// Raft re-applies the log only once the member hears of the commit index.
func (g *MetaGroup) Current() bool { return g.rg.raft.AppliedIndex() >= g.start }

// Leads reports whether this member leads the group.
func (g *MetaGroup) Leads() bool { return g.rg.raft.State() == raft.Leader }

// Members returns the group's voters (voters true) or non-voters as this member knows them.
func (g *MetaGroup) Members(voters bool) []Peer { return groupMembers(g.rg.raft, voters) }

// AddNonvoter adds node id at addr to the group as a non-voter. This member must lead.
func (g *MetaGroup) AddNonvoter(id, addr string) error {
	return g.rg.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, time.Second).Error()
}

// AddVoter adds node id at addr to the group as a voter, or promotes it. This member must lead.
func (g *MetaGroup) AddVoter(id, addr string) error {
	return g.rg.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, time.Second).Error()
}

// RemoveMember removes node id from the group. This member must lead.
func (g *MetaGroup) RemoveMember(id string) error {
	return g.rg.raft.RemoveServer(raft.ServerID(id), 0, time.Second).Error()
}

// Propose replicates cmd (JSON; the state machine's command) in the meta group through its
// leader wherever it is, and returns the state machine's answer: this member if it leads, the
// leader it knows of, or, while it knows none and join is set (a node still joining), the node
// at the address join, which relays it. It fails with ErrMetaRefused if the state machine
// refused cmd.
func (g *MetaGroup) Propose(ctx context.Context, cmd any, join string) error {
	data, err := json.Marshal(cmd)
	if err != nil {
		return err
	}
	n, rg := g.n, g.rg.raft
	var hint nodeAt
	for hop := 0; hop <= fwdMaxHops; hop++ {
		to := hint
		for to.addr == "" {
			if rg.State() == raft.Leader {
				return g.applyLocal(ctx, data)
			}
			a, id := rg.LeaderWithID()
			switch {
			case id != "":
				to = nodeAt{string(id), n.dialAddr(string(id), string(a))}
			case join != "":
				to = nodeAt{"", join} // an address only: any node of the cluster relays the join
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

// applyLocal applies an encoded meta command through this member, which must lead.
func (g *MetaGroup) applyLocal(ctx context.Context, data []byte) error {
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		if timeout = time.Until(dl); timeout <= 0 {
			return ErrTimeout
		}
	}
	rg := g.rg.raft
	f := rg.Apply(data, timeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			a, id := rg.LeaderWithID()
			return &NotLeaderError{Shard: MetaShard, LeaderID: string(id), LeaderAddr: string(a)}
		}
		return fmt.Errorf("raftstore: meta group: %w", err)
	}
	if err, ok := f.Response().(error); ok {
		return err
	}
	return nil
}

// shutdown stops the member (Node.Close).
func (g *MetaGroup) shutdown() error { return stopRaft(g.rg.raft, g.rg.trans, g.logs) }
