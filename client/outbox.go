package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/client/internal/store"
	"github.com/syncd-dev/syncd/proto"
)

// sendOutbox sends queued mutations: each conversation's one at a time, oldest first, so a
// sender's mutations reach each conversation in the order they were queued (G6; requests in
// flight together may be applied in either order), and up to outboxLanes conversations at once,
// pipelined on the request stream, so that a conversation whose mutation waits for a retry, or
// for a slow answer, holds back no other conversation (PROTOCOL §8.3, 7). A mutation that fails
// with a retryable answer, a timeout or a lost connection is retried after the next wait of
// Config.Retry (+0–50% jitter, or the server's retry-after if longer), with the same
// client_msg_id so the server dedups it; after the last wait, or on a definitive refusal, it is
// Failed, and its conversation's next mutation goes on.
//
// It returns when the connection fails (the caller reconnects) or ctx ends, with nil, or, when the
// node answered unavailable to unavailableMoveOn attempts in a row and Config.Addrs names another
// node, with an error wrapping errMoveOn and that answer: the caller reconnects elsewhere, where
// the mutation is resent on its schedule. Either way it waits for its attempts in flight.
func (c *Client) sendOutbox(ctx context.Context, cn *conn) error {
	lctx, cancel := context.WithCancel(ctx)
	var lanes sync.WaitGroup
	defer lanes.Wait()
	// Cancel before Wait: an attempt in flight ends at once, and is not counted (record).
	defer cancel()
	results := make(chan attempted, outboxLanes) // never blocks: at most outboxLanes in flight
	var queue outboxQueue
	busy := map[string]bool{} // conversations with an attempt in flight
	reload := true
	refusals := 0 // unavailable answers in a row on cn
	for ctx.Err() == nil {
		if reload {
			items, err := c.st.PendingOutbox()
			if err != nil {
				c.cfg.Logger.Error("read outbox", "err", err)
				return nil
			}
			queue.load(items)
			reload = false
		}
		now := time.Now()
		var next time.Time // when the first waiting conversation's mutation is due
		for _, it := range queue.heads() {
			if busy[it.Conv] {
				continue
			}
			if due := time.Unix(0, it.NextAttempt); due.After(now) {
				if next.IsZero() || due.Before(next) {
					next = due
				}
				continue // it waits for its retry, and its conversation with it; others go on
			}
			if len(busy) >= outboxLanes {
				break // the next result frees a lane
			}
			if err := c.pace.wait(ctx, cn.limits.SendRatePerS, cn.limits.SendBurst); err != nil {
				return nil // ctx ended: the connection is going away
			}
			busy[it.Conv] = true
			lanes.Go(func() { results <- c.attempt(lctx, cn, it) })
		}
		wait, reloadAfter := time.Minute, true // nothing due: look at the store again now and then
		if !next.IsZero() {
			wait, reloadAfter = time.Until(next), false
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-c.kick:
			reload = true
		case <-timer.C:
			reload = reloadAfter
		case r := <-results:
			delete(busy, r.it.Conv)
			if e, ok := r.ans.(*proto.Error); ok && e.Code == proto.CodeUnavailable {
				if refusals++; refusals >= unavailableMoveOn && c.movesOn() {
					timer.Stop()
					return fmt.Errorf("%w: %s answered unavailable %d times in a row: %w", errMoveOn, cn.addr, refusals, e)
				}
			} else if r.ans != nil {
				refusals = 0
			}
			if r.lost {
				timer.Stop()
				return nil
			}
			queue.done(r.it, r.waiting)
		}
		timer.Stop()
	}
	return nil
}

// outboxLanes is how many conversations the outbox sends to at once (one mutation each). A few
// suffice for one device; more would only hold more of the server's answer budget (§2).
const outboxLanes = 8

// outboxQueue is the outbox loop's copy of the pending mutations, by conversation, each
// conversation's in queue order: the loop reads the store only when new mutations are queued,
// not after every answer, so a long outbox costs one read, not one per mutation sent.
type outboxQueue struct {
	byConv map[string][]store.OutboxItem
}

// load replaces the queue with items (the store's pending mutations, in queue order).
func (q *outboxQueue) load(items []store.OutboxItem) {
	q.byConv = make(map[string][]store.OutboxItem)
	for _, it := range items {
		q.byConv[it.Conv] = append(q.byConv[it.Conv], it)
	}
}

// heads returns the first pending mutation of each conversation, oldest first (the order the
// lanes are given out in, so the oldest waiting conversation goes first).
func (q *outboxQueue) heads() []store.OutboxItem {
	heads := make([]store.OutboxItem, 0, len(q.byConv))
	for _, items := range q.byConv {
		heads = append(heads, items[0])
	}
	slices.SortFunc(heads, func(a, b store.OutboxItem) int { return cmp.Compare(a.Seq, b.Seq) })
	return heads
}

// done records the outcome of an attempt at it: it stays first of its conversation, as updated,
// if it waits for a retry; else (sent or failed) its conversation's next mutation comes up. A
// reload since the attempt started may have dropped it already; then nothing changes.
func (q *outboxQueue) done(it store.OutboxItem, waiting bool) {
	items := q.byConv[it.Conv]
	if len(items) == 0 || items[0].Seq != it.Seq {
		return
	}
	switch {
	case waiting:
		items[0] = it
	case len(items) == 1:
		delete(q.byConv, it.Conv)
	default:
		q.byConv[it.Conv] = items[1:]
	}
}

