package raftstore

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// Leader balancing. Every node of a shard can lead it, and whichever wins the election leads:
// after a restart or a failover one node often leads most shards, and does most of the cluster's
// work (proposals, fan-out, fsyncs on the critical path). So every node checks now and then
// whether a live voter of a shard it leads leads two or more shards fewer than it does, and if so
// hands that shard's leadership to the one that leads the fewest (raft leadership transfer: the
// target catches up, then starts an election it wins). Each transfer narrows the gap, so the
// cluster settles with leaderships within one of each other. One transfer per check keeps it
// gentle; after a transfer the next check comes sooner (a tenth of the interval), so a node that
// leads everything after a restart sheds its excess in seconds rather than one shard per interval.

// startBalancing starts the balance loop, once, unless BalanceInterval disables it: a node of a
// static cluster of several voters starts it in New, a node of a managed cluster in HostMeta.
// REQUIRES: the node is not closed, or n.shardsMu is held (Close then waits for the loop).
func (n *Node) startBalancing() {
	if n.cfg.BalanceInterval <= 0 {
		return
	}
	n.balancing.Do(func() {
		n.wg.Add(1)
		go n.balanceLoop(n.cfg.BalanceInterval, n.stop)
	})
}

// balanceLoop runs balanceOnce every interval (with jitter) until stop is closed.
func (n *Node) balanceLoop(interval time.Duration, stop <-chan struct{}) {
	defer n.wg.Done()
	wait := interval
	for {
		t := time.NewTimer(wait + rand.N(wait/2))
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C:
		}
		wait = interval
		if n.balanceOnce() {
			wait = interval / 10
		}
	}
}

// balanceOnce transfers the leadership of one shard away from this node if a live voter of it
// leads at least two shards fewer, has applied nearly all of the shard's log and is not low on disk
// (leadershipView.target). It reports whether it did.
// Counts are cluster-wide, from every node's status (a node hosts only some shards in a managed
// cluster); a node that does not answer is not a candidate.
func (n *Node) balanceOnce() bool {
	self := n.cfg.NodeID
	mine := map[ShardID]*replica{}
	for id, r := range *n.shards.Load() {
		if r.raft.State() == raft.Leader {
			mine[id] = r
		}
	}
	if len(mine) < 2 {
		return false // a node leading one shard or none is never two ahead of anyone
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.Timing.ElectionTimeout)
	defer cancel()
	v := n.leadershipView(ctx)
	now := time.Now()
	for _, id := range slices.Sorted(maps.Keys(mine)) {
		r := mine[id]
		target := v.target(r, self, func(p Peer) bool {
			return v.counts[p.ID] <= v.counts[self]-2 && !n.balanceBackoff.blocked(p.ID, now)
		})
		if target == nil {
			continue
		}
		err := r.transferLeadership(target.ID, target.Addr, v.applied[target.ID][id])
		if errors.Is(err, ErrTransferSpent) {
			continue
		}
		n.balanceBackoff.record(target.ID, err == nil, time.Now())
		n.logger.Debug("balancing leaders: handing over a shard", "shard", uint32(r.id), "to", target.ID,
			"leads", v.counts[self], "target_leads", v.counts[target.ID], "err", err)
		return err == nil
	}
	return false
}

// targetBackoff keeps the balancer from handing leaderships, again and again, to a node that
// cannot take them. A transfer fails when its target does not win the election in time — on a
// starved machine, a node too busy to run its Raft goroutines — and until it fails the shard
// refuses writes ("leadership transfer in progress"). A 3-node cluster on a loaded 2-core box
// saw seven failed transfers to one node within 33 s, each refusing writes for up to an election
// timeout, and that node then lost the leaderships it did win by lease step-downs (issue #21).
// So a failed transfer keeps its target out of the balancer's choice for a while, doubling with
// each failure in a row, and a successful one clears it. Leaderships then even out more slowly
// after trouble; an election still makes any node a leader.
type targetBackoff map[string]backoffEntry

type backoffEntry struct {
	until    time.Time
	failures int
}

// Backoff of a target after failed transfers: the first failure keeps it out for
// balanceBackoffBase, each further one in a row doubles that, up to balanceBackoffMax.
const (
	balanceBackoffBase = 30 * time.Second
	balanceBackoffMax  = 5 * time.Minute
)

