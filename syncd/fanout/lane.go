package fanout

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
)

// A lane is this node's deliveries to one destination shard, from every source it drains: at
// most one proposal in flight, which carries the batches of all the sources that asked while the
// previous one was committing (raftstore.DeliverBatchesCommand), so a destination gets one Raft
// entry per commit however many sources feed it. This is what keeps the batching of the old
// sequential rounds (a send cost 1.22 Raft entries there) now that each source proposes to every
// destination at once: without lanes, pipelining alone cost 1.75 entries per send and 0.91 of
// the throughput (D39, docs/BENCHMARKS.md).
//
// A lane keeps failures with its destination: a proposal that hangs holds up only the batches
// queued behind it, all for the same shard. Each source has at most one batch in a lane (its
// delivery in flight to that destination), so a lane holds at most one batch per source.
type lane struct {
	dest raftstore.ShardID

	mu      sync.Mutex
	queue   []*laneReq
	running bool // a goroutine proposes the queue; it ends when it finds the queue empty
}

// laneReq is one source's batch waiting in a lane, and where its answer goes.
type laneReq struct {
	ctx   context.Context // the delivery's: once it ends, nobody waits for the answer
	batch *log.DeliveryBatch
	done  chan laneAnswer // buffered (1)
}

type laneAnswer struct {
	res log.DeliverResult
	err error
	// proposed and answered bound the proposal that carried the batch, with batches in all:
	// the delivery's span (deliveryTiming).
	proposed, answered time.Time
	batches            int
}

// deliveryTiming is what a traced delivery learns of the proposal that carried its batch, for
// its spans (tracing.Tracer.Delivered). The fan-out puts it in the delivery's context (timingKey)
// only when tracing is on; propose fills it in the delivery's own goroutine, from the answer.
type deliveryTiming struct {
	began, proposed, answered time.Time
	batches, appended         int
}

// timingKey is the context key of a delivery's *deliveryTiming.
type timingKey struct{}

// lane returns the lane to dest, creating it.
func (f *Fanout) lane(dest raftstore.ShardID) *lane {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.lanes[dest]
	if l == nil {
		l = &lane{dest: dest}
		f.lanes[dest] = l
	}
	return l
}

// propose delivers b to dest through its lane and returns the destination's answer to b, or the
// failure of the proposal that carried it, or ctx's end.
func (f *Fanout) propose(ctx context.Context, dest raftstore.ShardID, b *log.DeliveryBatch) (log.DeliverResult, error) {
	l := f.lane(dest)
	r := &laneReq{ctx: ctx, batch: b, done: make(chan laneAnswer, 1)}
	l.mu.Lock()
	l.queue = append(l.queue, r)
	start := !l.running
	l.running = true
	l.mu.Unlock()
	if start {
		f.lanesRunning.Add(1)
		go func() {
			defer f.lanesRunning.Done()
			f.runLane(l)
		}()
	}
	select {
	case a := <-r.done:
		if tm, ok := ctx.Value(timingKey{}).(*deliveryTiming); ok {
			tm.proposed, tm.answered, tm.batches, tm.appended = a.proposed, a.answered, a.batches, a.res.Appended
		}
		return a.res, a.err
	case <-ctx.Done():
		// The batch may still be proposed (or be in flight): harmless, the destination applies
		// a batch once, whoever sends it again.
		return log.DeliverResult{}, fmt.Errorf("%w: %v", raftstore.ErrTimeout, ctx.Err())
	}
}

// runLane proposes what is queued in l, all of it in one proposal, until it finds the queue
// empty.
func (f *Fanout) runLane(l *lane) {
	for {
		l.mu.Lock()
		reqs := l.queue
		l.queue = nil
		if len(reqs) == 0 {
			l.running = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		live := reqs[:0]
		for _, r := range reqs {
			if r.ctx.Err() == nil {
				live = append(live, r)
			}
		}
		if len(live) > 0 {
			f.proposeLane(l.dest, live)
		}
	}
}

// proposeLane proposes the batches of reqs to dest in one Raft entry and answers each request.
// The proposal lasts as long as any of them still waits: its deadline is the latest of theirs,
// and it is cancelled once all of them have ended.
func (f *Fanout) proposeLane(dest raftstore.ShardID, reqs []*laneReq) {
	var deadline time.Time
	for _, r := range reqs {
		if dl, ok := r.ctx.Deadline(); !ok {
			deadline = time.Now().Add(f.cfg.DeliverTimeout)
		} else if dl.After(deadline) {
			deadline = dl
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var waiting atomic.Int64
	waiting.Store(int64(len(reqs)))
	for _, r := range reqs {
		stop := context.AfterFunc(r.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	proposed := time.Now()
	if len(reqs) == 1 {
		res, err := f.node.Propose(ctx, dest, raftstore.DeliverCommand(reqs[0].batch))
		reqs[0].done <- laneAnswer{res: res.Deliver, err: err, proposed: proposed, answered: time.Now(), batches: 1}
		return
	}
	batches := make([]*log.DeliveryBatch, len(reqs))
	for i, r := range reqs {
		batches[i] = r.batch
	}
	res, err := f.node.Propose(ctx, dest, raftstore.DeliverBatchesCommand(batches))
	if err == nil && len(res.Deliveries) != len(reqs) {
		err = fmt.Errorf("raftstore: %d outcomes for %d delivery batches", len(res.Deliveries), len(reqs))
	}
	answered := time.Now()
	for i, r := range reqs {
		if err != nil {
			r.done <- laneAnswer{err: err, proposed: proposed, answered: answered, batches: len(reqs)}
			continue
		}
		r.done <- laneAnswer{res: res.Deliveries[i].Result, err: res.Deliveries[i].Err, proposed: proposed, answered: answered, batches: len(reqs)}
	}
}
