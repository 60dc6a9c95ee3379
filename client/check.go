package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/syncd-dev/syncd/client/internal/store"
	"github.com/syncd-dev/syncd/proto"
)

// Checking what the device stored (PROTOCOL §8.7). The checks of §8.4 prove that every batch
// continued the stored cursor, not that the store holds afterwards what the server holds: a
// storage bug, a database restored from a backup or a migration may change it. So the sync loop
// asks the server for the Digest of a range of each sub-log the device stored, computes
// proto.Digester over the entries it stored at exactly the positions the answer covers, and
// compares:
//
//   - when: once a new sync stream has caught up (its first Heartbeat at the head: after every
//     resume), over the newest entries stored, [max(base, pos−999), pos]; and with every head
//     check (Config.HeadCheck), over the next window of a walk through the whole stored run (of
//     one sub-log in turn), so that all of it is checked over hours. Only the run is checked
//     (store.Run: the entries stored without a break up to the cursor), since a rebase jumps
//     over entries it never stores;
//   - a mismatch: Report{mismatch} on the control stream, then one store transaction moves the
//     cursor back to (epoch, from−1) and drops the entries from from on (store.Rewind), and the
//     sync stream restarts with ceiling 0, so it replays instead of rebasing; the entries that come
//     again replace the stored copies of their msg_ids (MismatchEvent). The range is checked
//     again once the replay has caught up; if it still differs, the SDK keeps what the server
//     sent, reports nothing more for it and logs an error (MismatchEvent.GaveUp): no loop;
//   - too_old (retention trimmed the start of the range): asked again once from the first
//     retained position, which a HeadCheck tells; epoch_changed: that sub-log is not checked
//     again on this connection in that epoch — the replica answering may be ahead of the sync
//     stream or behind a re-creation, and the sync stream says EpochChanged if the log was
//     re-created (§8.7 says not to act on it alone).
//
// The walk goes forward, from the oldest position it may check up to the cursor, then starts
// over: the server pages a DigestResult forward ("go on from to + 1"), so a walk backwards would
// have to guess where an answer cut short ends. The checks run in the sync loop itself, which is
// the only writer of the sync state, so what they read cannot move under them (while one waits
// for its answer the stream's frames wait too; a stream that dies meanwhile cancels it). One
// costs one Digest query a page (at most checkPages), and one HeadCheck more after too_old.
// Queries are paced with the rebase's (Client.qpace) and never retried: a check that fails is
// skipped, and the next one comes with the next head check. The TypeScript SDK does the same
// (client/js/src/check.ts).
//
// Gaps (§8.4 step 3) are reported here too: once per incident, not once per retry of the same
// gap — of a sub-log here, of a source in sources.go.
//
// Sources (large groups followed through their conversation log, revision 6: sources.go) are not
// checked. The checks are of the user log and its sub-logs, whose runs the store keeps; a source
// has no run (every rebase of it, and every rebase of the user log, jumps its cursor over entries
// it never stores, and a removal and rejoining leave a hole the server will not send), and
// checking it would mean Digest{conv} over runs of conv_seqs of its own — what §8.7 calls a check
// of a conversation's history, which it leaves optional (MAY). The store keeps a source's entries
// as received (store.SourceEntries), so such a check can come later.

// digestRevision is the protocol revision that added Digest and Report (PROTOCOL §9): a server
// of an earlier one is not asked.
const digestRevision = 4

// checkWindow is the most positions one check asks about: a DigestResult covers at most
// proto.MaxPage entries.
const checkWindow = proto.MaxPage

// checkPages is the most Digest answers one check compares: an answer covers less than its
// window when the entries are large (about max_frame bytes of them), and the rest of the
// window waits for the walk rather than costing queries in a burst.
const checkPages = 4

// maxGivenUp is the most ranges given up on that the SDK remembers (the oldest is forgotten
// first): each is a bug that the server logged, and a store that keeps producing them is better
// repaired again than remembered without bound.
const maxGivenUp = 64

// checkMode says which window a check covers.
type checkMode int

const (
	checkRecent checkMode = iota // the newest entries stored: a stream caught up
	checkWalk                    // the next window of the walk: a head check
)

// span is a range of positions of one sub-log in one epoch.
type span struct {
	sub      uint32
	epoch    proto.Epoch
	from, to proto.Position
}

func (a span) overlaps(b span) bool {
	return a.sub == b.sub && a.epoch == b.epoch && a.from <= b.to && b.from <= a.to
}

