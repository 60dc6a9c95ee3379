package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/syncd-dev/syncd/client/internal/store"
	"github.com/syncd-dev/syncd/proto"
)

// sendOutbox sends queued mutations one at a time, oldest first, so a sender's messages reach
// each conversation in the order they were queued (G6). A mutation that fails with a retryable
// answer, a timeout or a lost connection is retried after the next wait of Config.Retry (+0–50%
// jitter, or the server's retry-after if longer), with the same client_msg_id so the server
// dedups it; after the last wait, or on a definitive refusal, it is Failed.
//
// It returns when the connection fails (the caller reconnects) or ctx ends, with nil, or, when the
// node answered unavailable to unavailableMoveOn attempts in a row and Config.Addrs names another
// node, with an error wrapping errMoveOn and that answer: the caller reconnects elsewhere, where
// the mutation is resent on its schedule.
func (c *Client) sendOutbox(ctx context.Context, cn *conn) error {
	refusals := 0 // unavailable answers in a row on cn
	for ctx.Err() == nil {
		items, err := c.st.PendingOutbox()
		if err != nil {
			c.cfg.Logger.Error("read outbox", "err", err)
			return nil
		}
		now := time.Now()
		var next time.Time // when the first waiting item is due, if the loop stopped at one
		for _, it := range items {
			if due := time.Unix(0, it.NextAttempt); due.After(now) {
				if next.IsZero() || due.Before(next) {
					next = due
				}
				break // keep order: nothing after a waiting item goes first
			}
			if err := c.pace.wait(ctx, cn.limits); err != nil {
				return nil // ctx ended: the connection is going away
			}
			lost, waiting, ans := c.attempt(ctx, cn, it)
			if e, ok := ans.(*proto.Error); ok && e.Code == proto.CodeUnavailable {
				if refusals++; refusals >= unavailableMoveOn && c.movesOn() {
					return fmt.Errorf("%w: %s answered unavailable %d times in a row: %w", errMoveOn, cn.addr, refusals, e)
				}
			} else if ans != nil {
				refusals = 0
			}
			if lost {
				return nil
			}
			if waiting {
				// It waits for its retry, and holds back every item after it: read the outbox
				// again to wait for it. (The fault suite caught a later message overtaking an
				// earlier one that was waiting to be retried.)
				break
			}
		}
		wait := time.Minute
		if !next.IsZero() {
			wait = time.Until(next)
		}
		if len(items) > 0 && next.IsZero() {
			continue // everything due was handled; look again
		}
		select {
		case <-ctx.Done():
		case <-c.kick:
		case <-time.After(wait):
		}
	}
	return nil
}

// unavailableMoveOn is how many unavailable answers in a row make the SDK leave a node: one may
// come from an election in progress; a node that answers so again a second or more later cannot
// reach the shard's leader (PROTOCOL §8.3).
const unavailableMoveOn = 2

// attempt sends one mutation and records the outcome. It reports whether the connection is lost,
// whether the mutation now waits for a retry, and the server's answer, if any.
func (c *Client) attempt(ctx context.Context, cn *conn, it store.OutboxItem) (lost, waiting bool, ans proto.Frame) {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	ans, err := cn.do(rctx, func(id uint64) proto.Frame { return itemFrame(&it, id) })
	lost, waiting = c.record(ctx, cn, it, ans, err)
	return lost, waiting, ans
}

