package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/syncd-dev/syncd/client/internal/store"
	"github.com/syncd-dev/syncd/proto"
)

// syncLoop keeps a sync stream open from the stored cursor, with Config.Ceiling (PROTOCOL §8.4).
// Each batch is checked and stored in one local transaction (contiguous from the cursor, same
// epoch, deduplicated by msg_id), then its cursor is acknowledged: the storage ack. A batch that
// does not continue the cursor is dropped and the stream restarted from the cursor (GapEvent),
// and reported to the server once per incident — nothing is ever skipped. Once a stream has
// caught up (its first Heartbeat at the head) and with each head check, what the device stored
// is compared with the server's digest of it; a range that differs is reported, dropped from the
// store and replayed by a new stream with no ceiling (check.go, MismatchEvent). TooOld and Rebase
// load every conversation's state and recent history, then jump to the head (rebase,
// RebaseEvent); EpochChanged resyncs the new epoch from its start (EpochEvent). Heartbeats are
// checked: one of another epoch restarts the stream (the server then answers EpochChanged), and
// a head beyond the cursor that no batch reaches for two heartbeat intervals restarts it too; the
// periodic head check does the same from the HeadCheck answer. A stream silent for three
// heartbeat intervals is dead. Stale says the serving node cannot prove
// the head (StaleEvent): the stream is kept, and after Config.StaleFailover left for another node
// if Config.Addrs names one (errMoveOn).
//
// The stream serves the sources the device follows too (revision 6: large groups read from their
// conversation log, sources.go), each checked, stored and acknowledged on its own as a sub-log is.
//
// It returns when the connection fails, a stream fails, streams keep restarting without progress
// (then the connection is dropped and redialed with backoff, not restarted in a loop), or ctx
// ends; progressed says whether any of its streams made progress (syncOnce).
func (c *Client) syncLoop(ctx context.Context, cn *conn) (progressed bool, err error) {
	idle := 0 // streams in a row that restarted without progress
	for ctx.Err() == nil {
		restart, p, err := c.syncOnce(ctx, cn)
		progressed = progressed || p
		if err != nil || !restart {
			if err != nil && ctx.Err() == nil {
				c.cfg.Logger.Debug("sync stream ended", "err", err)
			}
			return progressed, err
		}
		if p {
			idle = 0
		} else if idle++; idle >= 2 {
			return progressed, errRestartLoop
		}
	}
	return progressed, ctx.Err()
}

// errRestartLoop ends a connection whose sync streams keep restarting without progress: a gap
// that comes back, an epoch change that does not settle.
var errRestartLoop = errors.New("client: the sync stream restarted twice in a row without progress")

