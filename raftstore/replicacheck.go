package raftstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/log"
)

// Verdict is the outcome of a check of one shard's replicas (ReplicaCheck).
type Verdict string

// Verdicts of a ReplicaCheck.
const (
	// VerdictAgree: every member of the group computed the same checksum and number of keys.
	VerdictAgree Verdict = "agree"
	// VerdictMismatch: two members computed different ones: their states differ at the same Raft
	// index, which only a fault (a disk, a bug) can cause. ReplicaSum.Status says which differ.
	VerdictMismatch Verdict = "mismatch"
	// VerdictIncomplete: no two members differ, but some have no result (ReplicaSum.Status says
	// why): not a mismatch; check again.
	VerdictIncomplete Verdict = "incomplete"
	// VerdictFailed: the checksum command could not be proposed (ReplicaCheck.Err).
	VerdictFailed Verdict = "failed"
)

// SumStatus is where one member of a shard's group stands in a check (ReplicaSum).
type SumStatus string

// Statuses of a ReplicaSum.
const (
	// SumMatch: computed, and the same as the majority's (or everyone's).
	SumMatch SumStatus = "match"
	// SumDiffers: computed, and differs from what a majority of the members computed, or, when no
	// majority agrees, from some other member's: its state cannot be trusted.
	SumDiffers SumStatus = "differs"
	// SumPending: no result yet: the member has not applied the command or not finished its scan,
	// or its node did not answer (ReplicaSum.Note says which).
	SumPending SumStatus = "pending"
	// SumMissed: the member applied past the command's index without a checksum at it: it
	// installed a snapshot or restarted past it, dropped it for keepChecksums later checks, or
	// runs a build that does not know the command. It will never have one: check again.
	SumMissed SumStatus = "missed"
	// SumFailed: the member's scan failed: it could not read its own state (Checksum.Err).
	SumFailed SumStatus = "failed"
)

// ReplicaCheck is the outcome of checking one shard's replicas (Node.CheckReplicas).
type ReplicaCheck struct {
	Shard ShardID
	// Index is the Raft index of the check's ChecksumCommand, at which every member checksums
	// its state; 0 if the command was not proposed.
	Index   uint64
	Verdict Verdict
	// Err is why the command could not be proposed (VerdictFailed): one of Propose's errors.
	Err error
	// Replicas has one entry per member of the shard's group, as its leader lists them (as any
	// member does, if no leader answered), by node id.
	Replicas []ReplicaSum
}

// ReplicaSum is one member's part in a check.
type ReplicaSum struct {
	Node   string
	Voter  bool
	State  string // its Raft state as last reported ("leader", "follower", …); "" if it never answered
	Status SumStatus
	// Checksum is its checksum at the check's index, once it has one (Done).
	Checksum Checksum
	// Applied is the last index its state reflects, as last reported (ShardStatus.StateIndex).
	Applied uint64
	// Note says, in words, why the member is pending, missed or failed.
	Note string
}

// checkPoll is how often CheckReplicas asks the members that have no result yet.
const checkPoll = 100 * time.Millisecond

