package raftstore

import (
	"errors"
	"fmt"
)

// Sentinel errors of Propose and the other Node methods. hashicorp/raft's errors never leave this
// package: they are mapped to these.
var (
	// ErrNotLeader: this node is not the shard's leader. The error is a *NotLeaderError naming the
	// leader when one is known; retry there.
	ErrNotLeader = errors.New("raftstore: not the shard leader")
	// ErrTimeout: the command could not be handed to Raft before the context's deadline. It was
	// not replicated; retrying is safe.
	ErrTimeout = errors.New("raftstore: timed out")
	// ErrLeadershipLost: leadership was lost after the command was handed to Raft, so it may or
	// may not commit. Retry with the same client_msg_id: dedup makes the retry safe.
	ErrLeadershipLost = errors.New("raftstore: leadership lost, outcome unknown")
	// ErrUnreachable: the proposal was forwarded to the shard's leader on another node, and the
	// leader could not be reached or did not answer in time, so it may or may not have been
	// applied. Retry: every command is idempotent (dedup by client_msg_id, delivery marks).
	ErrUnreachable = errors.New("raftstore: peer unreachable (a proposal's outcome is unknown)")
	// ErrNoLeader: no leader of the shard is known and this node's replica has not heard from
	// one within its lease (Timing.StaleAfter; see Node.WatchLease): the node is cut off from
	// its shard's group, or the group has no quorum. Nothing was replicated; retry, preferably
	// through another node.
	ErrNoLeader = errors.New("raftstore: no leader heard from within the lease")
	// ErrShutdown: the node is shutting down.
	ErrShutdown = errors.New("raftstore: shutting down")
	// ErrNoShard: this node does not host the shard.
	ErrNoShard = errors.New("raftstore: shard not hosted on this node")
	// ErrLowDisk: this node's disk, or for a forwarded proposal the leader's, has less free
	// space than Config.MinFreeDisk, so the node refuses new writes. Nothing was applied. Retry
	// later, or elsewhere: it lasts until space is freed on that disk.
	ErrLowDisk = errors.New("raftstore: node low on disk space, new writes refused")
)

// NotLeaderError is ErrNotLeader with the leader's identity, when known (empty otherwise).
type NotLeaderError struct {
	Shard      ShardID
	LeaderID   string
	LeaderAddr string
}

func (e *NotLeaderError) Error() string {
	if e.LeaderID == "" {
		return fmt.Sprintf("raftstore: shard %d: not the leader, leader unknown", e.Shard)
	}
	return fmt.Sprintf("raftstore: shard %d: not the leader, leader is %s at %s", e.Shard, e.LeaderID, e.LeaderAddr)
}

// Is makes errors.Is(err, ErrNotLeader) true.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }
