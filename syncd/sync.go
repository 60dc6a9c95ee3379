package syncd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/tracing"
	"github.com/syncd-dev/syncd/syncd/transport"
)

// A sync stream, top to bottom (PROTOCOL §6): serveSync opens it from the device's SyncStart and
// runs one loop per log of the stream — the user's log and its sub-logs (syncSubLogs), and the
// large groups it follows as sources (sources.go) — each of which (syncLog) reads its log from
// the cursor on a replica wherever it is (replica.followUser / followConv, reads.go), sends
// contiguous batches (pack.go), and, caught up, sends heartbeats while the replica holds its
// lease or Stale while it does not (idleStale), until the log grows. Upstream, the device's
// cursor acks are checked against what the stream sent (readUpstream, checkAck) and stored
// coalesced (cursorStore).

// serveSync streams the user's log to the device from its cursor: contiguous batches, then new
// entries as they are appended, heartbeats with the head while idle, and the explicit answers of
// G3 (too old, epoch changed, rebase), after which the stream ends. The device's upstream frames
// are read concurrently (readUpstream): cursor acks are stored, coalesced, anything else is
// answered. A newer sync stream of the same device on this node supersedes this one: it ends
// with Error{superseded}.
func (ss *session) serveSync(ctx context.Context, st transport.Stream, r *proto.Reader, start *proto.SyncStart) {
	w := &streamWriter{ss: ss, st: st}
	if err := start.Validate(); err != nil {
		e := wireError(ss.s.logger, 0, err)
		w.send(e)
		st.CancelRead(uint64(e.Code))
		return
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	me := &liveSync{end: cancel}
	ss.s.syncs.take(ss.key(), me)
	defer ss.s.syncs.release(ss.key(), me)
	// An ending stream does not wait long for a device that does not read: its last frame gets
	// a second to leave.
	defer context.AfterFunc(ctx, func() { w.cutOff(time.Second) })()
	ss.s.metrics.syncStreamOpened()
	defer ss.s.metrics.syncStreamClosed()

	subs, final := ss.subLogs(start)
	defer subs.close()
	var wg sync.WaitGroup
	if final == nil {
		wg.Add(1)
		go func() { // the device's frames; the end of its side ends the sync
			defer wg.Done()
			cancel(ss.readUpstream(r, w, subs))
		}()
		final = ss.syncSubLogs(ctx, w, start, subs)
	}
	code := proto.Code(0)
	var reset *resetCause
	switch cause := context.Cause(ctx); {
	case final != nil:
		if w.send(final) == nil {
			if e, ok := final.(*proto.Error); ok {
				code = e.Code
			}
		}
	case errors.Is(cause, errSuperseded):
		code = proto.CodeSuperseded
		if w.send(&proto.Error{Code: code, Message: "another sync stream of this device replaced this one"}) != nil {
			st.CancelWrite(uint64(code)) // the Error could not go: the reset carries the code
		}
	case errors.As(cause, &reset):
		code = reset.code // its Error went out already
	}
	if w.failed() && code != proto.CodeSuperseded {
		st.CancelWrite(uint64(code)) // part of a frame may be on the stream: never end it cleanly
	}
	st.CancelRead(uint64(code)) // ends readUpstream
	wg.Wait()
}

// syncSubLogs serves every sub-log of the stream at once, each as syncLog does, on the one
// stream: sub-log 0 on this goroutine (a user whose stream is not split costs no more), each
// other on one of its own; the first to end the stream (a final frame, a failed write, ctx) ends
// them all. A split of the user's stream made meanwhile adds its sub-logs to the stream (behind
// the gate), or, for a client without a vector cursor, ends it with needs_upgrade. It returns the
// frame that ends the stream, if one does.
func (ss *session) syncSubLogs(ctx context.Context, w *streamWriter, start *proto.SyncStart, subs *subLogSet) proto.Frame {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		final proto.Frame
		wg    sync.WaitGroup
	)
	end := func(f proto.Frame) {
		mu.Lock()
		if final == nil && ctx.Err() == nil {
			final = f
		}
		mu.Unlock()
		cancel()
	}
	serve := func(sl *subLog) { wg.Go(func() { end(ss.syncLog(ctx, w, sl, start)) }) }
	// A source's follower ends on its own when the user has nothing more there (SourceEnd);
	// only a final frame or a failed write ends the stream.
	subs.sources.spawn = func(sl *subLog) {
		wg.Go(func() {
			if f := ss.syncLog(ctx, w, sl, start); f != nil || w.failed() {
				end(f)
			}
		})
	}
	if f := ss.startSources(ctx, w, start, subs); f != nil {
		end(f)
		wg.Wait()
		return final
	}
	own := subs.get(0)
	own.regroup = func() proto.Frame {
		own.mapChanged = ss.s.slots.Replaced() // before the split is read again
		split, ok := ss.s.slots.Split(ss.user)
		switch {
		case !ok || split.Subs <= subs.len():
		case start.Subs == nil:
			return ss.needsUpgrade(split.Subs)
		default:
			for _, sl := range subs.grow(ss, split) {
				serve(sl)
			}
		}
		return nil
	}
	for i := 1; i < subs.len(); i++ {
		serve(subs.get(i))
	}
	end(ss.syncLog(ctx, w, own, start))
	wg.Wait()
	return final
}