// CheckReplicas checks that the replicas of each of shards hold the same state: it proposes a
// ChecksumCommand to each (in parallel, forwarded to its leader as any proposal, and proposed
// again while its leadership moves: see proposeCheck), then asks the members of its group for
// their checksum at the command's index, through the status call ClusterStatus makes, until each
// has one or can have none (SumMissed), or until ctx ends: those without one by then are
// SumPending, never a mismatch. Give ctx a deadline: a member that is down keeps a check waiting
// until it ends. The answer has one ReplicaCheck per shard, in the order of shards, and is the
// caller's.
//
// A check whose members disagree is counted (ChecksumMismatches) and logged as a warning naming
// the members that differ. The meta shard has no such state: checking it fails with ErrNoShard.
func (n *Node) CheckReplicas(ctx context.Context, shards []ShardID) []ReplicaCheck {
	checks := make([]*shardCheck, len(shards))
	var wg sync.WaitGroup
	for i, id := range shards {
		c := &shardCheck{ReplicaCheck: ReplicaCheck{Shard: id}, addrs: map[string]string{}}
		checks[i] = c
		if id == MetaShard {
			c.Err = fmt.Errorf("%w: the meta shard holds the cluster map, not a replicated state to checksum", ErrNoShard)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Index, c.Err = n.proposeCheck(ctx, id)
		}()
	}
	wg.Wait()
	for _, c := range checks {
		if c.Err == nil {
			n.candidates(c)
		}
	}
	t := time.NewTicker(checkPoll)
	defer t.Stop()
	for {
		ask := map[string]string{}
		for _, c := range checks {
			c.toAsk(ask)
		}
		if len(ask) == 0 {
			break // every member of every shard has its answer
		}
		sts := n.StatusOf(ctx, ask)
		for _, c := range checks {
			c.update(sts, ctx.Err() != nil)
		}
		if !waitTick(ctx, t) {
			break
		}
	}
	out := make([]ReplicaCheck, len(checks))
	for i, c := range checks {
		out[i] = c.result()
		if out[i].Verdict == VerdictMismatch {
			n.mismatches.Add(1)
			var differ, sums []string
			for _, r := range out[i].Replicas {
				if r.Status == SumDiffers {
					differ = append(differ, r.Node)
				}
				if r.Checksum.Done && r.Checksum.Err == "" {
					sums = append(sums, fmt.Sprintf("%s=%016x/%d", r.Node, r.Checksum.Sum, r.Checksum.Keys))
				}
			}
			n.logger.Warn("replica checksum mismatch: replicas of the shard hold different state at the same Raft index; "+
				"replace the replicas that differ (docs/OPERATIONS.md, \"Replica checksums\")",
				"shard", uint32(c.Shard), "index", c.Index, "differ", strings.Join(differ, ","), "checksums", strings.Join(sums, " "))
		}
	}
	return out
}

// proposeCheck proposes a ChecksumCommand to shard and returns its index. It retries, within
// ctx, what a leader change or a node restarting causes (a leader that moved while the proposal
// followed it, an outcome unknown): a second checksum command costs one more scan and changes
// nothing. A refusal (a leader whose build does not know the command), a shard no node hosts
// and a node shutting down are final.
func (n *Node) proposeCheck(ctx context.Context, shard ShardID) (uint64, error) {
	for {
		res, err := n.Propose(ctx, shard, ChecksumCommand())
		switch {
		case err == nil:
			return res.CheckIndex, nil
		case log.Rejected(err), errors.Is(err, ErrNoShard), errors.Is(err, ErrShutdown):
			return 0, err
		}
		select {
		case <-ctx.Done():
			return 0, err
		case <-time.After(checkPoll):
		}
	}
}

