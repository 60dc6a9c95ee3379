package raftstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestHandOver: a node asked to hand over (as syncd does on SIGTERM) transfers every shard it
// leads to another node and returns with none led; the shards keep taking writes once it is
// stopped.
func TestHandOver(t *testing.T) {
	shards := []raftstore.ShardID{1, 2, 3, 4}
	c := raftstoretest.NewCluster(t, 3, shards, nil)
	for _, id := range shards {
		c.Leader(id)
	}
	// Make node 0 lead at least one shard, whatever the election gave it.
	testkit.WaitTrue(t, 30*time.Second, "node 0 leads a shard", func() bool {
		counts, _ := leaderCounts(c, shards)
		if counts[0] > 0 {
			return true
		}
		_ = c.Node(c.Leader(1)).TransferLeadership(1, c.Config(0).NodeID)
		return false
	})
	led, _ := leaderCounts(c, shards)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	handed, err := c.Node(0).HandOver(ctx)
	if err != nil || handed != led[0] {
		t.Fatalf("HandOver: %d groups handed, %v; node 0 led %d shards", handed, err, led[0])
	}
	if counts, _ := leaderCounts(c, shards); counts[0] != 0 {
		t.Fatalf("after HandOver node 0 still leads %d shards", counts[0])
	}
	c.Stop(0)
	for i, id := range shards {
		if _, err := c.Propose(ctx, id, send("d:alice:bob", "alice", fmt.Sprint("m", i), "hi", "alice", "bob")); err != nil {
			t.Fatalf("shard %d after node 0 stopped: %v", id, err)
		}
	}
}