// blocked reports whether node is kept out of the balancer's choice at now.
func (b targetBackoff) blocked(node string, now time.Time) bool {
	return now.Before(b[node].until)
}

// record notes the outcome of a transfer to node at now.
func (b *targetBackoff) record(node string, ok bool, now time.Time) {
	if *b == nil {
		*b = targetBackoff{}
	}
	if ok {
		delete(*b, node)
		return
	}
	e := (*b)[node]
	e.failures++
	e.until = now.Add(min(balanceBackoffBase<<min(e.failures-1, 10), balanceBackoffMax))
	(*b)[node] = e
}

// leadershipView is what the nodes answering a status call said about leading: the basis on which
// a leader picks whom to hand a shard to (balanceOnce, shedLeaders).
type leadershipView struct {
	counts  map[string]int                // node → shards it leads
	applied map[string]map[ShardID]uint64 // node → shard → applied index of its replica
	lowDisk map[string]bool               // nodes below their disk watermark (NodeStatus.DiskLow)
}

// leadershipView asks every node for its status within ctx; a node that does not answer is in
// none of the maps.
func (n *Node) leadershipView(ctx context.Context) leadershipView {
	v := leadershipView{counts: map[string]int{}, applied: map[string]map[ShardID]uint64{}, lowDisk: map[string]bool{}}
	for _, p := range n.ClusterStatus(ctx) {
		if p.Status == nil {
			continue
		}
		v.lowDisk[p.ID] = p.Status.DiskLow
		v.applied[p.ID] = map[ShardID]uint64{}
		for _, st := range p.Status.Shards {
			v.applied[p.ID][st.Shard] = st.AppliedIndex
			if st.State == "leader" {
				v.counts[p.ID]++
			}
		}
	}
	return v
}

// target returns the voter of r's shard, other than self, to hand its leadership to: one that
// answered, is not low on disk (it would refuse every send, and hand the shard back), has applied
// nearly all of r's log (a lagging target makes the transfer wait for its catch-up and likely time
// out), and for which ok holds; of those, the one leading the fewest shards. Nil if there is none.
func (v leadershipView) target(r *replica, self string, ok func(Peer) bool) *Peer {
	last := r.raft.LastIndex()
	var target *Peer
	for _, p := range r.voters() {
		caughtUp := v.applied[p.ID] != nil && v.applied[p.ID][r.id]+balanceMaxLag >= last
		if p.ID != self && caughtUp && !v.lowDisk[p.ID] && ok(p) && (target == nil || v.counts[p.ID] < v.counts[target.ID]) {
			target = &p
		}
	}
	return target
}

// balanceMaxLag is how many entries behind the leader's log a voter may be and still be given
// the leadership by the balancer.
const balanceMaxLag = 256

// ErrTransferSpent refuses a leadership transfer that might wedge (see transferLeadership).
// ErrTransferSpent refuses a leadership transfer while an earlier one of the same shard failed
// in this term and its target has not caught up since (see transferLeadership).
var ErrTransferSpent = errors.New("raftstore: a leadership transfer failed in this term and its target has not caught up since; waiting")

// failedTransfer records a leadership transfer that failed: in which term, and the leader's last
// log index then.
type failedTransfer struct{ term, last uint64 }

// transferLeadership hands this replica's leadership to the voter id at addr, whose replica has
// applied targetApplied (0 if unknown).
//
// After a transfer fails, another in the same term waits until the target has applied the log
// as it was at the failure. hashicorp/raft v1.8.0 can wedge otherwise (hashicorp/raft#696): the
// failed transfer may leave its catch-up request queued for the follower's replication, the next
// transfer blocks behind it, and if that replication then stops (a step-down, a shutdown) the
// transfer blocks forever with the group's "transfer in progress" flag set, so that a later
// leadership of this replica refuses every write. A target that has applied that far was
// replicated to since, by a replication loop that takes the queued request as it goes; a new
// term starts new replication state with an empty queue.
func (r *replica) transferLeadership(id, addr string, targetApplied uint64) error {
	term := r.raft.CurrentTerm()
	if f := r.failedTransfer.Load(); f != nil && f.term == term && targetApplied < f.last {
		return ErrTransferSpent
	}
	err := r.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(addr)).Error()
	if err != nil {
		r.failedTransfer.Store(&failedTransfer{term: term, last: r.raft.LastIndex()})
	}
	return err
}
