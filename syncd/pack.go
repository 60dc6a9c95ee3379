package syncd

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
)

// Every frame the server sends fits the max_frame it announced in Welcome. Frames that carry a
// variable number of records — Batch, HistoryResult, ConvListResult — are packed by the encoded
// size of each record within pageRoom, the frame limit less proto.PageOverhead: a Batch as each
// entry is encoded into the frame (syncBatch, proto.BatchBuilder), the others by measuring each
// record once (proto.Entry.EncodedLen, proto.ConvInfo.EncodedLen) and encoding it once, when the
// frame is written. Config.Validate makes sure the largest entry fits pageRoom on its own, so a
// page always holds at least one record and a sync stream always moves forward. The store's
// byte budget (log.Limit.Bytes) only bounds how much is read per page: stored sizes are not
// encoded sizes. session.send is the last line of defence: a frame that would still exceed
// max_frame is never written.

// pageRoom is the room for records in one page frame.
func (s *Server) pageRoom() int { return int(s.cfg.Limits.MaxFrame) - proto.PageOverhead }

// syncBatch builds a sync stream's batches (serveSync): each entry read is converted and encoded
// once, straight into the frame's buffer (proto.BatchBuilder), and packed there by its encoded
// size; a local replica is scanned without copying its entries (log.Shard.ScanUser). The buffer
// and the scan state are kept from batch to batch while the stream catches up, and released when
// it has (release), so an idle stream holds neither. A Batch must continue the cursor, so a batch
// keeps the oldest entries that fit; those that do not are read again for the next one. Not
// safe for concurrent use: one per stream.
type syncBatch struct {
	b     proto.BatchBuilder
	scan  log.Scan
	we    proto.Entry  // the entry being encoded, reused
	last  log.Position // the last entry added
	times []int64      // the entries' append times, for the delivery metric
	marks []sourceMark // the entries marked Source added (a user log's: where its sources' periods start and end)
	// ids are the entries' msg ids when traced is set (tracing on): the push's span. Left
	// empty otherwise, so that a stream pays nothing for tracing it does not do.
	traced bool
	ids    []log.MsgID
}

// reset starts a batch of entries that take at most room bytes encoded (pageRoom).
func (sb *syncBatch) reset(room int) {
	sb.b.Reset(room)
	sb.last, sb.times, sb.marks, sb.ids = 0, sb.times[:0], sb.marks[:0], sb.ids[:0]
}

// add converts e and adds it to the batch if it fits (always, when it is the first), and
// reports whether it did. It keeps nothing of e but its position and time.
func (sb *syncBatch) add(e *log.Entry) bool {
	sb.we = wireEntry(e)
	ok := sb.b.Add(&sb.we)
	sb.we = proto.Entry{} // e's Body may be the store's memory, valid only during the scan
	if ok {
		sb.last = e.Seq
		sb.times = append(sb.times, e.Time)
		if sb.traced && !e.MsgID.IsZero() {
			sb.ids = append(sb.ids, e.MsgID)
		}
		if e.Source {
			sb.marks = append(sb.marks, sourceMark{kind: e.Kind, conv: e.Conv, convSeq: e.ConvSeq, seq: e.Seq})
		}
	}
	return ok
}

// take starts a batch of room bytes with the leading entries of res that fit, and leaves res
// without its entries: a remote replica's answer (readInto).
func (sb *syncBatch) take(res *log.Read, room int) {
	sb.reset(room)
	for i := range res.Entries {
		if !sb.add(&res.Entries[i]) {
			break
		}
	}
	res.Entries = nil
}

// userLogReader reads user logs: every replica does.
type userLogReader interface {
	ReadUser(uid string, epoch log.Epoch, from log.Position, lim log.Limit) (log.Read, error)
}

// userScanner is a local replica, which can hand a read's entries over one at a time.
type userScanner interface {
	ScanUser(sc *log.Scan, uid string, epoch log.Epoch, from log.Position, lim log.Limit, fn func(*log.Entry) bool) (log.Read, error)
}

// readInto reads uid's log from from with rd and adds the entries read to the batch, which it
// resets first: a local replica's are scanned in, a remote one's answer is added entry by entry.
// The answer's Entries are nil either way; with Status ReadEntries, the batch holds at least one.
func (sb *syncBatch) readInto(rd userLogReader, uid string, epoch log.Epoch, from log.Position, lim log.Limit, room int) (log.Read, error) {
	if sc, ok := rd.(userScanner); ok {
		sb.reset(room)
		return sc.ScanUser(&sb.scan, uid, epoch, from, lim, sb.add)
	}
	res, err := rd.ReadUser(uid, epoch, from, lim)
	sb.take(&res, room)
	return res, err
}

// frame completes the batch of sub-log sub (proto.BatchBuilder.Frame); valid until the next
// reset or release.
func (sb *syncBatch) frame(epoch log.Epoch, head log.Position, sub uint32) []byte {
	return sb.b.Frame(proto.Epoch(epoch), proto.Position(head), sub)
}

// sourceFrame completes the batch of a source (proto.BatchBuilder.SourceFrame): conv's entries,
// the first following after (0: the cursor, which the device knows).
func (sb *syncBatch) sourceFrame(epoch log.Epoch, head log.Position, conv string, after log.Position) []byte {
	return sb.b.SourceFrame(proto.Epoch(epoch), proto.Position(head), conv, proto.Position(after))
}

// release drops the buffers of a stream that has caught up.
func (sb *syncBatch) release() {
	sb.b.Release()
	sb.scan = log.Scan{}
	sb.times, sb.marks, sb.ids = nil, nil, nil
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
	var id uint64
	if r, ok := f.(proto.Response); ok {
		id = r.RequestID()
	}
	return ss.refuseOversize(w, f.FrameType(), id, err)
}

// sendEncoded is send for a frame of type t encoded already (a Batch from syncBatch), with the
// same check and the same answer when it fails.
func (ss *session) sendEncoded(w io.Writer, t proto.Type, frame []byte) error {
	if maxFrame := int(ss.s.cfg.Limits.MaxFrame); len(frame)-4 > maxFrame {
		err := fmt.Errorf("%w: %s frame of %d bytes, the peer's limit is %d", proto.ErrFrameTooLarge, t, len(frame)-4, maxFrame)
		return ss.refuseOversize(w, t, 0, err)
	}
	_, err := w.Write(frame)
	return err
}

// refuseOversize answers a frame of type t beyond max_frame, which was not written (send).
func (ss *session) refuseOversize(w io.Writer, t proto.Type, id uint64, err error) error {
	if !ss.oversize.Swap(true) {
		ss.s.logger.Error("an answer exceeds max_frame and was not sent (a server bug)", "user", ss.user,
			"device", ss.device, "frame", t.String(), "err", err)
	}
	proto.WriteFrame(w, &proto.Error{ID: id, Code: proto.CodeInternal, Message: "the answer exceeds max_frame; it was logged on the server"})
	return err
}
