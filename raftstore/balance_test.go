package raftstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// leaderCounts returns how many of shards each running node leads, and whether every shard has a
// leader.
func leaderCounts(c *raftstoretest.Cluster, shards []raftstore.ShardID) ([]int, bool) {
	counts := make([]int, c.Size())
	led := 0
	for i := range c.Size() {
		n := c.Node(i)
		if n == nil {
			continue
		}
		for _, id := range shards {
			if st, err := n.ShardStatus(id); err == nil && st.State == "leader" {
				counts[i]++
				led++
			}
		}
	}
	return counts, led == len(shards)
}

// TestLeadersSpreadEvenly: six shards on three nodes end with two leaders per node, and again
// after a node that was stopped (its shards moving to the others) comes back.
func TestLeadersSpreadEvenly(t *testing.T) {
	shards := []raftstore.ShardID{1, 2, 3, 4, 5, 6}
	c := raftstoretest.NewCluster(t, 3, shards, func(cfg *raftstore.Config) { cfg.BalanceInterval = 100 * time.Millisecond })
	even := func(what string) {
		t.Helper()
		var counts []int
		testkit.WaitTrue(t, 30*time.Second, what, func() bool {
			var all bool
			counts, all = leaderCounts(c, shards)
			return all && counts[0] == 2 && counts[1] == 2 && counts[2] == 2
		})
		t.Logf("%s: leaders per node %v", what, counts)
	}
	even("two leaders per node")
	c.Stop(0)
	testkit.WaitTrue(t, 30*time.Second, "every shard led by the two others", func() bool {
		counts, all := leaderCounts(c, shards)
		return all && counts[1] == 3 && counts[2] == 3
	})
	c.Start(0)
	even("two leaders per node after node 0 is back")
}

// A leadership transfer that fails holds back the next one in its term until the target has
// caught up with the log as it was at the failure (hashicorp/raft#696); then the transfer goes
// through.
func TestFailedTransferWaitsForCatchUp(t *testing.T) {
	shard := raftstore.ShardID(1)
	c := raftstoretest.NewCluster(t, 3, []raftstore.ShardID{shard}, func(cfg *raftstore.Config) { cfg.BalanceInterval = -1 })
	l := c.Leader(shard)
	target := (l + 1) % 3
	id := c.Config(target).NodeID
	c.Cut(l, target, true) // the leader can no longer reach the target: the transfer cannot finish
	c.Cut(target, l, true)
	term := c.Node(l).CurrentTerm(shard)
	if err := c.Node(l).TransferLeadership(shard, id); err == nil {
		t.Fatal("a transfer to an unreachable voter succeeded")
	}
	if c.Node(l).CurrentTerm(shard) != term {
		t.Skip("the term moved during the transfer; nothing to check")
	}
	if err := c.Node(l).TransferLeadership(shard, id); !errors.Is(err, raftstore.ErrTransferSpent) {
		t.Fatalf("a second transfer in the same term, target not caught up: %v, want ErrTransferSpent", err)
	}
	c.Cut(l, target, false)
	c.Cut(target, l, false)
	leaderLast := c.WaitConverged(shard)
	st, err := c.Node(target).ShardStatus(shard)
	if err != nil || st.AppliedIndex < leaderLast {
		t.Fatalf("target status %+v, %v; leader's last index %d", st, err, leaderLast)
	}
	if err := c.Node(l).TransferLeadershipAt(shard, id, st.AppliedIndex); err != nil {
		t.Fatalf("a transfer to a caught-up target: %v", err)
	}
	if got := c.Leader(shard); got != target {
		t.Fatalf("leader is node %d, want %d", got, target)
	}
}