// syncOnce runs one sync stream. restart says the stream ended on purpose and a new one should
// start from the (possibly updated) cursor; progressed that it moved the stored cursor (a batch,
// a rebase, an epoch change) or heard a heartbeat that found the device caught up — a heartbeat
// whose head the device does not reach is no progress, so a stream that keeps restarting for
// that ends the connection (errRestartLoop) instead of restarting forever.
func (c *Client) syncOnce(ctx context.Context, cn *conn) (restart, progressed bool, err error) {
	// The vector cursor: one cursor per sub-log of the user's stream (one, unless an operator
	// split it), each advanced on its own; the first is the user's own log.
	cursors, err := c.st.Cursors()
	if err != nil {
		return false, false, err
	}
	// And one cursor per source the device follows (a large group's conversation log), each
	// advanced on its own too (sources.go).
	named, err := c.sourceCursors()
	if err != nil {
		return false, false, err
	}
	// Beyond the ceiling the server answers Rebase (rebase.go); none while a digest mismatch is
	// being refetched (check.go), since a rebase would jump over the entries to repair.
	ceiling := uint64(max(c.cfg.Ceiling, 0))
	if repairing, err := c.st.Repairing(); err != nil {
		return false, false, err
	} else if repairing {
		ceiling = 0
	}
	st, err := cn.q.OpenStreamSync(ctx)
	if err != nil {
		return false, false, err
	}
	defer st.CancelRead(quic.StreamErrorCode(0))
	defer st.Close()
	start := &proto.SyncStart{Epoch: cursors[0].Epoch, Pos: cursors[0].Pos, Subs: cursors, Ceiling: ceiling, Sources: named}
	if err := proto.WriteFrameWithin(st, start, int(cn.limits.MaxFrame)); err != nil {
		return false, false, err
	}
	// The server sends a heartbeat on a stream idle for heartbeat_ms: three intervals without any
	// frame mean the stream is dead, whatever the connection's keep-alives say (PROTOCOL §8.4).
	silence := 3 * time.Duration(cn.limits.HeartbeatMs) * time.Millisecond
	frames := make(chan proto.Frame)
	readErr := make(chan error, 1)
	// alive ends with the stream, either way: when its reader fails, a digest check waiting for
	// its answer gives up at once (a connection gone silent answers no query either), so that the
	// silence is acted on within 3 heartbeat intervals, not a request timeout later; when this
	// function returns, the reader stops too, even while it holds a frame nobody will take.
	alive, dead := context.WithCancel(ctx)
	defer dead()
	go func() {
		r := proto.NewReader(st, int(cn.limits.MaxFrame)) // the server keeps every frame within it
		for {
			st.SetReadDeadline(time.Now().Add(silence))
			f, err := r.Next()
			if errors.Is(err, proto.ErrUnknownType) {
				continue // a newer server's frame this SDK does not know
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				err = fmt.Errorf("client: no frame on the sync stream for %v (3 heartbeat intervals): %w", silence, err)
			}
			if err != nil {
				readErr <- err
				dead()
				return
			}
			select {
			case frames <- f:
			case <-alive.Done():
				readErr <- alive.Err()
				return
			}
		}
	}()

	check := time.NewTicker(headCheckEvery(c.cfg.HeadCheck, cn.limits))
	defer check.Stop()
	sinceCheck := false // a batch arrived since the last head check
	synced := false     // caught up on this stream, SyncedEvent sent
	// at is where each sub-log stands on this stream; caught, whether it has caught up. A sub-log
	// the server names that the device did not know yet starts at (0, 0).
	at := make([]proto.SubCursor, proto.MaxSubLogs)
	copy(at, cursors)
	var caught [proto.MaxSubLogs]bool
	var own SyncedEvent // where the user's own log (sub-log 0) caught up
	known := len(cursors)
	// srcs is where each source stands on this stream: those named, then those the server sends.
	srcs := newStreamSources(named)
	maybeSynced := func() {
		for i := range known {
			if !caught[i] {
				return // SyncedEvent once every sub-log is caught up
			}
		}
		if !srcs.caughtUp() {
			return // and every source the stream knows
		}
		if !synced {
			synced = true
			c.emit(own)
		}
	}
	caughtUp := func(sub uint32, epoch proto.Epoch, head proto.Position) {
		caught[sub] = true
		if sub == 0 {
			own = SyncedEvent{Epoch: epoch, Head: head}
		}
		maybeSynced()
	}
	behind := func(sub uint32) { caught[sub], synced = false, false } // catching up: say so again at the head
	sourceCaughtUp := func(src *sourceAt) { src.caught = true; maybeSynced() }
	sourceBehind := func(src *sourceAt) { src.caught, synced = false, false }
	subOf := func(sub uint32) (uint32, error) {
		if sub >= proto.MaxSubLogs {
			return 0, fmt.Errorf("client: the server sent a frame of sub-log %d (at most %d)", sub, proto.MaxSubLogs)
		}
		known = max(known, int(sub)+1)
		return sub, nil
	}
	// pending counts, per sub-log, the heartbeats in a row whose head is beyond the cursor with no
	// batch of it in between: entries the stream should be sending and is not.
	var pending [proto.MaxSubLogs]int
	var checked [proto.MaxSubLogs]bool // per sub-log: the digest check after catching up is done on this stream
	var stale *staleEpisode            // the serving node said Stale, and no Heartbeat came since
	defer func() { stale.end() }()
	for {
		select {
		case <-ctx.Done():
			return false, progressed, ctx.Err()
		case err := <-readErr:
			return false, progressed, err
		case <-stale.failover():
			return false, progressed, fmt.Errorf("%w: %s has said for %v that it cannot prove the head of this user's log",
				errMoveOn, cn.addr, c.cfg.StaleFailover)
		case <-check.C:
			stalled, err := c.headMovedWithoutUs(ctx, cn, sinceCheck)
			if err != nil || stalled {
				return stalled, progressed, err
			}
			sinceCheck = false
			// With each head check, the next window of the walk through what the device stored
			// (PROTOCOL §8.7), of one sub-log in turn, so a check costs one query however split
			// the stream is; a mismatch rewound the store, and the stream replays from there.
			if c.checkStored(alive, cn, c.checks.walkSub(known), checkWalk) {
				return true, true, nil
			}
		case f := <-frames:
			switch f := f.(type) {
			case *proto.Batch:
				if f.Source != "" {
					// A source's batch: checked against its own cursor, or its After where the
					// store accepts it (store.ApplySource), and stored with it.
					if len(f.Entries) == 0 {
						break
					}
					src := srcs.get(f.Source)
					applied, err := c.st.ApplySource(f.Source, f.Epoch, f.After, f.Entries)
					if errors.Is(err, store.ErrNotContiguous) {
						expected := src.cur.Pos + 1
						if !src.has {
							expected = f.After + 1
						}
						c.reportSourceGap(cn, f.Source, src.cur, expected, f.Entries[0].Seq)
						c.emit(GapEvent{At: expected, Source: f.Source})
						return true, progressed, nil
					}
					if err != nil {
						return false, progressed, err
					}
					c.checks.storedSource(f.Source)
					for _, e := range f.Entries {
						c.emit(EntryEvent{Entry: e, Source: f.Source})
					}
					c.emitDelivery(applied)
					src.cur, src.has = proto.SubCursor{Epoch: f.Epoch, Pos: f.Entries[len(f.Entries)-1].Seq}, true
					// Progress, but not of the user's log: the head check (sinceCheck) is about that.
					progressed = true
					src.pending = 0
					if src.cur.Pos >= f.Head && stale == nil {
						sourceCaughtUp(src)
					} else {
						sourceBehind(src)
					}
					ack := &proto.CursorAck{Epoch: src.cur.Epoch, Pos: src.cur.Pos, Source: f.Source}
					if err := proto.WriteFrameWithin(st, ack, int(cn.limits.MaxFrame)); err != nil {
						return false, progressed, err
					}
					break
				}
				sub, err := subOf(f.Sub)
				if err != nil {
					return false, progressed, err
				}
				if len(f.Entries) == 0 {
					break // a server never sends one (PROTOCOL §6: 1 to max_batch entries); nothing to store
				}
				applied, err := c.st.ApplySync(sub, f.Epoch, f.Entries)
				if errors.Is(err, store.ErrNotContiguous) {
					c.reportGap(cn, sub, at[sub], f)
					c.emit(GapEvent{At: at[sub].Pos + 1, Sub: sub})
					return true, progressed, nil
				}
				if err != nil {
					return false, progressed, err
				}
				c.checks.stored(sub)
				for _, e := range f.Entries {
					c.emit(EntryEvent{Entry: e, Sub: sub})
				}
				c.emitDelivery(applied)
				at[sub] = proto.SubCursor{Epoch: f.Epoch, Pos: f.Entries[len(f.Entries)-1].Seq}
				progressed, sinceCheck = true, true
				pending[sub] = 0
				if at[sub].Pos >= f.Head && stale == nil { // a stale node's head proves nothing
					caughtUp(sub, f.Epoch, at[sub].Pos)
				} else {
					behind(sub)
				}
				ack := &proto.CursorAck{Epoch: at[sub].Epoch, Pos: at[sub].Pos, Sub: sub}
				if err := proto.WriteFrameWithin(st, ack, int(cn.limits.MaxFrame)); err != nil {
					return false, progressed, err
				}
			case *proto.Heartbeat:
				// Liveness is the read deadline above; the heartbeat's epoch and head are checked
				// against where the stream stands (PROTOCOL §8.4).
				if f.Source != "" {
					stale.end()
					stale = nil
					src := srcs.get(f.Source)
					if f.Epoch == 0 && src.cur.Epoch != 0 {
						break // a replica without the log yet proves nothing (as below)
					}
					if otherEpoch(src.cur, f.Epoch) {
						c.cfg.Logger.Debug("sync: heartbeat of another epoch; restarting", "source", f.Source, "epoch", f.Epoch, "stored", src.cur.Epoch)
						return true, progressed, nil
					}
					pending, err := c.headPending(f.Source, src, f.Head)
					if err != nil {
						return false, progressed, err
					}
					if pending {
						sourceBehind(src)
						if src.pending++; src.pending > stallIntervals {
							c.cfg.Logger.Debug("sync: heartbeats beyond the cursor and no batch; restarting", "source", f.Source,
								"head", f.Head, "pos", src.cur.Pos)
							return true, progressed, nil
						}
						break
					}
					src.pending = 0
					progressed = true
					sourceCaughtUp(src)
					break
				}
				sub, err := subOf(f.Sub)
				if err != nil {
					return false, progressed, err
				}
				stale.end()
				stale = nil
				cur := at[sub]
				switch {
				case f.Epoch == 0 && cur.Epoch != 0:
					// A replica that does not have the log yet (it lags behind the log's creation):
					// it proves nothing, neither a head nor another epoch.
				case otherEpoch(cur, f.Epoch):
					// The log was re-created under the stream: a new SyncStart from the stored
					// cursor is answered EpochChanged.
					c.cfg.Logger.Debug("sync: heartbeat of another epoch; restarting", "sub", sub, "epoch", f.Epoch, "stored", cur.Epoch)
					return true, progressed, nil
				case f.Head > cur.Pos:
					// Entries are pending. A batch may be on its way (the head was read after an
					// append); if none comes for two heartbeat intervals, the stream is stalled.
					behind(sub)
					if pending[sub]++; pending[sub] > stallIntervals {
						c.cfg.Logger.Debug("sync: heartbeats beyond the cursor and no batch; restarting", "sub", sub,
							"head", f.Head, "pos", cur.Pos)
						return true, progressed, nil
					}
				default: // at the head, or beyond it (a replica behind us: the cursor never moves back)
					pending[sub] = 0
					progressed = true
					// Caught up on a new stream (a resume): check the newest entries stored
					// (PROTOCOL §8.7) before saying so. A mismatch rewound the store: replay.
					if !checked[sub] {
						checked[sub] = true
						if c.checkStored(alive, cn, sub, checkRecent) {
							return true, true, nil
						}
					}
					caughtUp(sub, f.Epoch, cur.Pos)
				}
			case *proto.Stale:
				if f.Source != "" {
					if otherEpoch(srcs.get(f.Source).cur, f.Epoch) { // like a Heartbeat's, for the epoch only
						return true, progressed, nil
					}
				} else if sub, err := subOf(f.Sub); err != nil {
					return false, progressed, err
				} else if otherEpoch(at[sub], f.Epoch) { // like a Heartbeat's, for the epoch only
					return true, progressed, nil
				}
				if stale == nil {
					stale = c.staleEpisode()
					synced = false // say so again once a Heartbeat proves the head
					c.emit(StaleEvent{Epoch: f.Epoch, Head: f.Head, Unheard: time.Duration(f.UnheardMs) * time.Millisecond, Source: f.Source})
				}
			case *proto.TooOld:
				if f.Source != "" {
					return true, true, c.rebaseSource(ctx, cn, f.Source)
				}
				return true, true, c.rebase(ctx, cn, f.Sub, f.Epoch, f.Head)
			case *proto.Rebase:
				if f.Source != "" {
					return true, true, c.rebaseSource(ctx, cn, f.Source)
				}
				return true, true, c.rebase(ctx, cn, f.Sub, f.Epoch, f.Head)
			case *proto.EpochChanged:
				if f.Continues {
					// Restored from a backup that holds everything the device stored: the cursor
					// holds in the new epoch, nothing to resync (PROTOCOL §8.4).
					c.cfg.Logger.Info("sync: the log was restored with everything this device stored; continuing in its new epoch",
						"sub", f.Sub, "source", f.Source, "epoch", f.Epoch)
					var err error
					if f.Source != "" {
						err = c.st.ContinueSourceEpoch(f.Source, f.Epoch)
					} else {
						err = c.st.ContinueEpoch(f.Sub, f.Epoch)
					}
					if err != nil {
						return false, progressed, err
					}
					return true, true, nil
				}
				if f.Source != "" {
					// The conversation log was re-created: resync it from the new log's first
					// retained entry (PROTOCOL §8.4), deduplicated by msg_id; a Rebase answer (the
					// ceiling) rebases it.
					if err := c.st.ResetSourceForEpoch(f.Source, f.Epoch, max(f.First, 1)-1); err != nil {
						return false, progressed, err
					}
					c.emit(EpochEvent{Epoch: f.Epoch, Source: f.Source})
					return true, true, nil
				}
				if err := c.st.ResetForEpoch(f.Sub, f.Epoch); err != nil {
					return false, progressed, err
				}
				c.emit(EpochEvent{Epoch: f.Epoch, Sub: f.Sub})
				return true, true, nil
			case *proto.SourceEnd:
				// The user has no entry of the source after Last: once it is stored up to there,
				// its cursor goes (a cursor below Last is a gap: the stream restarts and sends the
				// rest first).
				src := srcs.get(f.Source)
				if err := c.st.EndSource(f.Source, f.Last); errors.Is(err, store.ErrNotContiguous) {
					c.reportSourceGap(cn, f.Source, src.cur, src.cur.Pos+1, 0)
					c.emit(GapEvent{At: src.cur.Pos + 1, Source: f.Source})
					return true, progressed, nil
				} else if err != nil {
					return false, progressed, err
				}
				c.checks.storedSource(f.Source)
				delete(srcs, f.Source)
				progressed = true
				c.emit(SourceEndEvent{Source: f.Source, Last: f.Last})
				maybeSynced()
			case *proto.Error:
				return false, progressed, f
			}
		}
	}
}

