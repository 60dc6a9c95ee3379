package raftstore_test

// Three-node clusters in one process: real Raft over loopback TCP (through relays that can cut
// links), real Pebble. They show replication, failover with contiguous positions, identical
// replicas, that a minority cannot commit, and catch-up by snapshot install.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// sendN proposes count messages to conv through whichever node leads, with client ids
// prefix-0, prefix-1…, and returns the acked conv_seqs.
func sendN(t *testing.T, c *raftstoretest.Cluster, shard raftstore.ShardID, conv, prefix string, count int) []log.Position {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var seqs []log.Position
	for i := range count {
		res, err := c.Propose(ctx, shard, send(conv, "alice", fmt.Sprintf("%s-%d", prefix, i), "body", "alice", "bob"))
		if err != nil {
			t.Fatalf("send %s-%d: %v", prefix, i, err)
		}
		seqs = append(seqs, res.Append.ConvSeq)
	}
	return seqs
}

func TestClusterFailoverKeepsPositionsContiguous(t *testing.T) {
	shards := []raftstore.ShardID{1, 2}
	c := raftstoretest.NewCluster(t, 3, shards, nil)
	for _, s := range shards {
		c.Leader(s)
	}
	seqs := sendN(t, c, 1, "d:alice:bob", "a", 50)
	sendN(t, c, 2, "d:alice:bob", "a", 20) // the second shard on the same nodes works independently

	old := c.Leader(1)
	c.Stop(old)
	newLeader := c.Leader(1)
	if newLeader == old {
		t.Fatalf("stopped node %d still leads", old)
	}
	seqs = append(seqs, sendN(t, c, 1, "d:alice:bob", "b", 50)...)
	for i, s := range seqs {
		if s != log.Position(i+1) {
			t.Fatalf("ack %d got conv_seq %d: positions must continue contiguously across failover", i, s)
		}
	}
	c.Start(old)
	c.WaitConverged(1)
	c.WaitConverged(2)
	c.CheckConv(t, 1, "d:alice:bob", 100)
}

func TestClusterMinorityCannotCommit(t *testing.T) {
	c := raftstoretest.NewCluster(t, 3, []raftstore.ShardID{1}, nil)
	sendN(t, c, 1, "d:alice:bob", "a", 10)
	leader := c.Leader(1)
	c.Partition(leader)

	// The isolated leader cannot reach a quorum: its proposal must not be acknowledged.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err := c.Node(leader).Propose(ctx, 1, send("d:alice:bob", "alice", "lost", "never acked", "alice", "bob"))
	cancel()
	if err == nil {
		t.Fatal("a leader cut off from its followers acknowledged a write")
	}
	if !errors.Is(err, raftstore.ErrLeadershipLost) && !errors.Is(err, raftstore.ErrNotLeader) && !errors.Is(err, raftstore.ErrTimeout) {
		t.Fatalf("isolated leader: unexpected error %v", err)
	}
	testkit.WaitTrue(t, 10*time.Second, "isolated leader to step down", func() bool {
		st, _ := c.Node(leader).ShardStatus(1)
		return st.State != "leader"
	})
	// The majority side elects a leader and goes on.
	sendN(t, c, 1, "d:alice:bob", "b", 10)
	c.Heal(leader)
	c.WaitConverged(1)
	c.CheckConv(t, 1, "d:alice:bob", 20) // the unacked write is gone everywhere
}

func TestClusterFollowerCatchesUpBySnapshot(t *testing.T) {
	c := raftstoretest.NewCluster(t, 3, []raftstore.ShardID{1}, func(cfg *raftstore.Config) {
		cfg.TrailingLogs = 10
		cfg.SnapshotThreshold = 50
		cfg.SnapshotInterval = time.Hour // snapshots only when the test asks
	})
	leader := c.Leader(1)
	follower := (leader + 1) % 3
	c.Stop(follower)
	sendN(t, c, 1, "d:alice:bob", "a", 200)
	leader = c.Leader(1)
	if err := c.Node(leader).Snapshot(1); err != nil {
		t.Fatal(err)
	}
	// The snapshot is a marker: the state stays in the store alone (raftstore/snapshots.go).
	if n := snapshotBodyBytes(t, c.Config(leader).Dir, 1); n != 0 {
		t.Errorf("the leader's snapshots hold %d bytes of state; want markers only", n)
	}
	// More entries after the snapshot: the state the follower gets is past the snapshot's index,
	// and it skips the entries it then receives up to there.
	sendN(t, c, 1, "d:alice:bob", "c", 30)
	c.Start(follower)
	c.WaitConverged(1)
	st, _ := c.Node(follower).ShardStatus(1)
	if st.Restores == 0 {
		t.Fatalf("follower caught up without installing a snapshot: %+v", st)
	}
	c.CheckConv(t, 1, "d:alice:bob", 230)
	// It keeps up from the log afterwards, and survives a restart on restored state.
	sendN(t, c, 1, "d:alice:bob", "b", 20)
	c.Stop(follower)
	c.Start(follower)
	c.WaitConverged(1)
	c.CheckConv(t, 1, "d:alice:bob", 250)
}

// snapshotBodyBytes is the size of the state the snapshots of shard in a node's data directory
// dir hold (hashicorp/raft's file store: <id>/state.bin).
func snapshotBodyBytes(t *testing.T, dir string, shard raftstore.ShardID) int64 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "snapshots", fmt.Sprintf("shard-%d", shard), "snapshots", "*", "state.bin"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no snapshot of shard %d in %s: %v", shard, dir, err)
	}
	var n int64
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}