// checker is what the digest checks and gap reports of a Client remember. It lasts as long as the
// Client, across streams and connections, so that a range that keeps differing is refetched once,
// not once per reconnect, and a gap that comes back on every new stream is reported once. The
// sync loop is its only user (one at a time): not safe for concurrent use.
type checker struct {
	repaired []span                             // refetched after a mismatch, to check again
	givenUp  []span                             // still differed after a refetch: left alone
	walk     [proto.MaxSubLogs]proto.SubCursor  // per sub-log: where the walk goes on (Pos: the next position)
	first    [proto.MaxSubLogs]proto.SubCursor  // per sub-log: the first retained position (Pos) the server last told
	on       *conn                              // the connection skip is about
	skip     [proto.MaxSubLogs]proto.Epoch      // per sub-log: an epoch the server on `on` said is not the log's
	gap      [proto.MaxSubLogs]*proto.SubCursor // per sub-log: the stored cursor the last gap reported was seen at
	gapSrc   map[string]proto.SubCursor         // per source: the same (sources.go)
	turn     uint32                             // the sub-log whose walk goes on at the next head check
}

// walkSub returns the sub-log whose walk goes on at this head check, of the known first ones, in
// turn.
func (k *checker) walkSub(known int) uint32 {
	sub := k.turn % uint32(max(known, 1))
	k.turn = sub + 1
	return sub
}

// use starts remembering for cn: an epoch_changed from another connection's server holds no
// check back on this one.
func (k *checker) use(cn *conn) {
	if k.on != cn {
		k.on, k.skip = cn, [proto.MaxSubLogs]proto.Epoch{}
	}
}

// noteHead takes in the first retained position of every sub-log a Head tells.
func (k *checker) noteHead(h *proto.Head) {
	heads := h.Subs
	if len(heads) == 0 {
		heads = []proto.SubHead{{Epoch: h.Epoch, Head: h.Head, First: h.First}}
	}
	for i, sh := range heads {
		if i < proto.MaxSubLogs && sh.Epoch != 0 {
			k.first[i] = proto.SubCursor{Epoch: sh.Epoch, Pos: sh.First}
		}
	}
}

// pending returns the range of sub-log sub refetched in epoch that waits for its check after the
// replay, or nil; ranges of other epochs are forgotten (their entries are gone).
func (k *checker) pending(sub uint32, epoch proto.Epoch) *span {
	k.repaired = deleteWhere(k.repaired, func(s span) bool { return s.sub == sub && s.epoch != epoch })
	for _, s := range k.repaired {
		if s.sub == sub {
			return &s // a copy: forget may move the slice's elements
		}
	}
	return nil
}

// forget drops a refetched range: confirmed, given up on, or gone.
func (k *checker) forget(s span) {
	k.repaired = deleteWhere(k.repaired, func(r span) bool { return r == s })
}

// deleteWhere removes the elements for which drop is true, in place.
func deleteWhere(spans []span, drop func(span) bool) []span {
	out := spans[:0]
	for _, s := range spans {
		if !drop(s) {
			out = append(out, s)
		}
	}
	return out
}

// window returns the range a check of sub-log sub in mode asks about, given what the device holds
// of it (run), and the refetched range it checks again, if any (which goes first). ok is false
// when there is nothing to check: nothing stored, the run below the first retained position, or
// a refetched range the replay has not reached yet (it is checked once it has).
func (k *checker) window(sub uint32, run store.Run, mode checkMode) (from, to proto.Position, again *span, ok bool) {
	if run.Epoch == 0 || run.Base > run.Pos {
		return 0, 0, nil, false
	}
	lo := run.Base
	if f := k.first[sub]; f.Epoch == run.Epoch {
		lo = max(lo, f.Pos)
	}
	if again = k.pending(sub, run.Epoch); again != nil {
		if run.Pos < again.to {
			return 0, 0, again, false
		}
		from, to = max(again.from, lo), again.to
		return from, to, again, from <= to
	}
	if lo > run.Pos {
		return 0, 0, nil, false
	}
	switch mode {
	case checkRecent:
		from, to = lo, run.Pos
		if run.Pos >= checkWindow {
			from = max(lo, run.Pos-checkWindow+1)
		}
	default:
		from = lo
		if w := k.walk[sub]; w.Epoch == run.Epoch && w.Pos >= lo && w.Pos <= run.Pos {
			from = w.Pos
		}
		to = min(run.Pos, from+checkWindow-1)
	}
	return from, to, nil, true
}

