package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/syncd-dev/syncd/proto"
)

// rebase moves sub-log sub's cursor to (epoch, head) after TooOld or Rebase, having loaded what
// the entries it skips would have told the device (PROTOCOL §8.4): it pages through ConvList and,
// for each conversation, stores its state (members, this user's read mark) and, where the local
// copy is behind the conversation's head, its latest entries (up to Config.RebaseHistory, from
// History). A large group the device follows as a source (ConvInfo.Source, revision 6) jumps too:
// its source's cursor moves to the head its state and history were loaded at, right after them
// (sources.go). It has to: the entries of the user log the rebase jumps over may be the ones that
// said where the user's following of the group ended and started again, without which a later
// Batch.After of the source would read as a gap every time. Only then is the cursor moved, so an app killed or a connection lost mid-rebase
// rebases again from the old cursor; what it stored already is merged by msg_id. Entries after
// head come on the next sync stream, also merged by msg_id with the history loaded here.
//
// Queries are paced to the announced query rate and retried, on retryable answers, on the
// outbox's schedule; any other failure ends the rebase with the cursor unmoved (the caller
// reconnects and the server answers Rebase again).
func (c *Client) rebase(ctx context.Context, cn *conn, sub uint32, epoch proto.Epoch, head proto.Position) error {
	user := c.User()
	var convs []string
	for after := ""; ; {
		f, err := c.ask(ctx, cn, func(id uint64) proto.Frame { return &proto.ConvList{ID: id, After: after} })
		if err != nil {
			return fmt.Errorf("client: rebase: list conversations: %w", err)
		}
		r, ok := f.(*proto.ConvListResult)
		if !ok {
			return fmt.Errorf("client: rebase: unexpected answer %v to ConvList", f.FrameType())
		}
		for _, info := range r.Convs {
			if err := c.loadConv(ctx, cn, user, info); err != nil {
				return fmt.Errorf("client: rebase: conversation %s: %w", info.Conv, err)
			}
			if info.Source && info.Epoch != 0 {
				if err := c.st.RebaseSource(info.Conv, info.Epoch, info.Head); err != nil {
					return fmt.Errorf("client: rebase: source %s: %w", info.Conv, err)
				}
			}
			convs = append(convs, info.Conv)
		}
		if !r.More || len(r.Convs) == 0 {
			break
		}
		after = r.Convs[len(r.Convs)-1].Conv
	}
	if err := c.st.RebaseTo(sub, epoch, head); err != nil {
		return err
	}
	c.cfg.Logger.Debug("rebased", "sub", sub, "epoch", epoch, "head", head, "conversations", len(convs))
	c.emit(RebaseEvent{Epoch: epoch, Head: head, Sub: sub, Convs: convs})
	return nil
}

// loadConv stores one conversation's state from ConvList and, if the device's copy is behind its
// head, its latest entries: History pages from the head back until they reach what the device
// has, the first retained entry, or Config.RebaseHistory entries. The pages are stored oldest
// first, after the state, so membership changes apply in the conversation's order (see
// store.ApplyConvInfo).
func (c *Client) loadConv(ctx context.Context, cn *conn, user string, info proto.ConvInfo) error {
	if err := c.st.ApplyConvInfo(user, info); err != nil {
		return err
	}
	have, err := c.st.ConvHead(info.Conv)
	if err != nil || have >= info.Head || c.cfg.RebaseHistory <= 0 {
		return err
	}
	var pages [][]proto.Entry
	for n, before := 0, proto.Position(0); n < c.cfg.RebaseHistory; {
		f, err := c.ask(ctx, cn, func(id uint64) proto.Frame {
			return &proto.History{ID: id, Conv: info.Conv, Before: before, Limit: uint32(c.cfg.RebaseHistory - n)}
		})
		if proto.IsCode(err, proto.CodeNotMember) || proto.IsCode(err, proto.CodeNoConversation) {
			break // left or gone since the list was read: its state is all there is
		}
		if err != nil {
			return err
		}
		r, ok := f.(*proto.HistoryResult)
		if !ok {
			return fmt.Errorf("unexpected answer %v to History", f.FrameType())
		}
		if len(r.Entries) == 0 {
			break
		}
		pages = append(pages, r.Entries)
		n += len(r.Entries)
		first := r.Entries[0].Seq
		if first <= have+1 || first <= r.First {
			break
		}
		before = first
	}
	slices.Reverse(pages)
	_, err = c.st.ApplyHistory(slices.Concat(pages...))
	return err
}

// ask sends one query of the sync loop's on cn and returns its answer: paced to the query rate
// the server announced (query_rate_per_s, query_burst), bounded by Config.RequestTimeout, and
// resent after a retryable refusal (rate_limited, overloaded, unavailable, timeout) on the
// Config.Retry schedule, never sooner than its retry-after. A refusal comes back as the
// *proto.Error; so does the last retryable one once the schedule is spent.
func (c *Client) ask(ctx context.Context, cn *conn, build func(id uint64) proto.Frame) (proto.Frame, error) {
	for attempt := 0; ; attempt++ {
		if err := c.qpace.wait(ctx, cn.limits.QueryRatePerS, cn.limits.QueryBurst); err != nil {
			return nil, err
		}
		rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		f, err := cn.do(rctx, build)
		cancel()
		if e, ok := f.(*proto.Error); ok {
			err = e
		}
		if err == nil {
			return f, nil
		}
		var pe *proto.Error
		if !errors.As(err, &pe) || !pe.Code.Retryable() || attempt >= len(c.cfg.Retry) {
			return nil, err
		}
		wait := c.cfg.Retry[attempt]
		wait += rand.N(wait/2 + 1)
		t := time.NewTimer(max(wait, pe.RetryAfter()))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
