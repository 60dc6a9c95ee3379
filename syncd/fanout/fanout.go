package fanout

import (
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
)

// How it works. Fan-out moves every conversation entry from its home shard's outbox into the
// user logs of its recipients, on whatever shards those users live (DESIGN §4).
//
// While this node leads a source shard, every (source, destination) pair is a stream of its own:
// one goroutine reads the source's outbox from that destination's mark, proposes the
// destination's batches in order and backs off on its own failures, so a destination without
// quorum delays only its own deliveries (the others go on at full speed) and a slow destination
// never serializes the rest. A trimmer per source trims the outbox up to the lowest mark.
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
// destinations). *routing.Table provides it.
type Router interface {
	UserShard(uid string) raftstore.ShardID
	Shards() []raftstore.ShardID
}

// Config tunes the fan-out. Zero fields take the defaults.
type Config struct {
	// Batch is how many outbox records one delivery covers at most. Default 256.
	Batch int
	// IdleLag is how far a destination that receives nothing may trail the outbox, while others
	// are receiving, before it is sent an empty batch to move its mark on (so the outbox can be
	// trimmed). When the outbox has been quiet for a moment (100 ms) every trailing mark is moved
	// at once. Default 1024.
	IdleLag uint64
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Fanout drains the outbox of every shard this node leads. It is safe for concurrent use.
type Fanout struct {
	node   Shards
	slots  Router
	cfg    Config
	logger *slog.Logger

	mu   sync.Mutex
	wake map[raftstore.ShardID]*signal // per hosted shard, created on first use

	delivered    atomic.Uint64 // user-log entries written by this node's fan-out
	failures     atomic.Uint64 // delivery or trim attempts that failed and were retried
	deadLettered atomic.Uint64 // deliveries this node moved to dead letters

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
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Fanout{node: node, slots: slots, cfg: cfg, logger: cfg.Logger.With("component", "fanout"),
		wake: map[raftstore.ShardID]*signal{}}
}

// signal wakes every goroutine waiting on it (close-to-broadcast): the streams of one source
// all wait for its next apply.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed by the next fire.
func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// fire wakes every waiter; it never blocks.
func (s *signal) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// applied returns shard's signal of new applies, creating it.
func (f *Fanout) applied(shard raftstore.ShardID) *signal {
	f.mu.Lock()
	defer f.mu.Unlock()
	sg := f.wake[shard]
	if sg == nil {
		sg = &signal{}
		f.wake[shard] = sg
	}
	return sg
}

// Notify tells the fan-out that shard applied new entries (raftstore.App.Applied calls it). It
// never blocks.
func (f *Fanout) Notify(shard raftstore.ShardID) { f.applied(shard).fire() }

// Delivered returns the number of user-log entries this fan-out has written.
func (f *Fanout) Delivered() uint64 { return f.delivered.Load() }

// Failures returns the number of fan-out delivery or trim attempts that failed and were retried.
func (f *Fanout) Failures() uint64 { return f.failures.Load() }

// DeadLettered returns the number of deliveries this fan-out moved to dead letters.
func (f *Fanout) DeadLettered() uint64 { return f.deadLettered.Load() }

// Run drains every hosted shard's outbox while this node leads it, until ctx ends: one drainer
// per hosted shard, started and stopped as the node gains and loses replicas. It returns once
// all of its goroutines have stopped.
func (f *Fanout) Run(ctx context.Context) {
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

// drain runs the fan-out of one source shard whenever this node leads it, until ctx ends.
func (f *Fanout) drain(ctx context.Context, src raftstore.ShardID) {
	for ctx.Err() == nil {
		if f.leads(src) {
			f.lead(ctx, src)
			continue
		}
		select { // wait for new entries, or poll for a change of leadership
		case <-ctx.Done():
		case <-f.applied(src).wait():
		case <-time.After(time.Second):
		}
	}
}

func (f *Fanout) leads(src raftstore.ShardID) bool {
	st, err := f.node.ShardStatus(src)
	return err == nil && st.State == "leader"
}

// source is the fan-out of one source shard while this node leads it: the destinations' marks,
// shared by their streams and the trimmer.
type source struct {
	id      raftstore.ShardID
	dests   []raftstore.ShardID
	mu      sync.Mutex
	marks   map[raftstore.ShardID]uint64 // learned from the destinations' answers
	moved   chan struct{}                // a mark moved: the trimmer looks (buffered, 1)
	trimmed uint64                       // the outbox was trimmed up to here
}

// mark returns dest's mark, raised to first-1: positions before the outbox's first retained one
// were delivered everywhere before they were trimmed, so a mark not learned yet (or learned
// before a trim) can be raised to first-1 safely.
func (s *source) mark(dest raftstore.ShardID, first uint64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := max(s.marks[dest], first-1)
	s.marks[dest] = m
	return m
}

// advance records dest's new mark and tells the trimmer.
func (s *source) advance(dest raftstore.ShardID, mark uint64) {
	s.mu.Lock()
	s.marks[dest] = max(s.marks[dest], mark)
	s.mu.Unlock()
	select {
	case s.moved <- struct{}{}:
	default:
	}
}

// low returns the lowest mark of all destinations: what the outbox may be trimmed up to.
func (s *source) low() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	low := s.marks[s.dests[0]]
	for _, d := range s.dests[1:] {
		low = min(low, s.marks[d])
	}
	return low
}

// lead runs one stream per destination and the trimmer for src until this node no longer leads
// it, the destinations change, or ctx ends; it returns once they have all stopped.
func (f *Fanout) lead(ctx context.Context, src raftstore.ShardID) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &source{id: src, dests: f.slots.Shards(), marks: map[raftstore.ShardID]uint64{}, moved: make(chan struct{}, 1)}
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, d := range s.dests {
		wg.Go(func() { f.stream(ctx, s, d) })
	}
	wg.Go(func() { f.trim(ctx, s) })
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if !f.leads(src) || !slices.Equal(s.dests, f.slots.Shards()) {
				return
			}
		}
	}
}

