package syncd

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
)

// Reconciliation (issue #23 §2, PROTOCOL §6 "Digest" and "Report", §8.7): a device asks for the
// digest of a range of its user log, or of a conversation's history, and compares it with its own
// over the same range; it tells the server what it found wrong with a Report on the control
// stream. The digest itself is defined once, in proto (proto.Digester), for the server and the
// Go SDK alike: the server converts each stored entry to the wire entry the device received
// (wireEntry) and digests that.
//
// A Digest is a query like History: it spends one token of the device's query bucket, counts in
// max_in_flight while it reads, holds a page of the answer budgets (requestCost), and reads at
// most one page of entries — proto.MaxPage of them and about pageRoom bytes, at least one — from
// one replica, with one read. Its answer is a few dozen bytes, and the device pages by the range
// it says it covered. So a device cannot make the node read more for a Digest than for a
// History page, however large the range it names.

// digest answers a Digest query.
func (ss *session) digest(ctx context.Context, q *proto.Digest) (proto.Frame, error) {
	lim := log.Limit{Count: digestCount(q.From, q.To), Bytes: ss.s.pageRoom()}
	var d proto.Digester
	add := func(e *log.Entry) bool {
		we := wireEntry(e) // e (its body) may be the store's memory, valid only during the call
		d.Add(&we)
		return true
	}
	var rd log.Read
	var err error
	if q.Conv == "" {
		rd, err = ss.userDigestRead(ctx, q, lim, add)
	} else {
		rd, err = ss.convDigestRead(ctx, q, lim, add)
	}
	if err != nil {
		return nil, err
	}
	info := rd.Info
	switch rd.Status {
	case log.ReadEpochChanged:
		return nil, proto.Errorf(proto.CodeEpochChanged, "the log's epoch is %d, not %d: positions of another epoch mean nothing in it; resync it",
			info.Epoch, q.Epoch)
	case log.ReadTooOld:
		return nil, proto.Errorf(proto.CodeTooOld, "position %d was trimmed: the log's first retained position is %d (head %d); ask from there",
			q.From, info.First, info.Head)
	}
	// ReadEntries: d holds the entries from q.From on, contiguous (the log's reads are); ReadCaughtUp:
	// nothing at q.From yet, d holds none.
	return &proto.DigestResult{ID: q.ID, Epoch: q.Epoch, From: q.From, To: q.From + proto.Position(d.Count()) - 1,
		Count: d.Count(), Digest: d.Sum(), First: proto.Position(info.First), Head: proto.Position(info.Head)}, nil
}

// digestCount is how many entries one Digest answer covers at most: the range [from, to] (to 0:
// up to the head), within proto.MaxPage.
func digestCount(from, to proto.Position) int {
	if to == 0 || to-from >= proto.MaxPage { // Validate made to ≥ from
		return proto.MaxPage
	}
	return int(to-from) + 1
}

// userDigestRead reads the entries of the device's user log (or of sub-log q.Sub) for a Digest,
// handing each to fn in order: a local replica's are scanned without copying them.
func (ss *session) userDigestRead(ctx context.Context, q *proto.Digest, lim log.Limit, fn func(*log.Entry) bool) (log.Read, error) {
	logs := ss.s.slots.Logs(ss.user)
	if int(q.Sub) >= len(logs) {
		return log.Read{}, proto.Errorf(proto.CodeInvalidArgument, "sub-log %d: this user's stream has %d", q.Sub, len(logs))
	}
	id := logs[q.Sub]
	state, err := ss.s.reader(ctx, ss.s.slots.UserShard(id))
	if err != nil {
		return log.Read{}, err
	}
	if sc, ok := state.(userScanner); ok {
		var scan log.Scan
		return sc.ScanUser(&scan, id, log.Epoch(q.Epoch), log.Position(q.From), lim, fn)
	}
	rd, err := state.ReadUser(id, log.Epoch(q.Epoch), log.Position(q.From), lim)
	for i := range rd.Entries {
		fn(&rd.Entries[i])
	}
	rd.Entries = nil
	return rd, err
}

// convDigestRead reads the entries of conversation q.Conv's history for a Digest, for a member
// only (G7: the same check as History's), handing each to fn in order.
func (ss *session) convDigestRead(ctx context.Context, q *proto.Digest, lim log.Limit, fn func(*log.Entry) bool) (log.Read, error) {
	if _, err := ss.convInfo(ctx, q.Conv); err != nil { // not_member, no_conversation
		return log.Read{}, err
	}
	state, err := ss.s.reader(ctx, ss.s.slots.ConvShard(q.Conv))
	if err != nil {
		return log.Read{}, err
	}
	rd, err := state.ReadConv(q.Conv, log.Epoch(q.Epoch), log.Position(q.From), lim)
	for i := range rd.Entries {
		fn(&rd.Entries[i])
	}
	rd.Entries = nil
	return rd, err
}

