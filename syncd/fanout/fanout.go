package fanout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/tracing"
)

// How it works. Fan-out moves every conversation entry from its home shard's outbox into the user
// logs of its recipients, on whatever shards those users live (DESIGN §4).
//
// For each (source, destination) pair the stream is ordered and idempotent: a batch covers the
// source outbox positions (Prev, Last] and the destination applies it only past its high-water
// mark for that source (log.Tx.Deliver). So a batch can be resent any number of times — after a
// timeout, a leader change or a restart — without duplicating or reordering anything, and marks
// read from a lagging replica are merely conservative. Once every destination's mark has passed
// an outbox position, the source trims its outbox up to it.
//
// The drainer keeps each destination's mark in memory, learned from the destination's answers:
// the node draining a shard need not host the destinations (in a managed cluster it often does
// not). A mark it has not learned yet is taken as the outbox's first retained position minus one,
// which no destination can be below (the outbox is trimmed only up to the lowest mark), so the
// first batch may resend what a destination has, which it ignores, and answers its real mark.
//
// Failures come in two kinds. A transient one (no leader, timeout, shutdown) is retried with
// backoff for as long as it lasts: the stream cannot skip ahead without breaking order for every
// user behind it, and the fan-out lag metric shows the wait. A refusal (the destination's state
// machine deterministically rejected the batch, log.Rejected) can never succeed on retry, so the
// batch is resent one entry at a time to find the entries refused, each of those is recorded as a
// dead letter in the source shard with the reason, and the destination's mark is moved past it
// (G5: it is set aside for an operator, never lost). See log/deadletter.go.
//
// Deliveries are pipelined per destination. A source's drainer runs a round whenever something
// may have changed — its shard applied entries (an append that created work wakes it at once, no
// timer), a delivery answered, a backoff ended — and each round proposes to every destination
// with nothing in flight the outbox records it has not been sent, without waiting for the
// answers: at most one delivery per (source, destination) is in flight, all destinations are in
// flight at once, and each next batch holds everything that arrived while the last one was
// committing. The deliveries of all the sources a node drains meet in one lane per destination
// (lane.go), which has one proposal in flight and puts the batches queued meanwhile into the
// next one, so a destination takes one Raft entry per commit however many sources feed it:
// that is the batching the sequential rounds had, without their wait (D39). The outbox is trimmed
// every TrimEvery, not after every round.
//
// Failures are isolated per destination. A destination that fails backs off on its own, and one
// whose delivery hangs (a shard without quorum) keeps it in flight until it answers or
// DeliverTimeout ends it; until then it is sent nothing else, and nothing else waits for it (its
// lane holds only batches for it). When it answers, its stream resumes from its mark. The outbox
// is trimmed only up to the lowest mark of all destinations, so a destination down for long holds
// back the trim (not the deliveries): the outbox then grows with the source's traffic until it
// recovers (the outbox metric shows it).

// Shards is what the fan-out needs of this node's shards: the replicas it hosts, whether it
// leads one, a replica's state (to read the outbox) and proposals, which reach a shard's leader
// from any node. *raftstore.Node provides it; tests provide one without Raft.
type Shards interface {
	Shards() []raftstore.ShardID
	ShardStatus(shard raftstore.ShardID) (raftstore.ShardStatus, error)
	State(shard raftstore.ShardID) (*log.Shard, error)
	Propose(ctx context.Context, shard raftstore.ShardID, cmd raftstore.Command) (raftstore.Result, error)
}

// Router says where users live: the shard of a user's log, and every data shard (the possible
// destinations). *cluster.Routing provides it.
type Router interface {
	UserShard(uid string) raftstore.ShardID
	Shards() []raftstore.ShardID
}