// stream delivers src's outbox to dest, in order, from dest's mark, until ctx ends. It backs
// off on its own failures; other destinations are not held back.
func (f *Fanout) stream(ctx context.Context, s *source, dest raftstore.ShardID) {
	backoff := time.Duration(0)
	wake := f.applied(s.id)
	for ctx.Err() == nil {
		next := wake.wait() // before reading, so an apply after the read wakes us
		progressed, err := f.step(ctx, s, dest, false)
		switch {
		case err != nil && ctx.Err() == nil:
			f.failures.Add(1)
			backoff = min(max(2*backoff, 50*time.Millisecond), 5*time.Second)
			f.logger.Warn("fan-out delivery failed; retrying", "source", s.id, "dest", dest, "err", err, "backoff", backoff)
			sleep(ctx, backoff+rand.N(backoff/2))
		case progressed:
			backoff = 0
		default:
			backoff = 0
			select { // idle: wait for new entries; after a quiet moment, move a trailing mark
			case <-ctx.Done():
			case <-next:
			case <-time.After(quiet):
				if _, err := f.step(ctx, s, dest, true); err != nil && ctx.Err() == nil {
					f.failures.Add(1)
				}
				select {
				case <-ctx.Done():
				case <-wake.wait():
				case <-time.After(time.Second):
				}
			}
		}
	}
}

// quiet is how long a stream waits for more entries before it moves its trailing mark with an
// empty batch (so the outbox can be trimmed), instead of doing so after every entry.
const quiet = 100 * time.Millisecond

