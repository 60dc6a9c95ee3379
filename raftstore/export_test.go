package raftstore

import "time"

// TransferLeadership hands this node's leadership of shard to voter id, whose replica has applied
// targetApplied, through the guard the balancer and the membership loop use (for tests in
// package raftstore_test).
func (n *Node) TransferLeadership(shard ShardID, id string, targetApplied uint64) error {
	r, ok := n.replica(shard)
	if !ok {
		return ErrNoShard
	}
	for _, v := range r.voters() {
		if v.ID == id {
			return r.transferLeadership(v.ID, v.Addr, targetApplied)
		}
	}
	return ErrNoShard
}

// ErrTransferSpent is errTransferSpent, for tests.
var ErrTransferSpent = errTransferSpent

// CurrentTerm returns the Raft term of this node's replica of shard (for tests).
func (n *Node) CurrentTerm(shard ShardID) uint64 {
	r, _ := n.replica(shard)
	return r.raft.CurrentTerm()
}

// SetDiskCheckInterval makes a node of cfg measure its free disk space every d instead of every
// second (for tests).
func SetDiskCheckInterval(cfg *Config, d time.Duration) { cfg.diskCheckEvery = d }

// FlushStore starts a flush of the node's store's memtables and does not wait for it (for
// tests: the disk-full tests make it fail).
func (n *Node) FlushStore() error {
	_, err := n.db.AsyncFlush()
	return err
}

// NoSpaceRetry is how often Pebble retries a write that failed for lack of space (for tests).
const NoSpaceRetry = noSpaceRetry