// attempted is the outcome of one attempt at a mutation: it as updated (attempts, next attempt,
// status), whether the connection is lost, whether it waits for a retry, and the server's
// answer, if any.
type attempted struct {
	it            store.OutboxItem
	lost, waiting bool
	ans           proto.Frame
}

// unavailableMoveOn is how many unavailable answers in a row make the SDK leave a node: one may
// come from an election in progress; a node that answers so again a second or more later cannot
// reach the shard's leader (PROTOCOL §8.3).
const unavailableMoveOn = 2

// attempt sends one mutation and records the outcome. Safe to run for several conversations at
// once.
func (c *Client) attempt(ctx context.Context, cn *conn, it store.OutboxItem) attempted {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	ans, err := cn.do(rctx, func(id uint64) proto.Frame { return itemFrame(&it, id) })
	r := attempted{ans: ans}
	r.it, r.lost, r.waiting = c.record(ctx, cn, it, ans, err)
	return r
}

// record stores the outcome of one attempt at it: the answer ans or the error err. It returns it
// as updated, and reports whether the connection is lost, and whether the mutation now waits for
// a retry.
func (c *Client) record(ctx context.Context, cn *conn, it store.OutboxItem, ans proto.Frame, err error) (_ store.OutboxItem, lost, waiting bool) {
	var pe *proto.Error
	if errors.As(err, &pe) && !pe.Code.Retryable() { // refused before sending: beyond max_frame
		return c.fail(it, pe), false, false
	}
	var retryAfter time.Duration
	switch a := ans.(type) {
	case *proto.Ack:
		it.Status, it.Ack, it.Attempts = StatusSent, a, it.Attempts+1
		if err := c.st.UpdateOutbox(it); err != nil {
			c.cfg.Logger.Error("update outbox", "err", err)
			return it, true, false
		}
		c.emit(StatusEvent{ClientMsgID: it.ClientMsgID, Status: StatusSent, Ack: a})
		return it, false, false
	case *proto.Error:
		if !a.Code.Retryable() {
			return c.fail(it, a), false, false
		}
		err, retryAfter = a, a.RetryAfter()
	}
	if ctx.Err() != nil && !errors.Is(err, context.DeadlineExceeded) {
		return it, true, true // closing or reconnecting: not an attempt
	}
	it.Attempts++
	if it.Attempts > len(c.cfg.Retry) {
		return c.fail(it, fmt.Errorf("client: gave up after %d attempts: %w", it.Attempts, err)), false, false
	}
	wait := c.cfg.Retry[it.Attempts-1]
	wait += rand.N(wait/2 + 1)
	it.NextAttempt = time.Now().Add(max(wait, retryAfter)).UnixNano()
	it.LastError = fmt.Sprint(err)
	if err := c.st.UpdateOutbox(it); err != nil {
		c.cfg.Logger.Error("update outbox", "err", err)
		return it, true, true
	}
	select {
	case <-cn.dead():
		return it, true, true
	default:
		return it, false, true
	}
}

// fail marks it Failed with err, reports it, and returns it as updated.
func (c *Client) fail(it store.OutboxItem, err error) store.OutboxItem {
	it.Status, it.LastError = StatusFailed, err.Error()
	if uerr := c.st.UpdateOutbox(it); uerr != nil {
		c.cfg.Logger.Error("update outbox", "err", uerr)
	}
	c.emit(StatusEvent{ClientMsgID: it.ClientMsgID, Status: StatusFailed, Err: err})
	return it
}

// itemFrame builds the request for a queued mutation.
func itemFrame(it *store.OutboxItem, id uint64) proto.Frame {
	switch it.Kind {
	case proto.KindReceipt:
		return &proto.MarkRead{ID: id, Conv: it.Conv, ClientMsgID: it.ClientMsgID, UpTo: it.UpTo}
	case proto.KindRecall:
		return &proto.Recall{ID: id, Conv: it.Conv, ClientMsgID: it.ClientMsgID, Target: it.Target}
	case proto.KindEdit:
		return &proto.Edit{ID: id, Conv: it.Conv, ClientMsgID: it.ClientMsgID, Target: it.Target, Body: it.Body}
	case proto.KindReaction:
		return &proto.React{ID: id, Conv: it.Conv, ClientMsgID: it.ClientMsgID, Target: it.Target, Reaction: it.Reaction, Remove: it.Remove}
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

// pacer keeps requests within a rate the server announced: the same token bucket as the server's
// (send_rate_per_s sustained, send_burst at once, per device; query_rate_per_s and query_burst
// for queries), so that rate_limited stays rare (PROTOCOL §8.3) — every rate_limited answer
// spends an attempt of the item's bounded retry schedule. It lives as long as the Client, across
// connections, as the server's bucket is the device's. Not safe for concurrent use: each pacer
// has one user (Client.pace the outbox loop, Client.qpace the sync loop's rebase).
type pacer struct {
	tokens float64
	last   time.Time
	primed bool
}

// wait returns once one request may be sent at rate per second with bursts of burst, or with
// ctx's error. Without an announced rate (0) it returns at once; without an announced burst the
// bucket holds one second's worth. The
// bucket holds one mutation less than the server's: the server counts arrivals, which the network
// spaces less evenly than the sends, and that token to spare absorbs up to 1/rate of jitter (the
// race detector's jitter alone got sends refused by 2 ms).
func (p *pacer) wait(ctx context.Context, ratePerS, burstOf uint32) error {
	rate := float64(ratePerS)
	if rate == 0 {
		return nil
	}
	burst := float64(burstOf)
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
