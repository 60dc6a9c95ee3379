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

// syncLoop keeps a sync stream open from the stored cursor. Each batch is checked and stored in
// one local transaction (contiguous from the cursor, same epoch, deduplicated by msg_id), then its
// cursor is acknowledged: the storage ack. A batch that does not continue the cursor is dropped
// and the stream restarted from the cursor (GapEvent) — nothing is ever skipped. TooOld and
// Rebase jump to the head (RebaseEvent); EpochChanged resyncs the new epoch from its start
// (EpochEvent). A periodic head check restarts a stream that stalled while the head moved on, and
// a stream silent for three heartbeat intervals is dead. Stale says the serving node cannot prove
// the head (StaleEvent): the stream is kept, and after Config.StaleFailover left for another node
// if Config.Addrs names one (errMoveOn).
//
// It returns when the connection fails, a stream fails, streams keep restarting without progress
// (then the connection is dropped and redialed with backoff, not restarted in a loop), or ctx
// ends; progressed says whether any of its streams stored a batch or heard a heartbeat.
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
// start from the (possibly updated) cursor; progressed that it stored a batch or heard a
// heartbeat.
func (c *Client) syncOnce(ctx context.Context, cn *conn) (restart, progressed bool, err error) {
	// The vector cursor: one cursor per sub-log of the user's stream (one, unless an operator
	// split it), each advanced on its own; the first is the user's own log.
	cursors, err := c.st.Cursors()
	if err != nil {
		return false, false, err
	}
	st, err := cn.q.OpenStreamSync(ctx)
	if err != nil {
		return false, false, err
	}
	defer st.CancelRead(quic.StreamErrorCode(0))
	defer st.Close()
	start := &proto.SyncStart{Epoch: cursors[0].Epoch, Pos: cursors[0].Pos, Subs: cursors}
	if err := proto.WriteFrameWithin(st, start, int(cn.limits.MaxFrame)); err != nil {
		return false, false, err
	}
	// The server sends a heartbeat on a stream idle for heartbeat_ms: three intervals without any
	// frame mean the stream is dead, whatever the connection's keep-alives say (PROTOCOL §8.4).
	silence := 3 * time.Duration(cn.limits.HeartbeatMs) * time.Millisecond
	frames := make(chan proto.Frame)
	readErr := make(chan error, 1)
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
				return
			}
			select {
			case frames <- f:
			case <-ctx.Done():
				readErr <- ctx.Err()
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
	caughtUp := func(sub uint32, epoch proto.Epoch, head proto.Position) {
		caught[sub] = true
		if sub == 0 {
			own = SyncedEvent{Epoch: epoch, Head: head}
		}
		for i := range known {
			if !caught[i] {
				return // SyncedEvent once every sub-log is caught up
			}
		}
		if !synced {
			synced = true
			c.emit(own)
		}
	}
	behind := func(sub uint32) { caught[sub], synced = false, false } // catching up: say so again at the head
	subOf := func(sub uint32) (uint32, error) {
		if sub >= proto.MaxSubLogs {
			return 0, fmt.Errorf("client: the server sent a frame of sub-log %d (at most %d)", sub, proto.MaxSubLogs)
		}
		known = max(known, int(sub)+1)
		return sub, nil
	}
	var stale *staleEpisode // the serving node said Stale, and no Heartbeat came since
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
		case f := <-frames:
			switch f := f.(type) {
			case *proto.Batch:
				sub, err := subOf(f.Sub)
				if err != nil {
					return false, progressed, err
				}
				_, err = c.st.ApplyBatch(sub, f.Epoch, f.Entries)
				if errors.Is(err, store.ErrNotContiguous) {
					c.emit(GapEvent{At: at[sub].Pos + 1, Sub: sub})
					return true, progressed, nil
				}
				if err != nil {
					return false, progressed, err
				}
				for _, e := range f.Entries {
					c.emit(EntryEvent{Entry: e, Sub: sub})
				}
				at[sub] = proto.SubCursor{Epoch: f.Epoch, Pos: f.Entries[len(f.Entries)-1].Seq}
				progressed, sinceCheck = true, true
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
				// Liveness (the read deadline above); the head check uses HeadCheck answers.
				sub, err := subOf(f.Sub)
				if err != nil {
					return false, progressed, err
				}
				progressed = true
				stale.end()
				stale = nil
				if cur := at[sub]; f.Head <= cur.Pos && (f.Epoch == cur.Epoch || cur.Pos == 0) {
					caughtUp(sub, f.Epoch, cur.Pos)
				}
			case *proto.Stale:
				if stale == nil {
					stale = c.staleEpisode()
					synced = false // say so again once a Heartbeat proves the head
					c.emit(StaleEvent{Epoch: f.Epoch, Head: f.Head, Unheard: time.Duration(f.UnheardMs) * time.Millisecond})
				}
			case *proto.TooOld:
				return true, progressed, c.rebase(f.Sub, f.Epoch, f.Head)
			case *proto.Rebase:
				return true, progressed, c.rebase(f.Sub, f.Epoch, f.Head)
			case *proto.EpochChanged:
				if err := c.st.ResetForEpoch(f.Sub, f.Epoch); err != nil {
					return false, progressed, err
				}
				c.emit(EpochEvent{Epoch: f.Epoch, Sub: f.Sub})
				return true, progressed, nil
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

func (c *Client) rebase(sub uint32, epoch proto.Epoch, head proto.Position) error {
	if err := c.st.RebaseTo(sub, epoch, head); err != nil {
		return err
	}
	c.emit(RebaseEvent{Epoch: epoch, Head: head, Sub: sub})
	return nil
}

// headMovedWithoutUs asks the server for the head (of every sub-log, for a split user); if one is
// past the stored cursor and no batch arrived since the last check, the stream is stalled (a
// half-dead path) and must restart.
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
	if progressed {
		return false, nil
	}
	cursors, err := c.st.Cursors()
	if err != nil {
		return false, err
	}
	heads := h.Subs
	if len(heads) == 0 {
		heads = []proto.SubHead{{Epoch: h.Epoch, Head: h.Head}}
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
