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
// its share and a live voter leading fewer can take it. It reports whether it did. The share
// counts only the nodes that answer: with one node of three down, the two others lead half each.
func (n *Node) balanceOnce() bool {
	self := raft.ServerID(n.cfg.NodeID)
	counts := map[raft.ServerID]int{}
	nodes := map[raft.ServerID]Peer{}
	var mine []*replica
	reps := *n.shards.Load()
	for _, id := range slices.Sorted(maps.Keys(reps)) {
		r := reps[id]
		_, leader := r.raft.LeaderWithID()
		if leader == "" {
			return false // an election is under way: look again later
		}
		counts[leader]++
		if leader == self {
			mine = append(mine, r)
		}
		for _, v := range r.voters() {
			nodes[raft.ServerID(v.ID)] = v
		}
	}
	if len(nodes) < 2 || len(mine) <= ceilDiv(len(reps), len(nodes)) {
		return false
	}
	alive := map[raft.ServerID]bool{self: true}
	for id, p := range nodes {
		if id != self {
			alive[id] = n.answers(p)
		}
	}
	live := 0
	for _, ok := range alive {
		if ok {
			live++
		}
	}
	share := ceilDiv(len(reps), live)
	if len(mine) <= share {
		return false
	}
	for _, r := range mine {
		var target *Peer
		for _, v := range r.voters() {
			id := raft.ServerID(v.ID)
			if id != self && alive[id] && counts[id] < share && (target == nil || counts[id] < counts[raft.ServerID(target.ID)]) {
				target = &v
			}
		}
		if target == nil {
			continue
		}
		err := r.raft.LeadershipTransferToServer(raft.ServerID(target.ID), raft.ServerAddress(target.Addr)).Error()
		n.logger.Info("balancing leaders: handing over a shard", "shard", uint32(r.id), "to", target.ID,
			"leads", len(mine), "share", share, "err", err)
		return err == nil
	}
	return false
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// answers reports whether peer p answers a status request: a transfer to a node that is down
// would stall the shard's proposals until it times out.
func (n *Node) answers(p Peer) bool {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.Timing.ElectionTimeout)
	defer cancel()
	_, err := n.fwd.status(ctx, n.dialAddr(p.ID, p.Addr))
	return err == nil
}
