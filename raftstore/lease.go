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
// A replica holds its lease while it leads its shard, or while it last heard from the shard's
// leader less than Timing.StaleAfter ago. Its reads then show the shard as of at most StaleAfter
// ago. A leader needs no clock of its own here: hashicorp/raft's leader steps down when it has
// not reached a quorum for LeaderLeaseTimeout, far below StaleAfter. A replica that has not heard
// from a leader since it started does not hold the lease: its state is whatever was on disk.
//
// Hearing from the leader again is not enough to hold it again: the leader's first contact after
// a partition (or a restart) is a heartbeat that carries no entries, and the replica's state is
// still the old one. So a follower that regains contact asks the leader for its commit index (one
// status call per replica per regain, made by the lease loop) and holds the lease only once it
// has applied that far.
//
// Each look at a replica's lease (WatchLease, and the node's lease loop every StaleAfter/10)
// closes the replica's change channel when it finds the lease lost or regained since the last
// look, so that readers waiting for something to send (sync streams) learn of it within a tick of
// the loop, without a timer each.

// Lease is what a replica knows of how current it is; see Node.WatchLease.
type Lease struct {
	// Held: the replica leads its shard, or heard from its leader less than Timing.StaleAfter
	// ago (and, since it last regained contact, has applied what the leader had committed then).
	// Only then does its state show the shard as of at most StaleAfter ago.
	Held bool
	// Unheard is how long ago the replica last heard from its shard's leader: 0 while it leads,
	// the time since the replica started when it never has.
	Unheard time.Duration
}

// leaseState is a replica's lease bookkeeping. Safe for concurrent use.
type leaseState struct {
	started time.Time // when the replica started: the start of an election's grace (leaderWait)

	mu      sync.Mutex
	ledAt   time.Time     // the last time the replica was seen leading
	held    bool          // as of the last look (observe)
	changed chan struct{} // closed (and replaced) when a look finds held changed
	// Catching up after regaining contact: the leader's commit index to apply before holding the
	// lease again (valid when catchUpKnown), and whether the lease loop is asking for it.
	catchUp      uint64
	catchUpKnown bool
	asking       bool
}

func newLeaseState(now time.Time) *leaseState {
	return &leaseState{started: now, changed: make(chan struct{})}
}

// lease returns r's lease at now.
func (r *replica) lease(now time.Time, staleAfter time.Duration) Lease {
	r.ls.mu.Lock()
	defer r.ls.mu.Unlock()
	return r.leaseLocked(now, staleAfter)
}

// leaseLocked is lease. REQUIRES: r.ls.mu.
func (r *replica) leaseLocked(now time.Time, staleAfter time.Duration) Lease {
	if r.raft.State() == raft.Leader {
		r.ls.ledAt = now
		return Lease{Held: true}
	}
	heard := r.raft.LastContact()
	if r.ls.ledAt.After(heard) { // a leader that just stepped down was current until then
		heard = r.ls.ledAt
	}
	if heard.IsZero() {
		return Lease{Unheard: now.Sub(r.ls.started)}
	}
	unheard := max(now.Sub(heard), 0)
	switch {
	case unheard >= staleAfter:
		r.ls.catchUpKnown = false // the next regain asks again
		return Lease{Unheard: unheard}
	case r.ls.held: // held all along (a leader that stepped down, a follower in touch)
		return Lease{Held: true, Unheard: unheard}
	default: // regained: held once caught up with the leader's commit (learnCommit)
		return Lease{Held: r.ls.catchUpKnown && r.raft.AppliedIndex() >= r.ls.catchUp, Unheard: unheard}
	}
}

// catchUpTarget returns the leader to ask for its commit index if r has regained contact but
// does not know how far to catch up, and no one is asking yet; it marks the asking begun.
func (r *replica) catchUpTarget(now time.Time, staleAfter time.Duration) (raft.ServerAddress, raft.ServerID, bool) {
	r.ls.mu.Lock()
	defer r.ls.mu.Unlock()
	l := r.leaseLocked(now, staleAfter)
	if l.Held || r.ls.catchUpKnown || r.ls.asking || l.Unheard >= staleAfter || r.raft.LastContact().IsZero() {
		return "", "", false
	}
	addr, id := r.raft.LeaderWithID()
	if id == "" {
		return "", "", false
	}
	r.ls.asking = true
	return addr, id, true
}

// learnCommit asks leader for its commit index of r's shard and records it as what r must apply
// before it holds its lease again. A failed or unfit answer (the node asked no longer leads) is
// retried at a later tick of the lease loop.
func (n *Node) learnCommit(r *replica, leader nodeAt) {
	defer n.wg.Done()
	ctx, cancel := context.WithTimeout(n.stopCtx, n.cfg.Timing.StaleAfter)
	defer cancel()
	st, err := n.fwd.status(ctx, leader)
	r.ls.mu.Lock()
	defer r.ls.mu.Unlock()
	r.ls.asking = false
	if err != nil {
		n.logger.Debug("asking the leader for its commit index", "shard", uint32(r.id), "leader", leader.String(), "err", err)
		return
	}
	for _, s := range st.Shards {
		if s.Shard == r.id && s.State == "leader" {
			r.ls.catchUp, r.ls.catchUpKnown = s.CommitIndex, true
		}
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

// leaseLoop looks at every replica's lease each leaseTick until the node closes, waking the
// watchers of those whose lease was lost or regained, and logging each change once.
func (n *Node) leaseLoop() {
	defer n.wg.Done()
	t := time.NewTicker(n.leaseTick())
	defer t.Stop()
	// The loop's own memory, for its logs (a watcher may see a change first): held once since the
	// replica started, and logged as stale. A replica's first lease after its start is not news.
	held, lapsed := map[ShardID]bool{}, map[ShardID]bool{}
	for {
		select {
		case <-n.stop:
			return
		case now := <-t.C:
			for id, r := range *n.shards.Load() {
				if addr, lid, ask := r.catchUpTarget(now, n.cfg.Timing.StaleAfter); ask {
					n.wg.Add(1)
					go n.learnCommit(r, nodeAt{string(lid), n.dialAddr(string(lid), string(addr))})
				}
				l, _ := r.observe(now, n.cfg.Timing.StaleAfter)
				switch {
				case l.Held:
					held[id] = true
					if lapsed[id] {
						delete(lapsed, id)
						n.logger.Info("replica current again: it hears from its shard's leader", "shard", uint32(id))
					}
				case held[id] && !lapsed[id]:
					lapsed[id] = true
					n.logger.Warn("replica stale: it has not heard from its shard's leader within the lease; its readers are told",
						"shard", uint32(id), "unheard", l.Unheard.Round(time.Millisecond), "lease", n.cfg.Timing.StaleAfter)
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
