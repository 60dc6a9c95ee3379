package raftstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Leases: how current a replica knows itself to be.
//
// A replica's state is prefix-consistent, so what it reads is never wrong; but it may be old. A
// replica cut off from its shard's leader keeps its state, and a reader that takes its head for
// the shard's head (a sync stream's heartbeat: "you have everything up to h") is told something
// that stopped being true when the link broke (issue #10: devices on a node partitioned for 15 s
// got heartbeats all along, and saw new entries up to 15 s late with nothing telling them so).
//
// Hearing from the leader is not enough either (issue 21): a replica on a full disk kept hearing
// its leaders' heartbeats, which hashicorp/raft handles apart from the log (they carry no
// entries, touch no disk and are answered while the replica's log writes are stuck), while its
// Pebble writes stalled and it applied nothing: its sync streams sent heartbeats with heads 5–10 s
// old. So the lease is tied to applying, by proofs:
//
//   - a proof is a pair (t, c): everything the shard committed before time t has an index ≤ c;
//   - c is the last index of the leader's Raft log: by Raft's election restriction a leader's log
//     holds every committed entry (its commit index may trail right after an election, its log
//     does not), so its last index at t bounds everything committed before t;
//   - a leader makes one from its own log whenever it looks; a follower asks its leader's node
//     (one status call per leader node, for all the shards that node leads, every
//     leaseProveEvery, made by the lease loop), t being when it asked, before the question left;
//   - once the replica has applied c, it is current as of t: provenAt.
//
// A replica holds its lease while it leads its shard or heard from its leader less than
// Timing.StaleAfter ago, and its provenAt is less than StaleAfter old. Its reads then show the
// shard as of at most StaleAfter ago. A leader needs no clock of its own for its log to hold the
// shard's commits: hashicorp/raft's leader steps down when it has not reached a quorum for
// LeaderLeaseTimeout, far below StaleAfter, and a follower asks the node its Raft instance names
// as leader, taking the answer only if that node still says it leads. A replica that stops
// applying (a stalled disk, a slow apply) loses its lease within StaleAfter even though it hears
// its leader; one that regains contact after a partition holds it again once it has applied what
// the leader committed after the regain; one that has not heard from a leader since it started
// does not hold it: its state is whatever was on disk.
//
// Each look at a replica's lease (WatchLease, and the node's lease loop every StaleAfter/10)
// closes the replica's change channel when it finds the lease lost or regained since the last
// look, so that readers waiting for something to send (sync streams) learn of it within a tick of
// the loop, without a timer each.

// Lease is what a replica knows of how current it is; see Node.WatchLease.
type Lease struct {
	// Held: the replica leads its shard, or heard from its leader less than Timing.StaleAfter
	// ago, and has applied, less than StaleAfter ago, everything its shard had committed by
	// then. Only then does its state show the shard as of at most StaleAfter ago.
	Held bool
	// Unheard is how long ago the replica last heard from its shard's leader (0 while it leads,
	// the time since the replica started when it never has), or, if longer, how old the newest
	// state it has proved to have applied is: how far behind its reads may be.
	Unheard time.Duration
}

// leaseProof is a proof of currency (see the top of this file): everything committed before at
// has an index of at most commit (a leader's last index then).
type leaseProof struct {
	at     time.Time
	commit uint64
}

// leaseState is a replica's lease bookkeeping. Safe for concurrent use.
type leaseState struct {
	started time.Time // when the replica started: the start of an election's grace (leaderWait)

	mu      sync.Mutex
	ledAt   time.Time     // the last time the replica was seen leading
	held    bool          // as of the last look (observe)
	changed chan struct{} // closed (and replaced) when a look finds held changed
	// provenAt is the time of the newest proof the replica has applied; pending are the proofs it
	// has not applied yet, oldest first, each younger and with a larger commit than the one before.
	provenAt time.Time
	pending  []leaseProof
	// Asking the leader's node for a proof (the lease loop): whether a call is out, and when the
	// last one was made.
	asking  bool
	askedAt time.Time
}

func newLeaseState(now time.Time) *leaseState {
	return &leaseState{started: now, changed: make(chan struct{})}
}

// leaseProofGap is the least time between two pending proofs: a newer one with a commit no larger
// replaces the last (it proves more), one that comes sooner waits, so pending stays short
// (StaleAfter / leaseProofGap proofs at most, older ones being of no use).
const leaseProofGap = 50 * time.Millisecond

// proveLocked records the proof p. REQUIRES: ls.mu.
func (ls *leaseState) proveLocked(p leaseProof) {
	if n := len(ls.pending); n > 0 {
		last := &ls.pending[n-1]
		switch {
		case p.commit <= last.commit:
			last.at = later(last.at, p.at) // everything before the later time is within the commit
			return
		case p.at.Sub(last.at) < leaseProofGap:
			return
		}
	}
	ls.pending = append(ls.pending, p)
}

