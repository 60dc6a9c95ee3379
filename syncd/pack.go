package syncd

import (
	"errors"
	"io"
	"slices"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
)

// Every frame the server sends fits the max_frame it announced in Welcome. Frames that carry a
// variable number of records — Batch, HistoryResult, ConvListResult — are packed by the encoded
// size of each record (proto.Entry.EncodedLen, proto.ConvInfo.EncodedLen) within pageRoom, the
// frame limit less proto.PageOverhead: each record is measured once and encoded once, when the
// frame is written. Config.Validate makes sure the largest entry fits pageRoom on its own, so a
// page always holds at least one record and a sync stream always moves forward. The store's
// byte budget (log.Limit.Bytes) only bounds how much is read per page: stored sizes are not
// encoded sizes. session.send is the last line of defence: a frame that would still exceed
// max_frame is never written.

// pageRoom is the room for records in one page frame.
func (s *Server) pageRoom() int { return int(s.cfg.Limits.MaxFrame) - proto.PageOverhead }

// packForward converts the leading entries of es that fit room (by encoded size) to wire
// entries: a Batch, which must continue the cursor, keeps the oldest. It always converts at
// least one, which Config.Validate guarantees fits.
func packForward(es []log.Entry, room int) []proto.Entry {
	out := make([]proto.Entry, 0, len(es))
	used := 0
	for i := range es {
		e := wireEntry(&es[i])
		if used += e.EncodedLen(); used > room && len(out) > 0 {
			break
		}
		out = append(out, e)
	}
	return out
}

// packBackward converts the trailing entries of es that fit room (by encoded size) to wire
// entries, in ascending order: a History page, which must end just below its Before, keeps the
// newest. It always converts at least one.
func packBackward(es []log.Entry, room int) []proto.Entry {
	out := make([]proto.Entry, 0, len(es))
	used := 0
	for i := len(es) - 1; i >= 0; i-- {
		e := wireEntry(&es[i])
		if used += e.EncodedLen(); used > room && len(out) > 0 {
			break
		}
		out = append(out, e)
	}
	slices.Reverse(out)
	return out
}

// send writes f to w within the connection's max_frame. A frame that would exceed it is a server
// bug (pages are packed to fit): it is not written — the client would have to drop the stream —
// but replaced by an Internal error for the same request, logged once per connection, and the
// error returned wraps proto.ErrFrameTooLarge, so that a sync stream ends there rather than move
// its position past entries it did not send.
func (ss *session) send(w io.Writer, f proto.Frame) error {
	err := proto.WriteFrameWithin(w, f, int(ss.s.cfg.Limits.MaxFrame))
	if !errors.Is(err, proto.ErrFrameTooLarge) {
		return err
	}
	if !ss.oversize.Swap(true) {
		ss.s.logger.Error("an answer exceeds max_frame and was not sent (a server bug)", "user", ss.user,
			"device", ss.device, "frame", f.FrameType().String(), "err", err)
	}
	var id uint64
	if r, ok := f.(proto.Response); ok {
		id = r.RequestID()
	}
	proto.WriteFrame(w, &proto.Error{ID: id, Code: proto.CodeInternal, Message: "the answer exceeds max_frame; it was logged on the server"})
	return err
}