// staleEpisode is a sync stream's time on a node that said Stale: when it began, and the timer
// that moves the device to another node once it has lasted Config.StaleFailover. A nil
// *staleEpisode is no episode.
type staleEpisode struct{ timer *time.Timer }

// staleEpisode starts an episode, with a failover timer when the SDK may move (Config.Addrs
// names another node and StaleFailover is positive).
func (c *Client) staleEpisode() *staleEpisode {
	e := &staleEpisode{}
	if c.movesOn() && c.cfg.StaleFailover > 0 {
		e.timer = time.NewTimer(c.cfg.StaleFailover)
	}
	return e
}

// failover returns a channel that fires when the episode has lasted long enough to move; nil (never)
// when there is no episode or no timer.
func (e *staleEpisode) failover() <-chan time.Time {
	if e == nil || e.timer == nil {
		return nil
	}
	return e.timer.C
}

// end stops the episode's timer.
func (e *staleEpisode) end() {
	if e != nil && e.timer != nil {
		e.timer.Stop()
	}
}

// stallIntervals is how many heartbeat intervals the stream may show a head beyond the cursor
// without a batch before it is taken for stalled (PROTOCOL §8.4: two). Counted in heartbeats:
// the first that shows the head, then two more, one interval apart.
const stallIntervals = 2

