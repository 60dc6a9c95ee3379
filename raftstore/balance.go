package raftstore

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// Leader balancing. Every node of a shard can lead it, and whichever wins the election leads:
// after a restart or a failover one node often leads most shards, and does most of the cluster's
// work (proposals, fan-out, fsyncs on the critical path). So every node checks now and then
// whether it leads more than its share — ceil(shards / nodes) — and if so hands one shard's
// leadership to the voter of that shard that leads the fewest (raft leadership transfer: the
// target catches up, then starts an election it wins). One transfer per check keeps it gentle;
// a node that became overloaded by a failover sheds the excess within a few checks.

// balanceLoop runs balanceOnce every interval (with jitter) until stop is closed.
func (n *Node) balanceLoop(interval time.Duration, stop <-chan struct{}) {
	defer n.wg.Done()
	for {
		t := time.NewTimer(interval + rand.N(interval/2))
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C:
		}
		n.balanceOnce()
	}
}

// balanceOnce transfers the leadership of one shard away from this node if it leads more than
// its share and a live voter leading fewer can take it. It reports whether it did. Counts are
// cluster-wide, from every node's status (a node hosts only some shards in a managed cluster),
// and the share counts only the nodes that answer: with one node of three down, the two others
// lead half each.
func (n *Node) balanceOnce() bool {
	self := n.cfg.NodeID
	mine := map[ShardID]*replica{}
	for id, r := range *n.shards.Load() {
		if r.raft.State() == raft.Leader {
			mine[id] = r
		}
	}
	if len(mine) < 2 {
		return false // leading one shard or none is never more than a share
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.Timing.ElectionTimeout)
	defer cancel()
	counts := map[string]int{}
	shards := map[ShardID]bool{}
	alive := map[string]bool{}
	for _, p := range n.ClusterStatus(ctx) {
		if p.Status == nil {
			continue
		}
		alive[p.ID] = true
		for _, st := range p.Status.Shards {
			shards[st.Shard] = true
			if st.State == "leader" {
				counts[p.ID]++
			}
		}
	}
	if len(alive) < 2 {
		return false
	}
	share := ceilDiv(len(shards), len(alive))
	if counts[self] <= share {
		return false
	}
	for _, id := range slices.Sorted(maps.Keys(mine)) {
		r := mine[id]
		var target *Peer
		for _, v := range r.voters() {
			if v.ID != self && alive[v.ID] && counts[v.ID] < share && (target == nil || counts[v.ID] < counts[target.ID]) {
				target = &v
			}
		}
		if target == nil {
			continue
		}
		err := r.raft.LeadershipTransferToServer(raft.ServerID(target.ID), raft.ServerAddress(target.Addr)).Error()
		n.logger.Info("balancing leaders: handing over a shard", "shard", uint32(r.id), "to", target.ID,
			"leads", counts[self], "share", share, "err", err)
		return err == nil
	}
	return false
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
