package client

import (
	"context"
	"errors"
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
// (EpochEvent). A periodic head check restarts a stream that stalled while the head moved on.
//
// It returns when the connection fails or ctx ends.
func (c *Client) syncLoop(ctx context.Context, cn *conn) {
	for ctx.Err() == nil {
		restart, err := c.syncOnce(ctx, cn)
		if err != nil || !restart {
			if err != nil && ctx.Err() == nil {
				c.cfg.Logger.Debug("sync stream ended", "err", err)
			}
			return
		}
	}
}

// syncOnce runs one sync stream. restart says the stream ended on purpose and a new one should
// start from the (possibly updated) cursor.
func (c *Client) syncOnce(ctx context.Context, cn *conn) (restart bool, err error) {
	epoch, pos, err := c.st.Cursor()
	if err != nil {
		return false, err
	}
	st, err := cn.q.OpenStreamSync(ctx)
	if err != nil {
		return false, err
	}
	defer st.CancelRead(quic.StreamErrorCode(0))
	defer st.Close()
	if err := proto.WriteFrame(st, &proto.SyncStart{Epoch: epoch, Pos: pos}); err != nil {
		return false, err
	}
	frames := make(chan proto.Frame)
	readErr := make(chan error, 1)
	go func() {
		r := proto.NewReader(st, int(cn.welcome.Limits.WithDefaults().MaxFrame))
		for {
			f, err := r.Next()
			if errors.Is(err, proto.ErrUnknownType) {
				continue // a newer server's frame this SDK does not know
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

	check := time.NewTicker(c.cfg.HeadCheck)
	defer check.Stop()
	progressed := false
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case err := <-readErr:
			return false, err
		case <-check.C:
			stalled, err := c.headMovedWithoutUs(ctx, cn, progressed)
			if err != nil || stalled {
				return stalled, err
			}
			progressed = false
		case f := <-frames:
			switch f := f.(type) {
			case *proto.Batch:
				_, err := c.st.ApplyBatch(f.Epoch, f.Entries)
				if errors.Is(err, store.ErrNotContiguous) {
					c.emit(GapEvent{At: pos + 1})
					return true, nil
				}
				if err != nil {
					return false, err
				}
				for _, e := range f.Entries {
					c.emit(EntryEvent{Entry: e})
				}
				epoch, pos = f.Epoch, f.Entries[len(f.Entries)-1].Seq
				progressed = true
				if err := proto.WriteFrame(st, &proto.CursorAck{Epoch: epoch, Pos: pos}); err != nil {
					return false, err
				}
			case *proto.Heartbeat:
				// Liveness; the head check below uses HeadCheck answers, not heartbeats.
			case *proto.TooOld:
				return true, c.rebase(f.Epoch, f.Head)
			case *proto.Rebase:
				return true, c.rebase(f.Epoch, f.Head)
			case *proto.EpochChanged:
				if err := c.st.ResetForEpoch(f.Epoch); err != nil {
					return false, err
				}
				c.emit(EpochEvent{Epoch: f.Epoch})
				return true, nil
			case *proto.Error:
				return false, f
			}
		}
	}
}

func (c *Client) rebase(epoch proto.Epoch, head proto.Position) error {
	if err := c.st.RebaseTo(epoch, head); err != nil {
		return err
	}
	c.emit(RebaseEvent{Epoch: epoch, Head: head})
	return nil
}

// headMovedWithoutUs asks the server for the head; if it is past the stored cursor and no batch
// arrived since the last check, the stream is stalled (a half-dead path) and must restart.
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
	_, pos, err := c.st.Cursor()
	if err != nil {
		return false, err
	}
	return h.Head > pos && !progressed, nil
}