// otherEpoch reports whether a frame's epoch says the log is not the one the cursor cur is of:
// both known (non-zero) and different. A cursor without an epoch adopts the first one it gets.
func otherEpoch(cur proto.SubCursor, epoch proto.Epoch) bool {
	return epoch != 0 && cur.Epoch != 0 && epoch != cur.Epoch
}

// headMovedWithoutUs asks the server for the head (of every sub-log, for a split user); if one is
// of another epoch than the stored cursor (the log was re-created: the new stream gets
// EpochChanged), or past it while no batch arrived since the last check, the stream is stalled (a
// half-dead path) and must restart (PROTOCOL §8.5).
func (c *Client) headMovedWithoutUs(ctx context.Context, cn *conn, progressed bool) (bool, error) {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	ans, err := cn.do(rctx, func(id uint64) proto.Frame { return &proto.HeadCheck{ID: id} })
	if err != nil {
		return false, err
	}
	h, ok := ans.(*proto.Head)
	if !ok {
		return false, nil
	}
	c.checks.noteHead(h) // where retention begins, for the digest checks
	cursors, err := c.st.Cursors()
	if err != nil {
		return false, err
	}
	heads := h.Subs
	if len(heads) == 0 {
		heads = []proto.SubHead{{Epoch: h.Epoch, Head: h.Head}}
	}
	for i, sh := range heads {
		if i < len(cursors) && otherEpoch(cursors[i], sh.Epoch) {
			return true, nil
		}
	}
	if progressed {
		return false, nil
	}
	for i, sh := range heads {
		if i < len(cursors) && sh.Head > cursors[i].Pos || i >= len(cursors) && sh.Head > 0 {
			return true, nil
		}
	}
	return false, nil
}

// headCheckEvery returns the interval of head checks on a connection with limits l: every, or
// half the request stream's idle timeout if that is shorter — the head checks then keep the
// request stream in use, so the server never closes it under the outbox.
func headCheckEvery(every time.Duration, l proto.Limits) time.Duration {
	if l.RequestIdleMs > 0 {
		every = min(every, time.Duration(l.RequestIdleMs)*time.Millisecond/2)
	}
	return max(every, time.Millisecond)
}

// emitDelivery reports what a stored batch's delivery marks moved (store.ApplySync): the other
// members' marks (DeliveryEvent), then the status steps of this user's messages (StatusEvent),
// after the batch's EntryEvents. The store committed the marks with the entries, so each is
// reported by this batch only.
func (c *Client) emitDelivery(a store.Applied) {
	for _, m := range a.Moves {
		c.emit(DeliveryEvent{Conv: m.Conv, User: m.User, State: m.State, UpTo: m.UpTo})
	}
	for _, st := range a.Steps {
		c.emit(StatusEvent{ClientMsgID: st.ClientMsgID, Status: st.Status, Conv: st.Conv, ConvSeq: st.ConvSeq, MsgID: st.MsgID})
	}
}