// readConvForward answers a forward read of a conversation log from from (what
// log.Shard.ReadConv answers) with backward pages (page: log.Shard.ReadConvBefore), the one
// conversation read the call plane offers (peer.OpReadConvBefore). A backward page ends at
// before-1, or at the head, and when its byte budget cuts it short it keeps the entries nearest
// its end; so it asks for the window [from, from+n-1] of lim.Count entries, and when the page does
// not reach down to from, for a window as long as the part of that page at or above from. Each
// window is shorter than the one before, and a window of one entry always comes whole, so the
// answer starts exactly at from, as a forward read's does, after a few pages at most.
func readConvForward(page func(before log.Position, lim log.Limit) (log.Read, error), epoch log.Epoch, from log.Position, lim log.Limit) (log.Read, error) {
	if from == 0 {
		return log.Read{}, fmt.Errorf("%w: read position must be 1 or more", log.ErrInvalid)
	}
	n := lim.Count
	if n <= 0 {
		n = log.DefaultReadCount
	}
	for {
		before := from + log.Position(n)
		if before < from {
			before = math.MaxUint64 // beyond any head: the page ends at the head
		}
		rd, err := page(before, log.Limit{Count: n, Bytes: lim.Bytes})
		if err != nil {
			return log.Read{}, err
		}
		info := rd.Info
		switch {
		case epoch != 0 && epoch != info.Epoch:
			return log.Read{Status: log.ReadEpochChanged, Info: info}, nil
		case from < info.First:
			return log.Read{Status: log.ReadTooOld, Info: info}, nil
		case from > info.Head:
			return log.Read{Status: log.ReadCaughtUp, Info: info}, nil
		}
		es := rd.Entries
		for len(es) > 0 && es[0].Seq < from { // a page ending at the head may start below from
			es = es[1:]
		}
		if len(es) > 0 && es[0].Seq == from {
			return log.Read{Status: log.ReadEntries, Info: info, Entries: es}, nil
		}
		if len(es) == 0 || len(es) >= n {
			return log.Read{}, fmt.Errorf("syncd: pages of a conversation log (first %d, head %d) do not come down to position %d", info.First, info.Head, from)
		}
		n = len(es)
	}
}

// ReadConv reads conversation conv forwards from from, like log.Shard.ReadConv, through the
// backward pages of the call plane (readConvForward).
func (r *remoteReader) ReadConv(conv string, epoch log.Epoch, from log.Position, lim log.Limit) (log.Read, error) {
	return readConvForward(func(before log.Position, l log.Limit) (log.Read, error) {
		return r.ReadConvBefore(conv, before, l)
	}, epoch, from, lim)
}

// Client reports (PROTOCOL §6, Report). A device's reports are counted and logged at most
// reportBurst at once and reportsPerMinute a minute: one incident is one report, so only a client
// in a loop sends more, and its extra reports must neither flood the node's log nor inflate the
// counters operators alert on. They are dropped without an answer (a report needs none).
const (
	reportsPerMinute = 10
	reportBurst      = 10
)

// report handles a Report from the control stream: a refused one is answered (Error, id 0) and
// the session goes on; an accepted one is counted and logged, within the device's report rate.
func (ss *session) report(f *proto.Report) {
	if err := f.Validate(); err != nil {
		ss.writeControl(wireError(ss.s.logger, 0, err))
		return
	}
	if ok, _ := ss.s.reports.take(ss.key(), time.Now(), 1); !ok {
		return
	}
	attrs := []any{"user", ss.user, "device", ss.device, "kind", f.Kind.String()}
	if f.Conv != "" {
		attrs = append(attrs, "conv", f.Conv)
	} else {
		attrs = append(attrs, "sub", f.Sub)
	}
	attrs = append(attrs, "epoch", uint64(f.Epoch), "from", uint64(f.From), "to", uint64(f.To))
	switch f.Kind {
	case proto.ReportGap:
		// The client refetches a gap by itself (it restarts the sync from its cursor): worth
		// knowing, since the server never sends one on purpose, but nothing was lost.
		ss.s.metrics.clientGap()
		ss.s.logger.Info("a client reports a gap in a batch it was sent", attrs...)
	case proto.ReportMismatch:
		// The client stored something other than the server holds over a range: a bug of the
		// client's storage or of the server's, which the client repairs by refetching the range.
		ss.s.metrics.clientMismatch()
		ss.s.logger.Warn("a client reports a digest mismatch: what it stored differs from the server's log", attrs...)
	}
}