// step delivers the next batch of src's outbox to dest: up to Batch records from dest's mark,
// restricted to the recipients living on dest. A batch with nothing for dest is sent only once
// dest trails by IdleLag, or with move (the outbox went quiet), so that idle destinations do not
// cost a proposal per entry. It reports whether it proposed anything.
func (f *Fanout) step(ctx context.Context, s *source, dest raftstore.ShardID, move bool) (bool, error) {
	state, err := f.node.State(s.id)
	if err != nil {
		return false, err
	}
	info, err := state.Outbox()
	if err != nil {
		return false, err
	}
	if info.Head < info.First {
		return false, nil // nothing waiting
	}
	mark := s.mark(dest, info.First)
	if mark >= info.Head {
		return false, nil
	}
	items, err := state.ReadOutbox(mark+1, f.cfg.Batch)
	if err != nil || len(items) == 0 {
		return false, err
	}
	last := items[len(items)-1].Pos
	b := f.batchFor(s.id, dest, mark, last, items)
	if len(b.Items) == 0 && last-mark < f.cfg.IdleLag && !move {
		return false, nil // nothing for this destination yet; move its mark later, in one go
	}
	mark, err = f.deliver(ctx, s.id, dest, b)
	if refused(err) && len(b.Items) > 0 {
		mark, err = f.isolate(ctx, s.id, dest, b)
	}
	if err != nil {
		return false, err
	}
	s.advance(dest, mark)
	return true, nil
}

// trim trims src's outbox up to the lowest destination mark whenever a mark moves, until ctx
// ends, backing off on failures.
func (f *Fanout) trim(ctx context.Context, s *source) {
	backoff := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.moved:
		}
		low := s.low()
		if low <= s.trimmed {
			continue
		}
		state, err := f.node.State(s.id)
		if err != nil {
			return // the replica is gone: so is this node's leadership of it
		}
		if info, err := state.Outbox(); err == nil && low < info.First {
			s.trimmed = low // trimmed up to there already (by an earlier leader, say)
			continue
		}
		_, err = f.node.Propose(ctx, s.id, raftstore.TrimCommand(&log.Trim{Target: log.TrimOutboxLog, UpTo: low}))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.failures.Add(1)
			backoff = min(max(2*backoff, 50*time.Millisecond), 5*time.Second)
			f.logger.Warn("fan-out outbox trim failed; retrying", "shard", s.id, "up_to", low, "err", err, "backoff", backoff)
			sleep(ctx, backoff)
			select { // look again
			case s.moved <- struct{}{}:
			default:
			}
			continue
		}
		backoff = 0
		s.trimmed = low
	}
}

// deliver proposes b to dest and returns the destination's mark afterwards.
func (f *Fanout) deliver(ctx context.Context, src, dest raftstore.ShardID, b *log.DeliveryBatch) (uint64, error) {
	if inject := f.fault.Load(); inject != nil && len(b.Items) > 0 {
		b = &log.DeliveryBatch{Source: b.Source, Prev: b.Prev, Last: b.Last, Items: cloneItems(b.Items)}
		(*inject)(dest, b.Items)
	}
	res, err := f.node.Propose(ctx, dest, raftstore.DeliverCommand(b))
	if err != nil {
		return 0, fmt.Errorf("deliver %d→%d (%d, %d]: %w", src, dest, b.Prev, b.Last, err)
	}
	f.delivered.Add(uint64(res.Deliver.Appended))
	return res.Deliver.Mark, nil
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
// stale, and the next attempt starts from the right one.
func refused(err error) bool {
	return err != nil && log.Rejected(err) && !errors.Is(err, log.ErrOutOfOrder)
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
// range with recipients on d, restricted to those recipients.
func (f *Fanout) batchFor(src, d raftstore.ShardID, prev, last uint64, items []log.OutboxItem) *log.DeliveryBatch {
	b := &log.DeliveryBatch{Source: src, Prev: prev, Last: last}
	for _, it := range items {
		if it.Pos <= prev {
			continue
		}
		var users []string
		for _, uid := range it.Recipients {
			if f.slots.UserShard(uid) == d {
				users = append(users, uid)
			}
		}
		if len(users) > 0 {
			b.Items = append(b.Items, log.Delivery{Pos: it.Pos, Users: users, Entry: it.Entry})
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