// Config tunes the fan-out. Zero fields take the defaults.
type Config struct {
	// Batch is how many outbox records one read takes, and so the most one batch carries.
	// Default 256.
	Batch int
	// IdleLag is how far a destination that receives nothing may trail the outbox before it is
	// sent an empty batch to move its mark on (so the outbox can be trimmed), even before the
	// next trim is due. Default 1024.
	IdleLag uint64
	// TrimEvery is how often a source's outbox is trimmed up to the lowest mark while it holds
	// anything: one Raft entry per interval and source instead of one per round. A destination
	// that received nothing for a whole interval is then sent an empty batch, so that the next
	// trim can pass it. Default 100 ms.
	TrimEvery time.Duration
	// DeliverTimeout bounds one delivery (with the steps of setting refused entries aside) and
	// one trim; a delivery that runs out of it fails and is retried after a backoff. Default 10 s.
	DeliverTimeout time.Duration
	// Observe, if set, is called for every entry a delivery wrote, once its destination
	// answered, with the time since the entry's append (its entry time): how long the fan-out
	// took, the part of the push latency before a sync stream is woken (a metric).
	Observe func(time.Duration)
	// Tracer, if set, records each batch's fan-out and delivery as spans (tracing.Tracer.Delivered).
	// Default nil: off.
	Tracer *tracing.Tracer
	// DeadLetters configures the dead-letter process (compensate.go): how dead letters are
	// classified, replayed automatically and archived. The zero value records codes but never
	// replays or archives.
	DeadLetters DeadLetterPolicy
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Fanout drains the outbox of every shard this node leads. It is safe for concurrent use.
type Fanout struct {
	node   Shards
	slots  Router
	cfg    Config
	logger *slog.Logger

	mu    sync.Mutex
	wake  map[raftstore.ShardID]chan struct{} // per hosted shard, created on first use
	lanes map[raftstore.ShardID]*lane         // per destination, created on first use
	// lanesRunning counts the lanes' goroutines, which Run waits for: a proposal may outlast
	// the delivery that asked for it.
	lanesRunning sync.WaitGroup

	// drained holds, per source this node drains as its leader, the outbox position up to which
	// every destination has applied every record meant for it (Drained).
	drained map[raftstore.ShardID]uint64

	delivered    atomic.Uint64 // user-log entries written by this node's fan-out
	failures     atomic.Uint64 // deliveries, and rounds of a source, that failed and were retried
	deadLettered atomic.Uint64 // deliveries this node moved to dead letters
	compensated  atomic.Uint64 // dead letters this node's compensation replayed
	compRefused  atomic.Uint64 // automatic replays refused again and scheduled once more
	gaveUp       atomic.Uint64 // dead letters this node's compensation gave up
	archived     atomic.Uint64 // dead letters this node's compensation archived

	// fault, when set, may alter a batch's items just before they are proposed to a destination,
	// as a corrupted or misrouted delivery would arrive. It is the fault injector of the tests
	// that make a destination refuse a delivery; production code never sets it.
	fault atomic.Pointer[Fault]
}

// New prepares fan-out for the shards node hosts, routing users with slots.
func New(node Shards, slots Router, cfg Config) *Fanout {
	if cfg.Batch <= 0 {
		cfg.Batch = 256
	}
	if cfg.IdleLag == 0 {
		cfg.IdleLag = 1024
	}
	if cfg.TrimEvery <= 0 {
		cfg.TrimEvery = 100 * time.Millisecond
	}
	if cfg.DeliverTimeout <= 0 {
		cfg.DeliverTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Fanout{node: node, slots: slots, cfg: cfg, logger: cfg.Logger.With("component", "fanout"),
		wake: map[raftstore.ShardID]chan struct{}{}, lanes: map[raftstore.ShardID]*lane{}}
}

// wakeCh returns shard's wake channel, creating it.
func (f *Fanout) wakeCh(shard raftstore.ShardID) chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := f.wake[shard]
	if ch == nil {
		ch = make(chan struct{}, 1)
		f.wake[shard] = ch
	}
	return ch
}

// Notify tells the fan-out that shard applied new entries (raftstore.App.Applied calls it). It
// never blocks.
func (f *Fanout) Notify(shard raftstore.ShardID) {
	select {
	case f.wakeCh(shard) <- struct{}{}:
	default:
	}
}

// Delivered returns the number of user-log entries this fan-out has written.
func (f *Fanout) Delivered() uint64 { return f.delivered.Load() }

// Drained returns the outbox position of source shard src up to which every destination has
// applied every record meant for it, as this node's drainer of src knows from the answers; ok is
// false unless this node drains src as its leader and has finished a round. A conversation's
// move waits for it to pass the position where the conversation was fenced before it lifts the
// barrier its new home's deliveries wait behind (raftstore/cluster, the move driver): then none of its records is left
// to deliver from src. The value is never ahead of the truth: a
// destination's mark is learned from its answers, and positions it holds nothing in count only
// once read.
func (f *Fanout) Drained(src raftstore.ShardID) (pos uint64, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	pos, ok = f.drained[src]
	return pos, ok
}

// setDrained records src's drained position (Drained); forget removes it.
func (f *Fanout) setDrained(src raftstore.ShardID, pos uint64, forget bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if forget {
		delete(f.drained, src)
		return
	}
	if f.drained == nil {
		f.drained = map[raftstore.ShardID]uint64{}
	}
	f.drained[src] = pos
}

// Failures returns the number of deliveries to a destination, and of rounds of a source (its
// outbox read or trim), that failed and were retried.
func (f *Fanout) Failures() uint64 { return f.failures.Load() }

// DeadLettered returns the number of deliveries this fan-out moved to dead letters.
func (f *Fanout) DeadLettered() uint64 { return f.deadLettered.Load() }

// Run drains every hosted shard's outbox while this node leads it, until ctx ends: one drainer
// per hosted shard, started and stopped as the node gains and loses replicas. It returns once
// all of its goroutines have stopped.
func (f *Fanout) Run(ctx context.Context) {
	defer f.lanesRunning.Wait()
	var wg sync.WaitGroup
	defer wg.Wait()
	running := map[raftstore.ShardID]context.CancelFunc{}
	defer func() {
		for _, stop := range running {
			stop()
		}
	}()
	for {
		hosted := map[raftstore.ShardID]bool{}
		for _, id := range f.node.Shards() {
			hosted[id] = true
			if running[id] == nil {
				dctx, stop := context.WithCancel(ctx)
				running[id] = stop
				wg.Add(1)
				go func() {
					defer wg.Done()
					f.drain(dctx, id)
				}()
			}
		}
		for id, stop := range running {
			if !hosted[id] {
				stop()
				delete(running, id)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// drain runs rounds for one source shard while this node leads it, until ctx ends: one after
// each wake-up (an apply of the source, an answer of a delivery, the end of a backoff, a trim
// due). It returns once the deliveries and the trim it started have answered (they end with
// ctx).
func (f *Fanout) drain(ctx context.Context, src raftstore.ShardID) {
	s := &source{id: src, dests: map[raftstore.ShardID]*dest{}, answered: make(chan struct{}, 1)}
	defer s.wg.Wait()
	defer f.setDrained(src, 0, true)
	backoff := time.Duration(0)
	wake := f.wakeCh(src)
	// moved: the source may have applied something since the last look at its outbox range.
	// Only its applies move the outbox, and each wakes the drainer, so the rounds that follow
	// only an answer reuse the range last read (there are about two answers per apply).
	moved := true
	for ctx.Err() == nil {
		select {
		case <-wake:
			moved = true
		default:
		}
		f.settle(ctx, s)
		var err error
		if st, serr := f.node.ShardStatus(src); serr == nil && st.State == "leader" {
			if err = f.round(ctx, s, moved); err == nil {
				moved = false
			}
		} else {
			moved = true // look again once leading
			f.setDrained(src, 0, true)
		}
		if err != nil && ctx.Err() == nil {
			f.failures.Add(1)
			backoff = min(max(2*backoff, 50*time.Millisecond), 5*time.Second)
			f.logger.Warn("fan-out of a shard failed; retrying", "shard", src, "err", err, "backoff", backoff)
			sleep(ctx, backoff+rand.N(backoff/2))
			continue
		}
		backoff = 0
		// Wait for new entries, an answer of a delivery or trim in flight, the end of a
		// destination's backoff, the next trim, or poll for a change of leadership.
		poll := time.Second
		if at, ok := s.nextTimer(); ok {
			poll = min(poll, max(time.Until(at), time.Millisecond))
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
		case <-wake:
			moved = true
		case <-s.answered:
		case <-t.C:
			moved = true
		}
		t.Stop()
	}
}

// source is the fan-out of one source shard: what its drainer knows of each destination, and the
// deliveries in flight. Only the drainer's goroutine touches dests and the trim fields; a
// delivery's or trim's goroutine hands its answer back through outcomes.
type source struct {
	id    raftstore.ShardID
	dests map[raftstore.ShardID]*dest
	wg    sync.WaitGroup // deliveries and the trim in flight

	trimming   bool      // a trim is in flight
	trimAt     time.Time // when the next trim is due
	trimHeld   bool      // the last round left records in the outbox: trimAt is a wake-up
	trimHead   uint64    // the outbox head when the last trim was due (see round)
	trimBack   time.Duration
	trimFailed int       // consecutive failed trims
	trimWarned time.Time // the last warning about them

	info    log.OutboxInfo // the outbox range as last read
	routing uint64         // the source's RoutingVersion when recent was valid

	// recent holds the outbox records read last, contiguous, for the next rounds: destinations
	// answer one at a time, and each would otherwise read again what the others just read.
	recent []log.OutboxItem

	mu       sync.Mutex // guards outcomes
	outcomes []outcome
	answered chan struct{} // buffered (1): an outcome was added
}

// dest is what a source's drainer knows of one destination: the stream (source, destination).
type dest struct {
	id   raftstore.ShardID
	mark uint64 // learned from its answers: may be stale, never ahead
	// heard is the highest mark the destination itself answered: a lower bound of the mark it
	// stores, which mark is not (round raises mark to the outbox's first position minus one
	// without asking). A destination that has heard less than the head of an idle outbox is
	// told the rest with an empty batch (round), so the marks it stores reach the head: a
	// move's cutover waits for them (raftstore/cluster, the move driver), and an idle source would otherwise never
	// send one.
	heard uint64
	// below is set when the destination answered a mark below the outbox's first position: a
	// shard that joined the routing after those positions were trimmed (a new shard, one a user
	// moved to), so they hold nothing for it and its batches start at its own mark.
	below bool
	// clean ≥ mark: the outbox holds nothing for this destination in (mark, clean], so the next
	// batch covers (mark, last] but needs to read only from clean+1 (no record is read again
	// for a destination that had nothing in it).
	clean    uint64
	inflight bool          // a delivery is in flight: it gets no other until this one answers
	backoff  time.Duration // after a failure: it gets nothing until retryAt
	retryAt  time.Time
	notYet   time.Duration // the wait after the last log.ErrNotYet refusal, 0 after a success
	failing  int           // consecutive failed deliveries
	since    time.Time     // the first failure of the streak
	warned   time.Time     // the last warning about the streak
}

// outcome is a delivery's answer (the destination's mark afterwards, or why it failed), or a
// trim's.
type outcome struct {
	dest raftstore.ShardID
	trim bool
	mark uint64
	err  error
}

func (s *source) dest(id raftstore.ShardID) *dest {
	d := s.dests[id]
	if d == nil {
		d = &dest{id: id}
		s.dests[id] = d
	}
	return d
}

func (s *source) report(o outcome) {
	s.mu.Lock()
	s.outcomes = append(s.outcomes, o)
	s.mu.Unlock()
	select {
	case s.answered <- struct{}{}:
	default:
	}
}

// nextTimer returns when the drainer must look again without being woken: the earliest end of a
// destination's backoff still to come, or the next trim while the outbox holds records. A time
// already past is not one: a round has seen it (or will, once this node leads).
func (s *source) nextTimer() (time.Time, bool) {
	var at time.Time
	now := time.Now()
	earliest := func(t time.Time) {
		if t.After(now) && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	for _, d := range s.dests {
		if !d.inflight {
			earliest(d.retryAt)
		}
	}
	if s.trimHeld && !s.trimming {
		earliest(s.trimAt)
	}
	return at, !at.IsZero()
}

// warnEvery is how often a destination that keeps failing is logged again.
const warnEvery = time.Minute

// barrierRetry is how soon a batch refused with log.ErrNotYet is first sent again, doubling up
// to barrierRetryMax while it is refused: the wait is for another source's fan-out, which
// delivers within milliseconds while its destinations are up, or within its lag under load.
const (
	barrierRetry    = 10 * time.Millisecond
	barrierRetryMax = 160 * time.Millisecond
)

// settle takes in the answers of the deliveries and the trim that finished: a success moves the
// destination's mark, a failure puts the destination (only it) in backoff.
func (f *Fanout) settle(ctx context.Context, s *source) {
	s.mu.Lock()
	outs := s.outcomes
	s.outcomes = nil
	s.mu.Unlock()
	for _, o := range outs {
		if o.trim {
			f.settleTrim(ctx, s, o)
			continue
		}
		d := s.dest(o.dest)
		d.inflight = false
		if o.err == nil {
			d.mark, d.heard = max(d.mark, o.mark), max(d.heard, o.mark)
			d.clean = max(d.clean, d.mark)
			if d.failing > 0 {
				f.logger.Info("fan-out to a shard recovered", "source", s.id, "dest", d.id,
					"failures", d.failing, "after", time.Since(d.since).Round(time.Millisecond))
			}
			d.backoff, d.retryAt, d.failing, d.notYet = 0, time.Time{}, 0, 0
			continue
		}
		if ctx.Err() != nil {
			continue // shutting down or no longer draining: not a failure of the destination
		}
		if errors.Is(o.err, log.ErrNotYet) {
			// A moved conversation's entry waits at the destination for its old home's last
			// deliveries there (log.Barrier): not a failure, and due soon; each refusal costs
			// the destination a commit, so the retries back off while the wait lasts.
			d.notYet = min(max(2*d.notYet, barrierRetry), barrierRetryMax)
			d.retryAt = time.Now().Add(d.notYet)
			continue
		}
		var ooo *log.OutOfOrderError
		if errors.As(o.err, &ooo) && ooo.Source == s.id {
			// The destination is behind what this drainer took for its mark: resume from its
			// own, at once. Below the outbox's first position only for a shard that joined the
			// routing after those positions were trimmed (see round): a shard just added, or
			// one a move made a destination — not a failure, so not counted or logged.
			d.mark, d.clean, d.heard, d.below = ooo.Mark, ooo.Mark, ooo.Mark, true
			d.retryAt = time.Now().Add(barrierRetry)
			continue
		}
		f.failures.Add(1)
		now := time.Now()
		d.backoff = min(max(2*d.backoff, 50*time.Millisecond), 5*time.Second)
		d.retryAt = now.Add(d.backoff + rand.N(d.backoff/2))
		if d.failing == 0 {
			d.since = now
		}
		d.failing++
		if d.failing == 1 || now.Sub(d.warned) >= warnEvery {
			d.warned = now
			f.logger.Warn("fan-out to a shard failing; its deliveries wait, the other shards' go on",
				"source", s.id, "dest", d.id, "err", o.err, "failures", d.failing, "backoff", d.backoff)
		}
	}
}

// settleTrim takes in a trim's answer: the next one is due TrimEvery after it, or after a backoff
// once it failed.
func (f *Fanout) settleTrim(ctx context.Context, s *source, o outcome) {
	s.trimming = false
	now := time.Now()
	if o.err == nil || ctx.Err() != nil {
		if s.trimFailed > 0 {
			f.logger.Info("trimming the outbox recovered", "shard", s.id, "failures", s.trimFailed)
		}
		s.trimFailed, s.trimBack = 0, 0
		s.trimAt = now.Add(f.cfg.TrimEvery)
		return
	}
	f.failures.Add(1)
	s.trimFailed++
	s.trimBack = min(max(2*s.trimBack, f.cfg.TrimEvery), 5*time.Second)
	s.trimAt = now.Add(s.trimBack + rand.N(s.trimBack/2))
	if s.trimFailed == 1 || now.Sub(s.trimWarned) >= warnEvery {
		s.trimWarned = now
		f.logger.Warn("trimming the outbox failed; retrying", "shard", s.id, "err", o.err,
			"failures", s.trimFailed, "backoff", s.trimBack)
	}
}

// round proposes to every destination that has no delivery in flight (and is not backing off)
// the outbox records it has not been sent yet, up to Batch records a destination, without
// waiting for the answers; and, every TrimEvery, trims what all destinations have applied.
//
// So deliveries are pipelined per destination: at most one in flight to each (which keeps each
// stream in order and a shard without quorum from piling proposals up), all destinations in
// flight at once, and each next batch holds everything that arrived while the last one was
// committing. An entry then waits for at most the one commit before its own, not for a round of
// commits to every destination in turn, as it did when the rounds proposed to the destinations
// one after another (D34, D39). Destinations read one window of the outbox together when they
// are close (one read, a batch each; the records read stay in memory for the next rounds, see
// read); one far behind (back after an outage) reads its own window, so it catches up without
// holding the others to its pace. moved says whether the source may have applied something since
// its outbox range was last read; if not, the range read then is used.
func (f *Fanout) round(ctx context.Context, s *source, moved bool) error {
	state, err := f.node.State(s.id)
	if err != nil {
		return err
	}
	if v := state.RoutingVersion(); v != s.routing {
		// A cutover (or a barrier) changed how records route since the recent ones were read:
		// a moved user's records read before its cutover must not be routed by today's map.
		s.recent, s.routing = nil, v
	}
	if moved {
		if s.info, err = state.Outbox(); err != nil {
			return err
		}
	}
	info := s.info
	s.trimHeld = info.Head >= info.First
	dests := f.slots.Shards()
	now := time.Now()
	if !s.trimHeld {
		// Trimmed to the head: nothing waits, every destination has what was meant for it. But a
		// destination may store a mark below the head (a shard that joined the routing since,
		// or one that only ever had nothing from this source): tell it, once, that it has
		// everything up to the head, or a move waiting for its marks would wait for this
		// source's next record, forever if none comes.
		for _, id := range dests {
			if d := s.dest(id); d.heard < info.Head && !d.inflight && !now.Before(d.retryAt) {
				f.launch(ctx, s, d, &log.DeliveryBatch{Source: s.id, Prev: d.heard, Last: info.Head})
			}
		}
		f.setDrained(s.id, info.Head, false)
		return nil
	}
	var pending []*dest
	for _, id := range dests {
		d := s.dest(id)
		// Positions before First were delivered to every destination routed to when they were
		// trimmed, so a mark not learned yet (or learned before a trim) can be raised to First-1
		// safely. A destination that answered a lower one joined the routing later (below):
		// those positions hold nothing for it, so only the reads start at First.
		if !d.below {
			d.mark = max(d.mark, info.First-1)
		}
		d.clean = max(d.clean, d.mark, info.First-1)
		if !d.inflight && !now.Before(d.retryAt) && d.clean < info.Head {
			pending = append(pending, d)
		}
	}
	slices.SortFunc(pending, func(a, b *dest) int { return cmp.Compare(a.clean, b.clean) })
	s.forget()
	for len(pending) > 0 {
		items, rerr := s.read(state, info, pending[0].clean+1, f.cfg.Batch)
		if rerr != nil || len(items) == 0 {
			err = rerr
			break
		}
		last := items[len(items)-1].Pos
		n := 0
		for n < len(pending) && pending[n].clean < last {
			n++
		}
		for _, d := range pending[:n] {
			if b := f.batchFor(s.id, d.id, d.mark, d.clean, last, items); len(b.Items) > 0 {
				f.launch(ctx, s, d, b)
			} else {
				d.clean = last // nothing for it: no proposal, the next batch covers the gap
			}
		}
		pending = pending[n:]
	}
	if err != nil {
		return err
	}
	// Every destination has everything meant for it up to its clean position (its mark, and
	// nothing for it between the two).
	drained := info.Head
	for _, id := range dests {
		drained = min(drained, s.dest(id).clean)
	}
	f.setDrained(s.id, drained, false)
	// Destinations with nothing to receive move their marks with an empty batch only when they
	// trail by IdleLag, or at a trim when they received nothing for a whole TrimEvery (their
	// mark is still below the head of the last trim): not a proposal per destination per round.
	trimDue := !s.trimming && !now.Before(s.trimAt)
	for _, id := range dests {
		d := s.dest(id)
		if d.inflight || now.Before(d.retryAt) || d.mark >= d.clean {
			continue
		}
		if d.clean-d.mark >= f.cfg.IdleLag || trimDue && d.mark < s.trimHead {
			f.launch(ctx, s, d, &log.DeliveryBatch{Source: s.id, Prev: d.mark, Last: d.clean})
		}
	}
	if !trimDue {
		return nil
	}
	s.trimHead = info.Head
	low := info.Head
	for _, id := range dests {
		low = min(low, s.dest(id).mark)
	}
	if low < info.First {
		s.trimAt = now.Add(f.cfg.TrimEvery)
		return nil
	}
	s.trimming = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		tctx, cancel := context.WithTimeout(ctx, f.cfg.DeliverTimeout)
		defer cancel()
		_, err := f.node.Propose(tctx, s.id, raftstore.TrimCommand(&log.Trim{Target: log.TrimOutboxLog, UpTo: low}))
		if err != nil {
			err = fmt.Errorf("trim outbox of %d up to %d: %w", s.id, low, err)
		}
		s.report(outcome{trim: true, err: err})
	}()
	return nil
}

// recentMax bounds source.recent, in multiples of Config.Batch: a destination further behind
// reads the outbox itself (it is catching up after an outage, not keeping pace).
const recentMax = 4

// read returns up to n outbox records from position from on, up to info.Head, from the records
// read recently where it can: only what was appended since is read from the store, and a read
// far behind the recent ones (a destination catching up) leaves them be.
func (s *source) read(state *log.Shard, info log.OutboxInfo, from uint64, n int) ([]log.OutboxItem, error) {
	r := s.recent
	if len(r) == 0 || from < r[0].Pos || from > r[len(r)-1].Pos+1 {
		items, err := state.ReadOutbox(from, n)
		if err == nil && (len(r) == 0 || from > r[len(r)-1].Pos+1) {
			s.recent = items
		}
		return items, err
	}
	i, _ := slices.BinarySearchFunc(r, from, func(it log.OutboxItem, pos uint64) int { return cmp.Compare(it.Pos, pos) })
	if end := r[len(r)-1].Pos; len(r)-i < n && end < info.Head {
		more, err := state.ReadOutbox(end+1, n-(len(r)-i))
		if err != nil {
			return nil, err
		}
		r = append(r, more...)
		if over := min(len(r)-recentMax*n, i); over > 0 {
			r = slices.Clone(r[over:]) // drop the oldest (not the ones asked for) and their array
			i -= over
		}
		s.recent = r
	}
	return r[i:min(i+n, len(r))], nil
}

// forget drops the recent records no destination needs any more: those at or below every
// destination's clean position.
func (s *source) forget() {
	if len(s.recent) == 0 {
		return
	}
	low := s.recent[len(s.recent)-1].Pos
	for _, d := range s.dests {
		low = min(low, d.clean)
	}
	i, _ := slices.BinarySearchFunc(s.recent, low+1, func(it log.OutboxItem, pos uint64) int { return cmp.Compare(it.Pos, pos) })
	if i == len(s.recent) {
		s.recent = nil
		return
	}
	s.recent = s.recent[i:]
}

// launch proposes b to d in a goroutine of its own; its answer comes back through s.report.
func (f *Fanout) launch(ctx context.Context, s *source, d *dest, b *log.DeliveryBatch) {
	d.inflight = true
	src, id := s.id, d.id
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(ctx, f.cfg.DeliverTimeout)
		defer cancel()
		var tm *deliveryTiming
		if f.cfg.Tracer.Enabled() && len(b.Items) > 0 {
			tm = &deliveryTiming{began: time.Now()}
			ctx = context.WithValue(ctx, timingKey{}, tm)
		}
		mark, err := f.deliver(ctx, src, id, b)
		if tm != nil {
			f.cfg.Tracer.Delivered(tracing.Delivery{Source: src, Dest: id, Items: b.Items, Began: tm.began, Proposed: tm.proposed,
				Answered: cmp.Or(tm.answered, time.Now()), Batches: tm.batches, Appended: tm.appended, Err: err})
		}
		if err == nil && f.cfg.Observe != nil {
			now := time.Now().UnixNano()
			for _, it := range b.Items {
				f.cfg.Observe(time.Duration(now - it.Entry.Time))
			}
		}
		if refused(err) && len(b.Items) > 0 {
			mark, err = f.isolate(ctx, src, id, b)
		}
		s.report(outcome{dest: id, mark: mark, err: err})
	}()
}

// deliver proposes b to dest and returns the destination's mark afterwards.
func (f *Fanout) deliver(ctx context.Context, src, dest raftstore.ShardID, b *log.DeliveryBatch) (uint64, error) {
	if inject := f.fault.Load(); inject != nil && len(b.Items) > 0 {
		b = &log.DeliveryBatch{Source: b.Source, Prev: b.Prev, Last: b.Last, Items: cloneItems(b.Items)}
		(*inject)(dest, b.Items)
	}
	res, err := f.propose(ctx, dest, b)
	if err != nil {
		return 0, fmt.Errorf("deliver %d→%d (%d, %d]: %w", src, dest, b.Prev, b.Last, err)
	}
	f.delivered.Add(uint64(res.Appended))
	return res.Mark, nil
}

// isolate handles a batch dest refused: it resends the batch one item at a time, dead-letters
// each item refused on its own, and moves dest's mark past it, so one bad entry does not hold
// back the rest of the stream. It returns the mark after b.Last.
func (f *Fanout) isolate(ctx context.Context, src, dest raftstore.ShardID, b *log.DeliveryBatch) (uint64, error) {
	mark := b.Prev
	for _, it := range b.Items {
		if it.Pos <= mark {
			continue // a redelivery found the mark already past it
		}
		m, err := f.deliver(ctx, src, dest, &log.DeliveryBatch{Source: src, Prev: mark, Last: it.Pos, Items: []log.Delivery{it}})
		if err == nil {
			mark = m
			continue
		}
		if !refused(err) {
			return 0, err
		}
		dl := &log.DeadLetterAdd{Dest: dest, Pos: it.Pos, Users: it.Users, Reason: err.Error()}
		if p := f.cfg.DeadLetters; p.on() {
			dl.Code, _ = log.RejectionCode(err)
			if log.ClassOfRejection(dl.Code) == log.ClassRetryable {
				dl.NextTry = p.nextTry(time.Now(), 0)
			}
		}
		if _, perr := f.node.Propose(ctx, src, raftstore.DeadLetterCommand(dl)); perr != nil {
			return 0, fmt.Errorf("record dead letter %s: %w", adminapi.DeadLetterID(uint32(src), uint32(dest), it.Pos), perr)
		}
		f.deadLettered.Add(1)
		f.logger.Error("delivery refused; moved to dead letters (list with syncctl dlq list, replay once fixed)",
			"id", adminapi.DeadLetterID(uint32(src), uint32(dest), it.Pos), "msg_id", it.Entry.MsgID.String(), "users", it.Users, "reason", err)
		if mark, err = f.deliver(ctx, src, dest, &log.DeliveryBatch{Source: src, Prev: mark, Last: it.Pos}); err != nil {
			return 0, err
		}
	}
	if mark < b.Last {
		return f.deliver(ctx, src, dest, &log.DeliveryBatch{Source: src, Prev: mark, Last: b.Last})
	}
	return mark, nil
}

// refused reports whether err is a deterministic refusal by the destination, which no retry of
// the same batch can overcome. An out-of-order answer is not one: it means the mark read was
// stale, and the next round starts from the right one.
func refused(err error) bool {
	return err != nil && log.Rejected(err) && !errors.Is(err, log.ErrOutOfOrder) && !errors.Is(err, log.ErrNotYet)
}

func cloneItems(items []log.Delivery) []log.Delivery {
	out := make([]log.Delivery, len(items))
	for i, it := range items {
		it.Users = append([]string(nil), it.Users...)
		out[i] = it
	}
	return out
}

// batchFor builds the batch of items for destination d covering (prev, last]: every item in that
// range with recipients on d, restricted to those recipients. There are none in (prev, clean].
func (f *Fanout) batchFor(src, d raftstore.ShardID, prev, clean, last uint64, items []log.OutboxItem) *log.DeliveryBatch {
	b := &log.DeliveryBatch{Source: src, Prev: prev, Last: last}
	for _, it := range items {
		if it.Pos <= clean {
			continue
		}
		var users []string
		for _, uid := range it.Recipients {
			to, pinned := it.Pinned[uid] // a moved user: the record's position decides
			if !pinned {
				to = f.slots.UserShard(uid)
			}
			if to == d {
				users = append(users, uid)
			}
		}
		if len(users) > 0 {
			b.Items = append(b.Items, log.Delivery{Pos: it.Pos, Users: users, Entry: it.Entry.CopyFor(users), After: it.After})
		}
	}
	return b
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