// syncLog is serveSync's sending side for one log of the stream: a sub-log of the user's stream,
// or a large group's conversation log it follows as a source (sources.go), within the user's
// membership periods there. It returns the frame that ends the stream (TooOld, EpochChanged,
// Rebase or an Error), or nil when ctx ended, a write failed, or a source has nothing more for
// the user (its SourceEnd sent).
func (ss *session) syncLog(ctx context.Context, w *streamWriter, sl *subLog, start *proto.SyncStart) proto.Frame {
	if sl.gate != nil && !sl.own.wait(ctx, *sl.gate) {
		return nil
	}
	shard := ss.route(sl)
	state, err := ss.s.reader(ctx, shard)
	if err != nil {
		return wireError(ss.s.logger, 0, err)
	}
	maxBatch := int(ss.s.cfg.Limits.MaxBatch)
	if start.MaxBatch > 0 && int(start.MaxBatch) < maxBatch {
		maxBatch = int(start.MaxBatch)
	}
	heartbeat := time.Duration(ss.s.cfg.Limits.HeartbeatMs) * time.Millisecond
	epoch, pos := sl.from.Epoch, sl.from.Pos
	source := ""
	if sl.src != nil {
		source = sl.id
	}
	first := true
	firstBatch := true     // of a source: it says where it starts (after)
	live := false          // caught up once: later entries are pushed as they come, so their delay counts
	stale := false         // the replica read was found stale while idle, and no heartbeat sent since
	heldLast := false      // the last read's replica held its lease
	var lastSent time.Time // of the last batch, heartbeat or stale frame (or its turn, see idleStale)
	room := ss.s.pageRoom()
	var batch syncBatch      // each read's entries, encoded into the next Batch frame
	var movedSince time.Time // when reads first found the log moved, while they do
	batch.traced = ss.s.tracer.Enabled()
	for ctx.Err() == nil {
		if f := sl.mapChange(); f != nil {
			return f
		}
		lim := log.Limit{Count: maxBatch, Bytes: room} // stored bytes: about what the batch keeps
		// How long a remote replica may hold its answer (a long poll) for the log to grow.
		wait := max(heartbeat-time.Since(lastSent), 100*time.Millisecond)
		if !live && !stale || stale && heldLast {
			// A heartbeat is owed as soon as the stream is caught up (first, or with the lease
			// back): a remote replica answers at once rather than an interval later.
			wait = 0
		}
		h := hop{from: pos + 1, after: pos}
		var changed <-chan struct{}
		var rd liveRead
		if sl.src != nil {
			changed = sl.set.changes(sl.src)
			next, ok, tooOld := sl.set.next(sl.src, pos)
			switch {
			case tooOld:
				return &proto.TooOld{Epoch: proto.Epoch(epoch), First: proto.Position(sl.set.firstKept(sl.src) + 1), Head: proto.Position(pos), Source: source}
			case !ok:
				if err := w.send(&proto.SourceEnd{Source: source, Last: proto.Position(pos)}); err != nil || !sl.set.finish(sl.src, pos) {
					return nil
				}
				continue
			}
			h = next
			if h.gate != 0 && !sl.src.gateOn.reached(ctx, h.gate) {
				return nil
			}
			rd, err = ss.readSource(state, sl, epoch, h.from, h.last, lim, wait, &batch)
		} else {
			rd, err = ss.readUserLog(state, sl.id, epoch, pos+1, lim, wait, &batch)
		}
		if errors.Is(err, log.ErrMoved) && ctx.Err() == nil {
			// The log moved to another shard (or is moving here and is not complete): the stream
			// goes on there from the same cursor, positions unchanged.
			if state, shard, err = ss.followMove(ctx, sl, shard, &movedSince); err == nil {
				continue
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return wireError(ss.s.logger, 0, err)
		}
		movedSince = time.Time{}
		heldLast = rd.lease.Held
		res := rd.res
		info := res.Info
		if first && start.Ceiling > 0 && res.Status == log.ReadEntries && uint64(info.Head-h.after) > start.Ceiling {
			return &proto.Rebase{Epoch: proto.Epoch(info.Epoch), Head: proto.Position(info.Head), Sub: sl.sub, Source: source}
		}
		first = false
		switch res.Status {
		case log.ReadEntries:
			epoch = info.Epoch
			// Packed by encoded size as read; entries that do not fit are read again for the next batch.
			if live {
				for _, t := range batch.times {
					ss.s.metrics.observeDelivery(time.Since(time.Unix(0, t)))
				}
				if sl.src == nil {
					sl.clock.sent(pos+1, batch.times)
				}
			}
			prev := pos
			pos = batch.last
			sl.bound.set(log.Cursor{Epoch: epoch, Pos: pos}) // before the write: the ack may come back first
			var frame []byte
			if sl.src != nil {
				// A source's first batch says where it starts, and so does one that starts a
				// later period: the positions between were not the user's.
				after := log.Position(0)
				if firstBatch || h.after != prev {
					after = h.after
				}
				frame = batch.sourceFrame(epoch, info.Head, source, after)
				firstBatch = false
			} else {
				frame = batch.frame(epoch, info.Head, sl.sub)
			}
			var pushing time.Time
			if len(batch.ids) > 0 {
				pushing = time.Now()
			}
			if err := w.sendEncoded(proto.TypeBatch, frame); err != nil {
				return nil
			}
			lastSent = time.Now()
			if len(batch.ids) > 0 {
				var acks *tracing.Acks // a source's acks are marks, not the device's cursor
				if sl.src == nil {
					acks = &sl.traced
				}
				ss.s.tracer.Pushed(acks, shard, batch.ids, pos, live, pushing)
			}
			sl.sent.report(epoch, pos)
			if marks := batch.marks; len(marks) > 0 && sl.src == nil {
				if ss.proto < 6 {
					return sourcesNeedUpgrade(ss.user)
				}
				sl.set.note(sl, marks)
			}
		case log.ReadTooOld:
			return &proto.TooOld{Epoch: proto.Epoch(info.Epoch), First: proto.Position(info.First), Head: proto.Position(info.Head), Sub: sl.sub, Source: source}
		case log.ReadEpochChanged:
			return &proto.EpochChanged{Epoch: proto.Epoch(info.Epoch), First: proto.Position(info.First), Head: proto.Position(info.Head), Sub: sl.sub, Source: source,
				Continues: info.Continues}
		case log.ReadCaughtUp:
			if info.Epoch != 0 {
				sl.sent.report(info.Epoch, pos)
			}
			// Caught up: the batch's buffers go, so an idle stream holds none.
			batch.release()
			if sl.src != nil {
				info.Head = h.head(info.Head, pos) // no promise of positions that are not the user's
				rd.res.Info.Head = info.Head
			}
			if !rd.lease.Held { // no heartbeat: the head is not proven
				if err := ss.idleStale(ctx, w, sl, rd, &stale, &lastSent, heartbeat); err != nil {
					return nil
				}
				continue
			}
			// A heartbeat when the stream first catches up (or the replica is current again) and
			// then once per idle interval, not after every pushed batch: it tells an idle device
			// the head, so it can prove it has missed nothing.
			if !live || stale || time.Since(lastSent) >= heartbeat {
				hb := &proto.Heartbeat{Epoch: proto.Epoch(info.Epoch), Head: proto.Position(info.Head), ServerTime: time.Now().UnixNano(), Sub: sl.sub, Source: source}
				if err := w.send(hb); err != nil {
					return nil
				}
				lastSent, stale = time.Now(), false
			}
			live = true
			select {
			case <-ctx.Done():
			case <-rd.wake:
			case <-rd.leaseCh:
			case <-sl.mapChanged:
			case <-changed:
			case <-time.After(heartbeat - time.Since(lastSent)):
			}
		}
	}
	return nil
}

// readUserLog reads the user's log from from, its entries into batch, from rd wherever it is
// (replica.followUser). from 0 means the cursor is at the last position there can be (2⁶⁴−1):
// nothing comes after it, ever, so the answer is caught up (or epoch changed) and wake never
// closes.
func (ss *session) readUserLog(rd replica, id string, epoch log.Epoch, from log.Position, lim log.Limit, wait time.Duration, batch *syncBatch) (liveRead, error) {
	if from == 0 {
		info, l, err := rd.userInfoLeased(id)
		if err != nil {
			return liveRead{}, err
		}
		status := log.ReadCaughtUp
		if epoch != 0 && epoch != info.Epoch {
			status = log.ReadEpochChanged
		}
		return liveRead{res: log.Read{Status: status, Info: info}, lease: l}, nil
	}
	return rd.followUser(id, epoch, from, lim, wait, batch, ss.s.pageRoom())
}

// idleStale is the idle part of a sync stream while the replica it reads does not hold its lease:
// a Heartbeat would claim a head the replica cannot vouch for (it may be cut off from its shard's
// leader while the others go on), so the stream sends Stale instead — when it finds the lease
// lapsed, then once per heartbeat interval, which also keeps the stream from looking dead — and
// waits for the log to grow, the lease to change, the next interval or the stream's end. A
// revision-1 connection, whose client does not know Stale, is sent nothing: its client's silence
// check restarts the stream after three intervals. The first Heartbeat after it goes out as soon as
// the lease is held again (serveSync).
func (ss *session) idleStale(ctx context.Context, w *streamWriter, sl *subLog, rd liveRead, stale *bool, lastSent *time.Time, heartbeat time.Duration) error {
	if !*stale || time.Since(*lastSent) >= heartbeat {
		if ss.proto >= 2 {
			info := rd.res.Info
			f := &proto.Stale{Epoch: proto.Epoch(info.Epoch), Head: proto.Position(info.Head), UnheardMs: uint64(max(rd.lease.Unheard.Milliseconds(), 1)), Sub: sl.sub}
			if err := w.send(f); err != nil {
				return err
			}
		}
		if !*stale {
			ss.s.metrics.syncStale()
		}
		*stale, *lastSent = true, time.Now() // also when nothing was sent: the interval paces the next turn
	}
	select {
	case <-ctx.Done():
	case <-rd.wake:
	case <-rd.leaseCh:
	case <-sl.mapChanged:
	case <-time.After(heartbeat - time.Since(*lastSent)):
	}
	return nil
}

// followMove finds where a log went when the shard a sync stream reads answered that it is not
// served there (log.ErrMoved): the shard the cluster map routes it to now, with a reader of it.
// Until this node's map has switched (a move's last steps take a few commits) it waits a little
// and gives the same shard back; it gives up, with the error, once the log has been elsewhere
// for longer than a move's switch can take, and the device reconnects.
func (ss *session) followMove(ctx context.Context, sl *subLog, shard raftstore.ShardID, since *time.Time) (replica, raftstore.ShardID, error) {
	if since.IsZero() {
		*since = time.Now()
	}
	if time.Since(*since) > moveFollowLimit {
		return nil, shard, fmt.Errorf("%w: log %s has not been found on its shards for %v", log.ErrMoved, sl.id, moveFollowLimit)
	}
	next := ss.route(sl)
	if next == shard {
		select {
		case <-ctx.Done():
			return nil, shard, ctx.Err()
		case <-time.After(moveRetry / 4):
		}
	}
	state, err := ss.s.reader(ctx, next)
	return state, next, err
}

// route returns the shard that holds sl's log now: the user's shard of a sub-log, the group's of
// a source.
func (ss *session) route(sl *subLog) raftstore.ShardID {
	if sl.src != nil {
		return ss.s.slots.ConvShard(sl.id)
	}
	return ss.s.slots.UserShard(sl.id)
}

// moveFollowLimit bounds how long a sync stream follows a log that is between shards.
const moveFollowLimit = 10 * time.Second

// ackBound is the newest cursor a device may acknowledge on its sync stream: the SyncStart's,
// then the last entry the stream sent. It is raised before a batch is written, so an ack that
// overtakes the return of the write is not refused. Safe for concurrent use.
type ackBound struct {
	mu sync.Mutex
	c  log.Cursor
}

func (b *ackBound) set(c log.Cursor) {
	b.mu.Lock()
	b.c = c
	b.mu.Unlock()
}

func (b *ackBound) get() log.Cursor {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.c
}

// checkAck refuses a cursor ack that claims more than the stream delivered: a zero epoch or
// position, a sub-log the stream does not have, another epoch than the sub-log's on the stream,
// or a position beyond the last entry of it sent (PROTOCOL §6, CursorAck). Such a cursor could
// not be true, and storing it would tell operators and retention that the device has entries it
// never got.
func checkAck(ca *proto.CursorAck, subs *subLogSet) error {
	if err := ca.Validate(); err != nil {
		return err
	}
	if ca.Source != "" {
		src := subs.sources.get(ca.Source)
		if src == nil {
			return proto.Errorf(proto.CodeInvalidArgument, "cursor ack of source %s: this stream does not serve it", ca.Source)
		}
		return checkBound(ca, src.bound.get())
	}
	sl := subs.get(int(ca.Sub))
	if sl == nil {
		return proto.Errorf(proto.CodeInvalidArgument, "cursor ack of sub-log %d: this stream has %d", ca.Sub, subs.len())
	}
	return checkBound(ca, sl.bound.get())
}

// checkBound refuses an ack beyond bound, the last a log of the stream sent.
func checkBound(ca *proto.CursorAck, bound log.Cursor) error {
	if log.Epoch(ca.Epoch) != bound.Epoch || log.Position(ca.Pos) > bound.Pos {
		return proto.Errorf(proto.CodeInvalidArgument, "cursor ack %d (epoch %d) is beyond what this stream sent: %d (epoch %d)",
			ca.Pos, ca.Epoch, bound.Pos, bound.Epoch)
	}
	return nil
}

// readUpstream reads what the client sends on its sync stream after SyncStart — cursor acks,
// stored coalesced — and answers everything else (PROTOCOL §3 and §6): a bad cursor ack gets
// invalid_argument and the stream goes on; malformed and unknown frames are skipped with their
// Error; any other frame (a request, a second SyncStart) gets unexpected_frame and resets the
// stream. It returns why the sync ends: a *resetCause, or nil when the client ended its side,
// the stream failed or the connection is closing.
func (ss *session) readUpstream(r *proto.Reader, w *streamWriter, subs *subLogSet) error {
	for {
		f, err := r.Next()
		code, what := classify(err)
		var msg string
		if err != nil {
			msg = err.Error()
		} else if ca, ok := f.(*proto.CursorAck); ok {
			if err := checkAck(ca, subs); err != nil {
				w.send(wireError(ss.s.logger, 0, err))
				continue
			}
			if ca.Source != "" {
				if !ss.s.cfg.DisableDeliveryReports {
					ss.s.srcMarks.ack(ca.Source, ss.user, log.Position(ca.Pos))
				}
				continue
			}
			sl := subs.get(int(ca.Sub))
			sl.cursors.ack(log.Cursor{Epoch: log.Epoch(ca.Epoch), Pos: log.Position(ca.Pos)})
			ss.s.tracer.Acked(&sl.traced, log.Position(ca.Pos))
			for _, t := range sl.clock.acked(log.Position(ca.Pos)) {
				ss.s.metrics.observeDeviceAck(time.Since(time.Unix(0, t)))
			}
			continue
		} else {
			code, what, msg = proto.CodeUnexpectedFrame, faultReset, "a sync stream carries only cursor acks after sync_start, got "+f.FrameType().String()
		}
		switch ss.onFault(w, code, what, msg) {
		case faultSkip:
			continue
		case faultReset:
			return &resetCause{code: code}
		}
		return nil
	}
}

// cursorStore replicates a device's newest acknowledged cursor, at most once a second, and once
// more when the sync stream ends. Losing a cursor update only causes re-delivery (clients dedup by
// msg_id), so coalescing is safe. It keeps no goroutine while idle: a timer fires the next store.
type cursorStore struct {
	ss  *session
	log string // the user log the cursor is in: the user's, or one of its sub-logs

	mu      sync.Mutex
	latest  log.Cursor
	stored  log.Cursor
	last    time.Time   // when the last store began
	timer   *time.Timer // pending store, if any
	closed  bool
	flushes sync.WaitGroup // stores in progress
}

// ack records a cursor the device acknowledged and schedules its store.
func (c *cursorStore) ack(cur log.Cursor) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.latest = cur
	if c.closed || c.timer != nil {
		return
	}
	c.flushes.Add(1)
	c.timer = time.AfterFunc(max(0, time.Second-time.Since(c.last)), func() {
		defer c.flushes.Done()
		c.flush(2 * time.Second)
	})
}

