package client

import (
	"context"
	"fmt"

	"github.com/syncd-dev/syncd/proto"
)

// Sources (PROTOCOL §6 "Sources: large groups", §8.4; revision 6). A group with more members than
// the server's large_group_threshold is not copied into its members' logs: the device follows its
// conversation log directly, as a source of its sync stream, with a cursor of its own — (the
// conversation log's epoch, a conv_seq), stored with the source's entries (store.ApplySource) —
// which SyncStart lists in Sources. Everything the sync loop does for a sub-log it does for each
// source on its own, the frames naming it in Source: the batch checks (epoch, contiguity, from
// the cursor or from the batch's After where the user log shows the following started there),
// storing, CursorAck{source}, restarts on a gap (reported once, GapEvent), heartbeat checks and
// stall detection, Stale. What differs:
//
//   - a source's cursor is created by its first Batch, at its After, and dropped by SourceEnd
//     (SourceEndEvent) once the device has stored the source up to its last entry for the user;
//   - TooOld and Rebase of a source rebase that source alone (rebaseSource: its ConvState and
//     recent History, then the cursor to its head); EpochChanged resyncs it from the new log's
//     first retained entry (EpochEvent with Source);
//   - a rebase of the user log moves the cursor of every large group it loads to the head it
//     loaded (rebase.go): the user log it jumped over held where the following of those groups
//     started and ended, which the checks of a later After rely on;
//   - sources are not in the digest checks (check.go) nor in the head check, which are about the
//     user's log and its sub-logs.

// sourceAt is where one source stands on a sync stream.
type sourceAt struct {
	cur     proto.SubCursor // the stored cursor, as this stream has moved it
	has     bool            // the device has a stored cursor (else the first Batch's After starts it)
	caught  bool            // a Heartbeat or Batch showed it at the head since it last fell behind
	pending int             // heartbeats in a row whose head is beyond the cursor, no batch between
}

// streamSources is what a sync stream knows of the sources it serves, by conversation id: the
// ones its SyncStart named, then every one the server sent a frame of.
type streamSources map[string]*sourceAt

// newStreamSources starts with the cursors a SyncStart named.
func newStreamSources(named []proto.SourceCursor) streamSources {
	s := make(streamSources, len(named))
	for _, c := range named {
		s[c.Conv] = &sourceAt{cur: proto.SubCursor{Epoch: c.Epoch, Pos: c.Pos}, has: true}
	}
	return s
}

// get returns the source conv, known from now on (without a cursor if the SyncStart did not name
// it).
func (s streamSources) get(conv string) *sourceAt {
	at := s[conv]
	if at == nil {
		at = &sourceAt{}
		s[conv] = at
	}
	return at
}

// caughtUp reports whether every source the stream knows is at its head.
func (s streamSources) caughtUp() bool {
	for _, at := range s {
		if !at.caught {
			return false
		}
	}
	return true
}

// sourceCursors returns the stored cursors of the sources the device follows, for SyncStart: at
// most proto.MaxSources, as many as a user may be in groups by default (a SyncStart naming more
// is refused). Only cursors of groups the device has not learned the end of yet can make more:
// those beyond are dropped, so that the server serves them as sources the device did not name,
// from where their following started (or not at all, for one the user left): a replay merged by
// msg_id, or a rebase past the ceiling, where a cursor it cannot name would be a gap every time.
func (c *Client) sourceCursors() ([]proto.SourceCursor, error) {
	cs, err := c.st.SourceCursors()
	if err != nil || len(cs) <= proto.MaxSources {
		return cs, err
	}
	c.cfg.Logger.Warn("the device has more source cursors than a SyncStart names; dropping the rest",
		"sources", len(cs), "max", proto.MaxSources)
	for _, cur := range cs[proto.MaxSources:] {
		if err := c.st.DropSource(cur.Conv); err != nil {
			return nil, err
		}
	}
	return cs[:proto.MaxSources], nil
}

// headPending reports whether a Heartbeat's head of source at says entries are pending for the
// device. A source without a cursor has stored nothing yet: it starts where the user log says its
// following started (store.FollowStart), which the gate stored first; a log that does not say
// (a rebase jumped over it) leaves nothing to compare with, and the source counts as caught up.
func (c *Client) headPending(conv string, at *sourceAt, head proto.Position) (bool, error) {
	if at.has {
		return head > at.cur.Pos, nil
	}
	start, ok, err := c.st.FollowStart(conv)
	return ok && head > start, err
}

// rebaseSource moves the cursor of source conv alone to its head after its TooOld or Rebase
// (PROTOCOL §8.4): it stores the conversation's state from ConvState and its recent History
// (loadConv, as a rebase of the user log does for each conversation), then the cursor (epoch,
// head) of that state, so entries after it come on the next stream and merge by msg_id with the
// history loaded. The cursor moves only once all of it is stored: a rebase cut short runs again.
// A user who is no longer a member (not_member, no_conversation) does not follow the source any
// more: its cursor is dropped (the removal is in the user's log).
func (c *Client) rebaseSource(ctx context.Context, cn *conn, conv string) error {
	f, err := c.ask(ctx, cn, func(id uint64) proto.Frame { return &proto.ConvState{ID: id, Conv: conv} })
	if proto.IsCode(err, proto.CodeNotMember) || proto.IsCode(err, proto.CodeNoConversation) {
		c.cfg.Logger.Debug("rebase of a source: no longer a member; dropping its cursor", "source", conv)
		return c.st.DropSource(conv)
	}
	if err != nil {
		return fmt.Errorf("client: rebase source %s: conversation state: %w", conv, err)
	}
	r, ok := f.(*proto.ConvStateResult)
	if !ok {
		return fmt.Errorf("client: rebase source %s: unexpected answer %v to ConvState", conv, f.FrameType())
	}
	info := r.Conv
	if info.Conv != conv || info.Epoch == 0 {
		return fmt.Errorf("client: rebase source %s: the server answered the state of %q in epoch %d", conv, info.Conv, info.Epoch)
	}
	if err := c.loadConv(ctx, cn, c.User(), info); err != nil {
		return fmt.Errorf("client: rebase source %s: %w", conv, err)
	}
	if err := c.st.RebaseSource(conv, info.Epoch, info.Head); err != nil {
		return err
	}
	c.cfg.Logger.Debug("rebased a source", "source", conv, "epoch", info.Epoch, "head", info.Head)
	c.emit(RebaseEvent{Epoch: info.Epoch, Head: info.Head, Source: conv, Convs: []string{conv}})
	return nil
}

// reportSourceGap reports a gap of source conv (PROTOCOL §8.7 "A gap"): expected is the position
// the device expected next, first the first one the server sent instead (0: none, a SourceEnd
// beyond the cursor). Once per incident, as for a sub-log: the same gap seen again at the same
// stored cursor is not reported again.
func (c *Client) reportSourceGap(cn *conn, conv string, cur proto.SubCursor, expected, first proto.Position) {
	k := &c.checks
	if seen, ok := k.gapSrc[conv]; ok && seen == cur {
		return
	}
	if k.gapSrc == nil {
		k.gapSrc = make(map[string]proto.SubCursor)
	}
	k.gapSrc[conv] = cur
	r := &proto.Report{Kind: proto.ReportGap, Conv: conv, Epoch: cur.Epoch, From: max(expected, 1), To: first}
	if err := cn.report(r, c.cfg.RequestTimeout); err != nil {
		c.cfg.Logger.Debug("report a gap", "source", conv, "err", err)
	}
}
