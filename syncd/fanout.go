package syncd

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
)

// Fan-out moves every conversation entry from its home shard's outbox into the user logs of its
// recipients, on whatever shards those users live (DESIGN §4).
//
// For each (source, destination) pair the stream is ordered and idempotent: a batch covers the
// source outbox positions (Prev, Last] and the destination applies it only past its high-water
// mark for that source (log.Tx.Deliver). So a batch can be resent any number of times — after a
// timeout, a leader change or a restart — without duplicating or reordering anything, and marks
// read from a lagging replica are merely conservative. Once every destination's mark has passed
// an outbox position, the source trims its outbox up to it.

// FanoutConfig tunes the fan-out. Zero fields take the defaults.
type FanoutConfig struct {
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
	node   *raftstore.Node
	slots  *SlotTable
	cfg    FanoutConfig
	logger *slog.Logger
	wake   map[raftstore.ShardID]chan struct{} // fixed after NewFanout

	delivered atomic.Uint64 // user-log entries written by this node's fan-out
	failures  atomic.Uint64 // rounds that failed and were retried
}

// NewFanout prepares fan-out for the shards node hosts, routing users with slots.
func NewFanout(node *raftstore.Node, slots *SlotTable, cfg FanoutConfig) *Fanout {
	if cfg.Batch <= 0 {
		cfg.Batch = 256
	}
	if cfg.IdleLag == 0 {
		cfg.IdleLag = 1024
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	f := &Fanout{node: node, slots: slots, cfg: cfg, logger: cfg.Logger.With("component", "fanout"),
		wake: map[raftstore.ShardID]chan struct{}{}}
	for _, id := range node.Shards() {
		f.wake[id] = make(chan struct{}, 1)
	}
	return f
}

// Notify tells the fan-out that shard applied new entries (wire it to raftstore's OnApply). It
// never blocks.
func (f *Fanout) Notify(shard raftstore.ShardID) {
	if ch, ok := f.wake[shard]; ok {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Delivered returns the number of user-log entries this fan-out has written.
func (f *Fanout) Delivered() uint64 { return f.delivered.Load() }

// Run drains every hosted shard's outbox while this node leads it, until ctx ends. It returns
// once all of its goroutines have stopped.
func (f *Fanout) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for id := range f.wake {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.drain(ctx, id)
		}()
	}
	wg.Wait()
}

// drain runs rounds for one source shard, backing off after failures.
func (f *Fanout) drain(ctx context.Context, src raftstore.ShardID) {
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		progressed, err := false, error(nil)
		if st, serr := f.node.ShardStatus(src); serr == nil && st.State == "leader" {
			progressed, err = f.round(ctx, src)
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
			case <-f.wake[src]:
			case <-time.After(time.Second):
			}
		}
	}
}

// round delivers up to Batch outbox records of src to every destination shard and trims what
// all destinations have applied. It reports whether it made progress.
func (f *Fanout) round(ctx context.Context, src raftstore.ShardID) (bool, error) {
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
		if marks[i], err = f.mark(src, d); err != nil {
			return false, err
		}
		// Positions before First were delivered everywhere before they were trimmed, so a mark
		// read from a lagging replica can be raised to First-1 safely.
		marks[i] = max(marks[i], info.First-1)
		from = min(from, marks[i]+1)
	}
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
		res, err := f.node.Propose(ctx, dests[i], raftstore.DeliverCommand(b))
		if err != nil {
			return fmt.Errorf("deliver %d→%d (%d, %d]: %w", src, dests[i], b.Prev, b.Last, err)
		}
		marks[i], proposed = res.Deliver.Mark, true
		f.delivered.Add(uint64(res.Deliver.Appended))
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

// mark returns the highest outbox position of src that destination d has applied, as d's local
// replica knows it (possibly behind the leader's, which is safe).
func (f *Fanout) mark(src, d raftstore.ShardID) (uint64, error) {
	state, err := f.node.State(d)
	if err != nil {
		return 0, err
	}
	return state.SourceMark(src)
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