func (c *cursorStore) flush(timeout time.Duration) {
	c.mu.Lock()
	cur, stored := c.latest, c.stored
	c.timer, c.last = nil, time.Now()
	c.mu.Unlock()
	if cur == stored || cur.Pos == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := raftstore.CursorCommand(&log.CursorUpdate{UID: c.log, Device: c.ss.device, Cursor: cur, Seen: c.ss.s.formats.ready()})
	// Routed at every store: a user whose log moved to another shard stores it there.
	if _, err := c.ss.s.node.Propose(ctx, c.ss.s.slots.UserShard(c.log), cmd); err != nil {
		c.ss.s.logger.Debug("cursor not stored", "log", c.log, "device", c.ss.device, "err", err)
		return
	}
	c.mu.Lock()
	c.stored = cur
	c.mu.Unlock()
}

// close stores the newest cursor one last time and waits for stores in progress.
func (c *cursorStore) close() {
	c.mu.Lock()
	c.closed = true
	if c.timer != nil && c.timer.Stop() {
		c.timer = nil
		c.flushes.Done()
	}
	c.mu.Unlock()
	c.flushes.Wait()
	c.flush(2 * time.Second)
}

// ackClock remembers the append times of the entries a sync stream pushed live on one of its
// logs, by position, until the device acknowledges them: the time from an append to a device's
// ack of it is the "delivered to a device" stage of a message (syncd_device_ack_seconds), which
// the server sees without asking the client. Catch-up batches are not timed (their entries are
// old by design), and a device that does not ack costs at most ackClockMax entries, the oldest
// forgotten first. Safe for concurrent use: the stream's loop adds, its upstream reader takes.
type ackClock struct {
	mu    sync.Mutex
	first log.Position // the position of times[0]
	times []int64      // append times of first, first+1, …
}

// ackClockMax bounds what one stream's clock holds.
const ackClockMax = 4096

// sent records the append times of the entries at first, first+1, … just pushed.
func (c *ackClock) sent(first log.Position, times []int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.times) == 0 || c.first+log.Position(len(c.times)) != first {
		c.first, c.times = first, c.times[:0] // not contiguous with what is held: start over
	}
	c.times = append(c.times, times...)
	if over := len(c.times) - ackClockMax; over > 0 {
		c.times = append(c.times[:0], c.times[over:]...)
		c.first += log.Position(over)
	}
}

// acked returns the append times of the held entries up to pos, and forgets them.
func (c *ackClock) acked(pos log.Position) []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.times) == 0 || pos < c.first {
		return nil
	}
	n := min(int(pos-c.first)+1, len(c.times))
	out := slices.Clone(c.times[:n])
	c.times = append(c.times[:0], c.times[n:]...)
	c.first += log.Position(n)
	return out
}