// settleLocked moves the pending proofs that applied covers into provenAt, drops those older than
// staleAfter (they could only prove a lapsed lease) and returns provenAt. REQUIRES: ls.mu.
func (ls *leaseState) settleLocked(now time.Time, applied uint64, staleAfter time.Duration) time.Time {
	i := 0
	for ; i < len(ls.pending) && ls.pending[i].commit <= applied; i++ {
		ls.provenAt = later(ls.provenAt, ls.pending[i].at)
	}
	for ; i < len(ls.pending) && now.Sub(ls.pending[i].at) >= staleAfter; i++ {
	}
	ls.pending = ls.pending[i:]
	return ls.provenAt
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// lease returns r's lease at now.
func (r *replica) lease(now time.Time, staleAfter time.Duration) Lease {
	r.ls.mu.Lock()
	defer r.ls.mu.Unlock()
	return r.leaseLocked(now, staleAfter)
}

// leaseLocked is lease. REQUIRES: r.ls.mu.
func (r *replica) leaseLocked(now time.Time, staleAfter time.Duration) Lease {
	leads := r.raft.State() == raft.Leader
	if leads {
		r.ls.ledAt = now
		r.ls.proveLocked(leaseProof{now, r.raft.LastIndex()})
	}
	// AppliedIndex is what raft has handed to the state machine: with the fsm stuck, raft's
	// hand-off queue fills and it stops too (and a follower's log writes stall with it first).
	provenAt := r.ls.settleLocked(now, r.raft.AppliedIndex(), staleAfter)
	heard := r.raft.LastContact()
	if r.ls.ledAt.After(heard) { // a leader that just stepped down was current until then
		heard = r.ls.ledAt
	}
	if heard.IsZero() {
		return Lease{Unheard: now.Sub(r.ls.started)}
	}
	unheard := max(now.Sub(heard), 0)
	if provenAt.IsZero() { // nothing proved since the start: whatever was on disk
		return Lease{Unheard: max(unheard, now.Sub(r.ls.started))}
	}
	behind := max(now.Sub(provenAt), 0)
	if unheard >= staleAfter || behind >= staleAfter {
		return Lease{Unheard: max(unheard, behind)}
	}
	if leads {
		unheard = 0
	}
	return Lease{Held: true, Unheard: unheard}
}

// leaseProveEvery is how often a follower asks its leader's node for a proof: four times a lease,
// so that one lost or slow answer does not lapse it.
func leaseProveEvery(staleAfter time.Duration) time.Duration { return staleAfter / 4 }

// proofTarget returns the node r asks for a proof, if r follows a known leader on another node and
// is due to ask (no call out, the last one leaseProveEvery ago); it marks the asking begun at now.
func (r *replica) proofTarget(now time.Time, staleAfter time.Duration, self string) (raft.ServerAddress, raft.ServerID, bool) {
	r.ls.mu.Lock()
	defer r.ls.mu.Unlock()
	if r.ls.asking || now.Sub(r.ls.askedAt) < leaseProveEvery(staleAfter) || r.raft.State() != raft.Follower {
		return "", "", false
	}
	addr, id := r.raft.LeaderWithID()
	if id == "" || string(id) == self {
		return "", "", false
	}
	r.ls.asking, r.ls.askedAt = true, now
	return addr, id, true
}

// askProofs asks the node leader for the last index of its log of every shard of reps (replicas of this
// node that follow it, marked asking at asked) in one status call, and records a proof for each
// shard the node still leads. A failed call is retried leaseProveEvery later: the lease lapses
// meanwhile only if no call succeeds within StaleAfter.
func (n *Node) askProofs(leader nodeAt, reps []*replica, asked time.Time) {
	defer n.wg.Done()
	ctx, cancel := context.WithTimeout(n.stopCtx, n.cfg.Timing.StaleAfter)
	defer cancel()
	st, err := n.fwd.status(ctx, leader)
	if err != nil {
		n.logger.Debug("asking the leader for a lease proof", "leader", leader.String(), "err", err)
	}
	commits := map[ShardID]uint64{}
	for _, s := range st.Shards {
		if s.State == "leader" {
			commits[s.Shard] = s.LastIndex
		}
	}
	for _, r := range reps {
		r.ls.mu.Lock()
		r.ls.asking = false
		if c, ok := commits[r.id]; ok {
			r.ls.proveLocked(leaseProof{asked, c})
		}
		r.ls.mu.Unlock()
	}
}

// watch returns r's lease now and a channel closed when it changes from that (seen by a later
// watch or by the lease loop).
func (r *replica) watch(now time.Time, staleAfter time.Duration) (Lease, <-chan struct{}) {
	return r.observe(now, staleAfter)
}

// observe computes r's lease at now and, if it is held where the last look found it lost or the
// other way round, wakes the watchers of the last look. It returns the lease and the channel of
// this look.
func (r *replica) observe(now time.Time, staleAfter time.Duration) (Lease, <-chan struct{}) {
	r.ls.mu.Lock()
	defer r.ls.mu.Unlock()
	l := r.leaseLocked(now, staleAfter)
	if l.Held != r.ls.held {
		r.ls.held = l.Held
		close(r.ls.changed)
		r.ls.changed = make(chan struct{})
	}
	return l, r.ls.changed
}

// wakeLeaseWatchers wakes r's lease watchers without a change (the replica is going away: they
// look again and find it gone).
func (r *replica) wakeLeaseWatchers() {
	r.ls.mu.Lock()
	defer r.ls.mu.Unlock()
	close(r.ls.changed)
	r.ls.changed = make(chan struct{})
}

// WatchLease returns the lease of this node's replica of shard now, and a channel that is closed
// when the lease may have changed: lost or regained (seen within Timing.StaleAfter/10), or the
// replica stopped. Take the channel, act on the lease, then wait on the channel and call again.
// It returns ErrNoShard if the node hosts no replica of shard.
func (n *Node) WatchLease(shard ShardID) (Lease, <-chan struct{}, error) {
	r, ok := n.replica(shard)
	if !ok {
		return Lease{}, nil, ErrNoShard
	}
	l, ch := r.watch(time.Now(), n.cfg.Timing.StaleAfter)
	return l, ch, nil
}

// leaseTick is how often the lease loop looks at every replica.
func (n *Node) leaseTick() time.Duration { return max(n.cfg.Timing.StaleAfter/10, 10*time.Millisecond) }

// leaseLoop looks at every replica's lease each leaseTick until the node closes, asking the
// leaders' nodes for the proofs their followers here are due (askProofs), waking the watchers of
// those whose lease was lost or regained, and logging each change once.
func (n *Node) leaseLoop() {
	defer n.wg.Done()
	t := time.NewTicker(n.leaseTick())
	defer t.Stop()
	// The loop's own memory, for its logs (a watcher may see a change first): held once since the
	// replica started, and logged as stale. A replica's first lease after its start is not news.
	held, lapsed := map[ShardID]bool{}, map[ShardID]bool{}
	staleAfter := n.cfg.Timing.StaleAfter
	for {
		select {
		case <-n.stop:
			return
		case now := <-t.C:
			due := map[nodeAt][]*replica{}
			for _, r := range *n.shards.Load() {
				if addr, lid, ask := r.proofTarget(now, staleAfter, n.cfg.NodeID); ask {
					to := nodeAt{string(lid), n.dialAddr(string(lid), string(addr))}
					due[to] = append(due[to], r)
				}
			}
			for to, reps := range due {
				n.wg.Add(1)
				go n.askProofs(to, reps, now)
			}
			for id, r := range *n.shards.Load() {
				l, _ := r.observe(now, staleAfter)
				switch {
				case l.Held:
					held[id] = true
					if lapsed[id] {
						delete(lapsed, id)
						n.logger.Info("replica current again: it hears from its shard's leader and applies what it committed", "shard", uint32(id))
					}
				case held[id] && !lapsed[id]:
					lapsed[id] = true
					n.logger.Warn("replica stale: it has not heard from its shard's leader, or not applied what the leader "+
						"committed, within the lease; its readers are told",
						"shard", uint32(id), "behind", l.Unheard.Round(time.Millisecond), "lease", staleAfter)
				}
			}
		}
	}
}

// leaderWaitOver reports whether a proposal waiting for shard r to have a leader should give up
// now: the replica does not hold its lease, and it is past the grace of its first election
// (StaleAfter from its start). A leader elected in a healthy group is heard within that time; a
// replica that has not heard of one since is cut off from its group, or the group has no quorum,
// and waiting out the caller's deadline only keeps the client from trying another node.
func (n *Node) leaderWaitOver(r *replica, now time.Time) (bool, Lease) {
	l := r.lease(now, n.cfg.Timing.StaleAfter)
	return !l.Held && now.Sub(r.ls.started) >= n.cfg.Timing.StaleAfter, l
}

// whileLeased returns a context that is also cancelled when r's lease lapses, and a function to
// release it: a proposal forwarded to a leader this replica no longer hears from is not waited for
// until the caller's deadline (a silently broken link would hold it that long). A replica that
// does not hold the lease when the proposal starts (it has just learnt of its leader, say) is
// not guarded: only a lapse during the wait cancels it.
func (n *Node) whileLeased(ctx context.Context, r *replica) (context.Context, context.CancelFunc) {
	l, ch := r.watch(time.Now(), n.cfg.Timing.StaleAfter)
	if !l.Held {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		for {
			select {
			case <-ch:
			case <-ctx.Done():
				return
			}
			if l, ch = r.watch(time.Now(), n.cfg.Timing.StaleAfter); !l.Held {
				cancel(fmt.Errorf("%w: shard %d: this replica has not heard from its leader for %v",
					ErrNoLeader, r.id, l.Unheard.Round(time.Millisecond)))
				return
			}
		}
	}()
	return ctx, func() { cancel(nil) }
}