// waitTick waits for t's next tick and reports whether it came before ctx ended.
func waitTick(ctx context.Context, t *time.Ticker) bool {
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// ChecksumMismatches returns how many shard checks made through this node (CheckReplicas) found
// replicas disagreeing since it started.
func (n *Node) ChecksumMismatches() uint64 { return n.mismatches.Load() }

// shardCheck is the state of one shard's check while CheckReplicas gathers it.
type shardCheck struct {
	ReplicaCheck
	// addrs are the nodes to ask while the group's members are not known: id → Raft address.
	addrs map[string]string
	// members are the group's members once a replica named them, by node id; leaderView is set
	// once its leader did, whose list is not replaced any more.
	members    map[string]*memberCheck
	leaderView bool
}

// memberCheck is one member's part while the check gathers it.
type memberCheck struct {
	ReplicaSum
	addr  string
	final bool // it has its answer (computed, missed or failed): it is not asked again
}

// candidates seeds c with the nodes that may hold the shard: the members this node's replica
// knows (authoritative if it leads), else those the meta group places it on.
func (n *Node) candidates(c *shardCheck) {
	if r, ok := n.replica(c.Shard); ok {
		st := r.status()
		c.setMembers(st)
		c.leaderView = st.State == "leader"
	}
	for _, p := range n.Placed(c.Shard) {
		c.addrs[p.ID] = p.Addr
	}
}

// setMembers makes st's view of the group (its voters and non-voters) the members of c, keeping
// what is known of those already there.
func (c *shardCheck) setMembers(st ShardStatus) {
	members := map[string]*memberCheck{}
	add := func(p Peer, voter bool) {
		m := c.members[p.ID]
		if m == nil {
			m = &memberCheck{ReplicaSum: ReplicaSum{Node: p.ID, Status: SumPending, Note: "not asked yet"}}
		}
		m.Voter, m.addr = voter, p.Addr
		members[p.ID] = m
		c.addrs[p.ID] = p.Addr
	}
	for _, p := range st.Voters {
		add(p, true)
	}
	for _, p := range st.Nonvoters {
		add(p, false)
	}
	if len(members) > 0 {
		c.members = members
	}
}

// toAsk adds to ask the nodes c still needs an answer from.
func (c *shardCheck) toAsk(ask map[string]string) {
	if c.Err != nil {
		return
	}
	if c.members == nil || !c.leaderView {
		maps.Copy(ask, c.addrs) // whoever may host it, to learn the members (from the leader, preferably)
	}
	for id, m := range c.members {
		if !m.final {
			ask[id] = m.addr
		}
	}
}

// update reads the members' answers in sts. late says the check's context ended meanwhile: a
// node that did not answer then was cut short, and keeps what it said last if it said anything.
func (c *shardCheck) update(sts []PeerStatus, late bool) {
	if c.Err != nil {
		return
	}
	if !c.leaderView {
		for _, p := range sts {
			if st, ok := p.shard(c.Shard); ok && (st.State == "leader" || c.members == nil) {
				c.setMembers(st)
				c.leaderView = st.State == "leader"
			}
		}
	}
	for _, p := range sts {
		m := c.members[p.ID]
		if m == nil || m.final {
			continue
		}
		if p.Status == nil {
			if !late || m.State == "" {
				m.Note = "its node did not answer: " + p.Err
			}
			continue
		}
		st, ok := p.shard(c.Shard)
		if !ok {
			m.Note = "its node does not host the shard (a replica being added or removed)"
			continue
		}
		m.State, m.Applied = st.State, st.StateIndex
		i := slices.IndexFunc(st.Checksums, func(s Checksum) bool { return s.Index == c.Index })
		switch {
		case i >= 0 && !st.Checksums[i].Done:
			m.Note = "computing its checksum"
		case i >= 0 && st.Checksums[i].Err != "":
			m.Checksum, m.Status, m.final = st.Checksums[i], SumFailed, true
			m.Note = "its scan failed: " + st.Checksums[i].Err
		case i >= 0:
			m.Checksum, m.Status, m.final, m.Note = st.Checksums[i], SumMatch, true, ""
		case st.StateIndex >= c.Index:
			m.Status, m.final = SumMissed, true
			m.Note = fmt.Sprintf("applied up to %d without a checksum at %d: it installed a snapshot or restarted past it, "+
				"took %d checksums since, or runs a build without replica checks", st.StateIndex, c.Index, keepChecksums)
		default:
			m.Note = fmt.Sprintf("has applied up to %d of %d", st.StateIndex, c.Index)
		}
	}
}

// shard returns p's status of shard, if p answered and hosts it.
func (p PeerStatus) shard(id ShardID) (ShardStatus, bool) {
	if p.Status == nil {
		return ShardStatus{}, false
	}
	for _, st := range p.Status.Shards {
		if st.Shard == id {
			return st, true
		}
	}
	return ShardStatus{}, false
}

// result is c's outcome: every member's status, the ones that differ marked, and the verdict.
func (c *shardCheck) result() ReplicaCheck {
	out := c.ReplicaCheck
	if c.Err != nil {
		out.Verdict = VerdictFailed
		return out
	}
	type sum struct{ sum, keys uint64 }
	counts := map[sum]int{}
	complete := c.members != nil
	for _, id := range slices.Sorted(maps.Keys(c.members)) {
		m := c.members[id]
		out.Replicas = append(out.Replicas, m.ReplicaSum)
		if m.Status == SumMatch {
			counts[sum{m.Checksum.Sum, m.Checksum.Keys}]++
		} else {
			complete = false
		}
	}
	switch {
	case len(counts) > 1:
		out.Verdict = VerdictMismatch
		// The state a majority of the members computed is the group's; without one, no member's
		// can be told right and all of them differ.
		var major sum
		best := 0
		for s, k := range counts {
			if k > best { // a tie is no majority: which one wins it does not matter
				major, best = s, k
			}
		}
		majority := best > len(out.Replicas)/2
		for i := range out.Replicas {
			r := &out.Replicas[i]
			if r.Status == SumMatch && (!majority || (sum{r.Checksum.Sum, r.Checksum.Keys}) != major) {
				r.Status = SumDiffers
				if majority {
					r.Note = fmt.Sprintf("differs from the %d of %d members that agree", best, len(out.Replicas))
				} else {
					r.Note = "no majority of the members agrees: none can be told right"
				}
			}
		}
	case complete:
		out.Verdict = VerdictAgree
	default:
		out.Verdict = VerdictIncomplete
	}
	return out
}