// checkStored checks a window of sub-log sub (mode) against the server's digest on cn, and
// repairs a mismatch: it reports whether it rewound the store, in which case the caller restarts
// the sync stream (with ceiling 0: store.Repairing). Whatever goes wrong is logged and the check
// skipped: a check never ends the stream.
func (c *Client) checkStored(ctx context.Context, cn *conn, sub uint32, mode checkMode) (rewound bool) {
	if cn.welcome.ProtoVersion < digestRevision {
		return false
	}
	k := &c.checks
	k.use(cn)
	run, err := c.st.Run(sub)
	if err != nil {
		c.cfg.Logger.Warn("digest check: read the store", "sub", sub, "err", err)
		return false
	}
	if k.skip[sub] != 0 && k.skip[sub] == run.Epoch {
		return false
	}
	from, to, again, ok := k.window(sub, run, mode)
	if !ok {
		if again != nil && run.Pos >= again.to {
			k.forget(*again) // nothing of it is left to check (trimmed by retention)
		}
		return false
	}
	log := c.cfg.Logger.With("sub", sub, "epoch", uint64(run.Epoch))
	retried := false
	for pages := 0; pages < checkPages && from <= to; {
		res, err := c.askDigest(ctx, cn, sub, run.Epoch, from, to)
		switch {
		case proto.IsCode(err, proto.CodeTooOld) && !retried:
			// Retention trimmed the start of the range: ask once more from the first retained
			// position; what the device stored below it cannot be checked any more.
			retried = true
			first, ok := c.headFirst(ctx, cn, sub, run.Epoch)
			if !ok || first <= from {
				return false
			}
			if first > to {
				if again != nil {
					k.forget(*again)
				}
				return false
			}
			from = first
			continue
		case proto.IsCode(err, proto.CodeEpochChanged):
			k.skip[sub] = run.Epoch
			log.Info("digest check: the server says the epoch is not the log's; not checking it on this connection")
			return false
		case err != nil:
			if ctx.Err() == nil {
				log.Debug("digest check: no answer", "from", from, "to", to, "err", err)
			}
			return false
		}
		pages++
		if res.Count == 0 {
			return false // the replica answering has not got that far: nothing to compare
		}
		if res.Epoch != run.Epoch || res.From != from || res.To < res.From || res.To > to ||
			res.Count != uint64(res.To-res.From)+1 || len(res.Digest) != proto.DigestLen {
			log.Warn("digest check: an answer that does not fit the question", "from", from, "to", to,
				"answer_from", res.From, "answer_to", res.To, "count", res.Count)
			return false
		}
		got := span{sub: sub, epoch: run.Epoch, from: res.From, to: res.To}
		same, err := c.storedDigestEquals(got, res)
		if err != nil {
			log.Warn("digest check: read the stored entries", "from", got.from, "to", got.to, "err", err)
			return false
		}
		if !same {
			return c.mismatch(cn, got)
		}
		if mode == checkWalk && again == nil {
			k.walk[sub] = proto.SubCursor{Epoch: run.Epoch, Pos: res.To + 1}
		}
		from = res.To + 1
	}
	if again != nil && from > to {
		k.forget(*again)
		log.Info("digest check: the refetched range now matches the server's", "from", again.from, "to", again.to)
	}
	return false
}

