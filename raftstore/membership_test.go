package raftstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestMoveReplica moves a shard's replica under traffic: a fourth node joins the group (as a
// non-voter until it has caught up, then a voter), a follower leaves it and drops its copy; the
// replicas that remain end identical, holding every acknowledged entry exactly once.
func TestMoveReplica(t *testing.T) {
	const shard = raftstore.ShardID(1)
	c := raftstoretest.NewCluster(t, 4, []raftstore.ShardID{shard}, func(cfg *raftstore.Config) {
		all := cfg.Peers
		cfg.Peers = all[:3] // the group starts on n1..n3
		if cfg.NodeID == "n4" {
			cfg.Shards = []raftstore.ShardID{} // n4 starts empty
		}
		cfg.BalanceInterval = -1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Traffic through the whole move.
	stop := make(chan struct{})
	done := make(chan int, 1) // buffered: a send that failed must not wait for a reader
	var acked atomic.Int64    // sent so far, for the test goroutine
	go func() {
		sent := 0
		for {
			select {
			case <-stop:
				done <- sent
				return
			default:
			}
			if _, err := c.Propose(ctx, shard, send("d:alice:bob", "alice", fmt.Sprint("m", sent), "x", "alice", "bob")); err != nil {
				t.Errorf("send %d: %v", sent, err)
				done <- sent
				return
			}
			sent++
			acked.Store(int64(sent))
		}
	}()

	n4 := c.Node(3)
	if err := n4.AddReplica(shard); err != nil {
		t.Fatal(err)
	}
	leader := c.Node(c.Leader(shard))
	if err := leader.AddNonvoter(ctx, shard, "n4", c.Config(3).RaftAddr); err != nil {
		t.Fatal(err)
	}
	testkit.WaitTrue(t, 20*time.Second, "n4 to catch up", func() bool {
		mine, err1 := n4.ShardStatus(shard)
		theirs, err2 := leader.ShardStatus(shard)
		return err1 == nil && err2 == nil && mine.AppliedIndex+64 >= theirs.CommitIndex && mine.AppliedIndex > 0
	})
	if err := leader.AddVoter(ctx, shard, "n4", c.Config(3).RaftAddr); err != nil {
		t.Fatal(err)
	}
	members, err := leader.Members(shard)
	if err != nil || len(members) != 4 || !members[3].Voter {
		t.Fatalf("members after the join: %+v %v", members, err)
	}

	leaving := (c.Leader(shard) + 1) % 3 // a follower among n1..n3
	id := c.Config(leaving).NodeID
	if err := c.Node(c.Leader(shard)).RemoveMember(ctx, shard, id); err != nil {
		t.Fatal(err)
	}
	if err := c.Node(leaving).RemoveReplica(shard); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Node(leaving).State(shard); !errors.Is(err, raftstore.ErrNoShard) {
		t.Fatalf("%s still hosts the shard: %v", id, err)
	}
	// Traffic on the new group, so the check below covers entries committed after the move.
	atMove := acked.Load()
	testkit.WaitTrue(t, 20*time.Second, "20 more entries acknowledged by the new group", func() bool {
		return acked.Load() >= atMove+20
	})
	close(stop)
	sent := <-done
	c.WaitConverged(shard)
	c.CheckConv(t, shard, "d:alice:bob", sent)
	t.Logf("%d entries sent during the move; %s left, n4 joined", sent, id)
}
