package raftstore

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"

	"github.com/syncd-dev/syncd/log"
)

// Shard membership: which nodes hold a replica of a shard. A replica is added in two steps — the
// new node starts an empty replica that joins (AddReplica), then the shard's leader adds it to
// the group (AddNonvoter, and AddVoter once it has caught up) — and removed in two: the leader
// removes it from the group (RemoveServer), then the node drops its copy (RemoveReplica).

// AddReplica starts hosting shard as a new member joining the shard's existing Raft group: it
// bootstraps nothing and waits for the shard's leader to add it, then catches up from the
// leader's log or a snapshot. If this node already hosts shard, nothing happens.
func (n *Node) AddReplica(shard ShardID) error {
	if n.closed.Load() {
		return ErrShutdown
	}
	return n.addReplica(shard, nil)
}

// BootstrapReplica starts hosting shard as one of the first members of a new group: without
// earlier state on this node, it bootstraps the group with peers as voters (every member given the
// same peers does the same, so they agree on its first configuration); with state, it restarts
// the replica as it was. If this node already hosts shard, nothing happens.
func (n *Node) BootstrapReplica(shard ShardID, peers []Peer) error {
	if n.closed.Load() {
		return ErrShutdown
	}
	if peers == nil {
		peers = []Peer{}
	}
	return n.addReplica(shard, peers)
}

// ShardsOnDisk lists the shards with Raft state in the store (the meta group's included): the
// replicas this node held when it last stopped.
func (n *Node) ShardsOnDisk() ([]ShardID, error) { return raftShardsOnDisk(n.db) }

// TransferLeadership hands the leadership of shard, which this node leads, to its voter id.
// After a transfer of the shard failed in this term, it fails with ErrTransferSpent until the
// target has caught up or a new term begins (see transferLeadership).
func (n *Node) TransferLeadership(shard ShardID, id string) error {
	return n.transferTo(shard, id, 0)
}

// transferTo is TransferLeadership to a target whose replica has applied targetApplied.
func (n *Node) transferTo(shard ShardID, id string, targetApplied uint64) error {
	r, ok := n.replica(shard)
	if !ok {
		return ErrNoShard
	}
	for _, v := range r.voters() {
		if v.ID == id {
			return r.transferLeadership(v.ID, v.Addr, targetApplied)
		}
	}
	return fmt.Errorf("raftstore: shard %d has no voter %q to hand its leadership to", shard, id)
}

// RemoveReplica stops hosting shard and deletes this node's copy of it: state, Raft log and
// snapshots. Call it once the shard's group no longer counts this node as a member; removing a
// voter's replica behind the group's back costs the group a member until it is re-added.
func (n *Node) RemoveReplica(shard ShardID) error {
	n.shardsMu.Lock()
	defer n.shardsMu.Unlock()
	if n.closed.Load() {
		return ErrShutdown
	}
	r, ok := n.replica(shard)
	if !ok {
		return nil
	}
	m := maps.Clone(*n.shards.Load())
	delete(m, shard)
	n.shards.Store(&m)    // from here on the shard is not hosted: callers get ErrNoShard
	r.wakeLeaseWatchers() // they look again and find it gone
	err := stopRaft(r.raft, r.trans, r.logs)
	r.fsm.checksums.stop() // a scan of a copy being deleted is of no use to anyone
	if err != nil {
		return fmt.Errorf("raftstore: stop shard %d: %w", shard, err)
	}
	if err := log.DeleteShard(n.db, log.ShardID(shard)); err != nil {
		return err
	}
	if err := r.logs.dropAll(); err != nil {
		return err
	}
	if err := os.RemoveAll(n.snapshotDir(shard)); err != nil {
		return fmt.Errorf("raftstore: delete snapshots of shard %d: %w", shard, err)
	}
	n.logger.Debug("removed replica", "shard", uint32(shard))
	return nil
}

func (n *Node) snapshotDir(shard ShardID) string { return snapshotDir(n.cfg.Dir, shard) }

// snapshotDir is where the node with data directory dir keeps shard's Raft snapshots.
func snapshotDir(dir string, shard ShardID) string {
	return filepath.Join(dir, "snapshots", fmt.Sprintf("shard-%d", shard))
}

// AddNonvoter adds node id (Raft address addr) to shard's group as a non-voter: it receives the
// log but does not count for quorum, so a new replica catches up without weakening the group.
// This node must lead the shard.
func (n *Node) AddNonvoter(ctx context.Context, shard ShardID, id, addr string) error {
	return n.changeMembership(ctx, shard, func(r *raft.Raft, timeout time.Duration) raft.IndexFuture {
		return r.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout)
	})
}

// AddVoter adds node id (Raft address addr) to shard's voters, or promotes it if it is a
// non-voter. This node must lead the shard.
func (n *Node) AddVoter(ctx context.Context, shard ShardID, id, addr string) error {
	return n.changeMembership(ctx, shard, func(r *raft.Raft, timeout time.Duration) raft.IndexFuture {
		return r.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout)
	})
}

// RemoveMember removes node id from shard's group. This node must lead the shard; to remove
// itself it should first hand leadership over, or the group elects a new leader after the change.
func (n *Node) RemoveMember(ctx context.Context, shard ShardID, id string) error {
	return n.changeMembership(ctx, shard, func(r *raft.Raft, timeout time.Duration) raft.IndexFuture {
		return r.RemoveServer(raft.ServerID(id), 0, timeout)
	})
}

func (n *Node) changeMembership(ctx context.Context, shard ShardID, change func(*raft.Raft, time.Duration) raft.IndexFuture) error {
	r, ok := n.replica(shard)
	if !ok {
		return ErrNoShard
	}
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		if timeout = time.Until(dl); timeout <= 0 {
			return ErrTimeout
		}
	}
	if err := change(r.raft, timeout).Error(); err != nil {
		return n.mapRaftError(r, err)
	}
	return nil
}

// Members returns shard's group as this node's replica knows it: voters and non-voters.
func (n *Node) Members(shard ShardID) ([]Member, error) {
	r, ok := n.replica(shard)
	if !ok {
		return nil, ErrNoShard
	}
	f := r.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, n.mapRaftError(r, err)
	}
	var out []Member
	for _, s := range f.Configuration().Servers {
		out = append(out, Member{Peer: Peer{ID: string(s.ID), Addr: string(s.Address)}, Voter: s.Suffrage == raft.Voter})
	}
	return out, nil
}

// Member is one member of a shard's Raft group.
type Member struct {
	Peer
	Voter bool `json:"voter"` // false: a non-voter catching up
}