// storedDigestEquals reports whether the entries stored at the positions res covers have res's
// digest. A stored entry that cannot be read (store.ErrDamaged) differs.
func (c *Client) storedDigestEquals(s span, res *proto.DigestResult) (bool, error) {
	entries, now, err := c.st.Entries(s.sub, s.from, s.to)
	if errors.Is(err, store.ErrDamaged) {
		c.cfg.Logger.Warn("digest check: a stored entry cannot be read", "err", err)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if now.Epoch != s.epoch || now.Pos < s.to || now.Base > s.from {
		// Cannot happen while the sync loop, the only writer, runs the check; were it ever to,
		// comparing entries the device no longer holds as they were would report a false mismatch.
		return false, fmt.Errorf("client: the store moved during the check (run %+v)", now)
	}
	var d proto.Digester
	for i := range entries {
		d.Add(&entries[i])
	}
	return d.Count() == res.Count && bytes.Equal(d.Sum(), res.Digest), nil
}

// mismatch acts on a range whose stored entries differ from the server's (PROTOCOL §8.7): it
// reports it, rewinds the store to refetch it and says so (MismatchEvent), and reports whether it
// rewound. A range that differs again after its refetch is given up on (logged as the bug it is,
// MismatchEvent.GaveUp), and one given up on before changes nothing: refetching it again would
// loop.
func (c *Client) mismatch(cn *conn, s span) (rewound bool) {
	k := &c.checks
	log := c.cfg.Logger.With("sub", s.sub, "epoch", uint64(s.epoch), "from", uint64(s.from), "to", uint64(s.to))
	for _, g := range k.givenUp {
		if g.overlaps(s) {
			log.Debug("digest check: a range given up on still differs")
			return false
		}
	}
	for _, r := range k.repaired {
		if r.overlaps(s) {
			// It still differs after the refetch: what is stored now is what the server sent. The
			// server logged the first report with the user, the device and the time.
			k.forget(r)
			k.givenUp = append(k.givenUp, span{sub: s.sub, epoch: s.epoch, from: min(s.from, r.from), to: max(s.to, r.to)})
			if len(k.givenUp) > maxGivenUp {
				k.givenUp = k.givenUp[1:]
			}
			log.Error("digest check: the range still differs from the server's after a refetch; keeping what the server sent " +
				"(a bug of the store or the server: tell syncd's developers)")
			c.emit(MismatchEvent{Sub: s.sub, Epoch: s.epoch, From: s.from, To: s.to, GaveUp: true})
			return false
		}
	}
	log.Warn("digest check: what the device stored differs from the server's log; refetching")
	if err := cn.report(&proto.Report{Kind: proto.ReportMismatch, Sub: s.sub, Epoch: s.epoch, From: s.from, To: s.to},
		c.cfg.RequestTimeout); err != nil {
		log.Debug("digest check: report the mismatch", "err", err) // the refetch does not depend on it
	}
	ok, err := c.st.Rewind(s.sub, s.epoch, s.from)
	if err != nil {
		log.Error("digest check: rewind the store to refetch the range", "err", err)
		return false
	}
	if !ok {
		return false // the store moved on (an epoch change): nothing left to refetch there
	}
	k.repaired = append(k.repaired, s)
	c.emit(MismatchEvent{Sub: s.sub, Epoch: s.epoch, From: s.from, To: s.to})
	return true
}

// askDigest asks cn for the digest of positions from … to of sub-log sub in epoch, once.
func (c *Client) askDigest(ctx context.Context, cn *conn, sub uint32, epoch proto.Epoch, from, to proto.Position) (*proto.DigestResult, error) {
	f, err := c.askOnce(ctx, cn, func(id uint64) proto.Frame {
		return &proto.Digest{ID: id, Sub: sub, Epoch: epoch, From: from, To: to}
	})
	if err != nil {
		return nil, err
	}
	r, ok := f.(*proto.DigestResult)
	if !ok {
		return nil, fmt.Errorf("client: unexpected answer %v to Digest", f.FrameType())
	}
	return r, nil
}

// headFirst asks cn for the head of the user's stream and returns the first retained position of
// sub-log sub, if it is in epoch.
func (c *Client) headFirst(ctx context.Context, cn *conn, sub uint32, epoch proto.Epoch) (proto.Position, bool) {
	f, err := c.askOnce(ctx, cn, func(id uint64) proto.Frame { return &proto.HeadCheck{ID: id} })
	h, ok := f.(*proto.Head)
	if err != nil || !ok {
		return 0, false
	}
	c.checks.noteHead(h)
	if f := c.checks.first[sub]; f.Epoch == epoch {
		return f.Pos, true
	}
	return 0, false
}

// askOnce sends one query of the sync loop's on cn: paced to the announced query rate with the
// rebase's queries, bounded by Config.RequestTimeout, and not retried (a refusal comes back as
// the *proto.Error).
func (c *Client) askOnce(ctx context.Context, cn *conn, build func(id uint64) proto.Frame) (proto.Frame, error) {
	if err := c.qpace.wait(ctx, cn.limits.QueryRatePerS, cn.limits.QueryBurst); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	f, err := cn.do(rctx, build)
	if e, ok := f.(*proto.Error); ok {
		return nil, e
	}
	return f, err
}

// reportGap reports a Batch of sub-log sub that did not continue the stored cursor cur (PROTOCOL
// §8.4 step 3): from the position expected to the first one the batch carried instead. Once per
// incident: the same gap seen again at the same stored cursor — on the restarted stream, after a
// reconnect — is not reported again (the server counts what operators alert on).
func (c *Client) reportGap(cn *conn, sub uint32, cur proto.SubCursor, b *proto.Batch) {
	k := &c.checks
	if seen := k.gap[sub]; seen != nil && *seen == cur {
		return
	}
	k.gap[sub] = &cur
	r := &proto.Report{Kind: proto.ReportGap, Sub: sub, Epoch: cur.Epoch, From: cur.Pos + 1}
	if len(b.Entries) > 0 {
		r.To = b.Entries[0].Seq
	}
	if err := cn.report(r, c.cfg.RequestTimeout); err != nil {
		c.cfg.Logger.Debug("report a gap", "sub", sub, "err", err)
	}
}

// stored records that a batch of sub-log sub was stored: a gap seen after it is a new incident.
func (k *checker) stored(sub uint32) { k.gap[sub] = nil }

// storedSource records that a batch of source conv was stored (or the source ended): a gap seen
// after it is a new incident.
func (k *checker) storedSource(conv string) { delete(k.gapSrc, conv) }