// record stores the outcome of one attempt at it: the answer ans or the error err. It reports
// whether the connection is lost, and whether the mutation now waits for a retry.
func (c *Client) record(ctx context.Context, cn *conn, it store.OutboxItem, ans proto.Frame, err error) (lost, waiting bool) {
	var pe *proto.Error
	if errors.As(err, &pe) && !pe.Code.Retryable() { // refused before sending: beyond max_frame
		c.fail(it, pe)
		return false, false
	}
	var retryAfter time.Duration
	switch a := ans.(type) {
	case *proto.Ack:
		it.Status, it.Ack, it.Attempts = StatusSent, a, it.Attempts+1
		if err := c.st.UpdateOutbox(it); err != nil {
			c.cfg.Logger.Error("update outbox", "err", err)
			return true, false
		}
		c.emit(StatusEvent{ClientMsgID: it.ClientMsgID, Status: StatusSent, Ack: a})
		return false, false
	case *proto.Error:
		if !a.Code.Retryable() {
			c.fail(it, a)
			return false, false
		}
		err, retryAfter = a, a.RetryAfter()
	}
	if ctx.Err() != nil && !errors.Is(err, context.DeadlineExceeded) {
		return true, true // closing or reconnecting: not an attempt
	}
	it.Attempts++
	if it.Attempts > len(c.cfg.Retry) {
		c.fail(it, fmt.Errorf("client: gave up after %d attempts: %w", it.Attempts, err))
		return false, false
	}
	wait := c.cfg.Retry[it.Attempts-1]
	wait += rand.N(wait/2 + 1)
	it.NextAttempt = time.Now().Add(max(wait, retryAfter)).UnixNano()
	it.LastError = fmt.Sprint(err)
	if err := c.st.UpdateOutbox(it); err != nil {
		c.cfg.Logger.Error("update outbox", "err", err)
		return true, true
	}
	select {
	case <-cn.dead():
		return true, true
	default:
		return false, true
	}
}

func (c *Client) fail(it store.OutboxItem, err error) {
	it.Status, it.LastError = StatusFailed, err.Error()
	if uerr := c.st.UpdateOutbox(it); uerr != nil {
		c.cfg.Logger.Error("update outbox", "err", uerr)
	}
	c.emit(StatusEvent{ClientMsgID: it.ClientMsgID, Status: StatusFailed, Err: err})
}

// itemFrame builds the request for a queued mutation.
func itemFrame(it *store.OutboxItem, id uint64) proto.Frame {
	switch it.Kind {
	case proto.KindReceipt:
		return &proto.MarkRead{ID: id, Conv: it.Conv, ClientMsgID: it.ClientMsgID, UpTo: it.UpTo}
	case proto.KindRecall:
		return &proto.Recall{ID: id, Conv: it.Conv, ClientMsgID: it.ClientMsgID, Target: it.Target}
	case proto.KindGroupCreate:
		return &proto.CreateGroup{ID: id, Conv: it.Conv, ClientMsgID: it.ClientMsgID, Members: it.Members}
	case proto.KindMemberAdd:
		return &proto.AddMembers{ID: id, Conv: it.Conv, ClientMsgID: it.ClientMsgID, Members: it.Members}
	case proto.KindMemberRemove:
		return &proto.RemoveMembers{ID: id, Conv: it.Conv, ClientMsgID: it.ClientMsgID, Members: it.Members}
	case proto.KindRoleChange:
		return &proto.SetRole{ID: id, Conv: it.Conv, ClientMsgID: it.ClientMsgID, Members: it.Members, Role: it.Role}
	}
	return &proto.Send{ID: id, Conv: it.Conv, ClientMsgID: it.ClientMsgID, Body: it.Body, Peer: it.Peer}
}

// pacer keeps the outbox within the send rate the server announced: the same token bucket as the
// server's (send_rate_per_s sustained, send_burst at once, per device), so that rate_limited
// stays rare (PROTOCOL §8.3) — every rate_limited answer spends an attempt of the item's bounded
// retry schedule. It lives as long as the Client, across connections, as the server's bucket is
// the device's. Used by the outbox loop only.
type pacer struct {
	tokens float64
	last   time.Time
	primed bool
}

// wait returns once one mutation may be sent under l, or with ctx's error. Without an announced
// rate it returns at once; without an announced burst the bucket holds one second's worth. The
// bucket holds one mutation less than the server's: the server counts arrivals, which the network
// spaces less evenly than the sends, and that token to spare absorbs up to 1/rate of jitter (the
// race detector's jitter alone got sends refused by 2 ms).
func (p *pacer) wait(ctx context.Context, l proto.Limits) error {
	rate := float64(l.SendRatePerS)
	if rate == 0 {
		return nil
	}
	burst := float64(l.SendBurst)
	if burst == 0 {
		burst = rate
	}
	burst = max(burst-1, 1)
	now := time.Now()
	if !p.primed {
		p.tokens, p.last, p.primed = burst, now, true
	}
	p.tokens = min(burst, p.tokens+now.Sub(p.last).Seconds()*rate)
	p.last = now
	if p.tokens < 1 {
		wait := time.Duration((1 - p.tokens) / rate * float64(time.Second))
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		p.tokens, p.last = 1, time.Now()
	}
	p.tokens--
	return nil
}
