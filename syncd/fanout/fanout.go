package fanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// How it works. Fan-out moves every conversation entry from its home shard's outbox into the user logs of its
// recipients, on whatever shards those users live (DESIGN §4).
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
	// Batch is how many outbox records one round reads. Default 256.
	Batch int
	// IdleLag is how far a destination that receives nothing may trail the outbox, while others
	// are receiving, before it is sent an empty batch to move its mark on (so the outbox can be
	// trimmed). When the outbox goes quiet every trailing mark is moved at once. Default 1024.
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
	wake map[raftstore.ShardID]chan struct{} // per hosted shard, created on first use

	delivered    atomic.Uint64 // user-log entries written by this node's fan-out
	failures     atomic.Uint64 // rounds that failed and were retried
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
		wake: map[raftstore.ShardID]chan struct{}{}}
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

// Failures returns the number of fan-out rounds that failed and were retried.
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

// drain runs rounds for one source shard, backing off after failures.
func (f *Fanout) drain(ctx context.Context, src raftstore.ShardID) {
	backoff := time.Duration(0)
	marks := map[raftstore.ShardID]uint64{} // learned from the destinations' answers
	wake := f.wakeCh(src)
	for ctx.Err() == nil {
		progressed, err := false, error(nil)
		if st, serr := f.node.ShardStatus(src); serr == nil && st.State == "leader" {
			progressed, err = f.round(ctx, src, marks)
		}
		switch {
		case err != nil && ctx.Err() == nil:
			f.failures.Add(1)
			backoff = min(max(2*backoff, 50*time.Millisecond), 5*time.Second)
			f.logger.Warn("fan-out round failed; retrying", "shard", src, "err", err, "backoff", backoff)
			sleep(ctx, backoff+rand.N(backoff/2))
		case progressed:
			backoff = 0
		default:
			backoff = 0
			select { // idle: wait for new entries, or poll for a change of leadership
			case <-ctx.Done():
			case <-wake:
			case <-time.After(time.Second):
			}
		}
	}
}

// round delivers up to Batch outbox records of src to every destination shard and trims what
// all destinations have applied. known holds the destinations' marks as learned so far; round
// updates it. It reports whether it made progress.
func (f *Fanout) round(ctx context.Context, src raftstore.ShardID, known map[raftstore.ShardID]uint64) (bool, error) {
	state, err := f.node.State(src)
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
	dests := f.slots.Shards()
	marks := make([]uint64, len(dests))
	from := info.Head + 1
	for i, d := range dests {
		// Positions before First were delivered everywhere before they were trimmed, so a mark
		// not learned yet (or learned before a trim) can be raised to First-1 safely.
		marks[i] = max(known[d], info.First-1)
		from = min(from, marks[i]+1)
	}
	defer func() {
		for i, d := range dests {
			known[d] = max(known[d], marks[i])
		}
	}()
	if from > info.Head {
		return false, nil
	}
	items, err := state.ReadOutbox(from, f.cfg.Batch)
	if err != nil || len(items) == 0 {
		return false, err
	}
	last := items[len(items)-1].Pos
	proposed := false
	deliver := func(i int, b *log.DeliveryBatch) error {
		mark, err := f.deliver(ctx, src, dests[i], b)
		if refused(err) && len(b.Items) > 0 {
			mark, err = f.isolate(ctx, src, dests[i], b)
		}
		if err != nil {
			return err
		}
		marks[i], proposed = mark, true
		return nil
	}
	for i := range dests {
		if marks[i] >= last {
			continue
		}
		b := f.batchFor(src, dests[i], marks[i], last, items)
		if len(b.Items) == 0 && last-marks[i] < f.cfg.IdleLag {
			continue // nothing for this destination yet; move its mark later, in one go
		}
		if err := deliver(i, b); err != nil {
			return false, err
		}
	}
	if !proposed {
		// Nothing to deliver anywhere: the outbox is quiet, so move every trailing mark to last
		// now (empty batches), which lets the outbox be trimmed and the loop go idle.
		for i := range dests {
			if marks[i] < last {
				if err := deliver(i, &log.DeliveryBatch{Source: src, Prev: marks[i], Last: last}); err != nil {
					return false, err
				}
			}
		}
	}
	if low := minOf(marks); low >= info.First {
		if _, err := f.node.Propose(ctx, src, raftstore.TrimCommand(&log.Trim{Target: log.TrimOutboxLog, UpTo: low})); err != nil {
			return true, fmt.Errorf("trim outbox of %d up to %d: %w", src, low, err)
		}
		proposed = true
	}
	return proposed, nil
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
// stale, and the next round starts from the right one.
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

func minOf(v []uint64) uint64 {
	m := v[0]
	for _, x := range v[1:] {
		m = min(m, x)
	}
	return m
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
