package syncd

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
)

// Sources on the sync stream (docs/PROTOCOL.md, "Sources: large groups"). A large group's
// entries are not copied into its members' logs: each member's sync stream follows the group's
// conversation log itself, as a source with a cursor of its own, served by syncLog like a
// sub-log. Where the user's entries of a source are comes from the user's membership periods:
// the follow records of the user's shard (log.Follows) when the stream starts, and the entries
// marked Source that the stream's sub-logs send while it runs (a new period when the user is
// added, its end when the user is removed). A period's frames wait behind its gate: the sub-log
// that holds the group's membership entries must have sent the entry that started it.

// source is the state of one source a stream serves: the user's membership periods in the group
// and the sub-log whose progress their gates are checked against. Guarded by its set's mutex.
type source struct {
	conv    string
	periods []log.Period
	gateOn  *ownProgress  // the sub-log holding the group's membership entries
	changed chan struct{} // closed when the periods change (nil: nobody waits)
	live    bool          // a follower serves it
	bound   *ackBound     // the newest cursor the device may acknowledge
}

// sourceSet is the sources a sync stream serves. Safe for concurrent use.
type sourceSet struct {
	mu    sync.Mutex
	byID  map[string]*source
	spawn func(*subLog) // starts a follower of a source (set by syncSubLogs)
}

func newSourceSet() *sourceSet { return &sourceSet{byID: map[string]*source{}} }

// hop is where a source's follower goes next from the device's cursor pos: read from from, the
// first batch following after (not pos when the cursor sits before a period the user was added
// in), behind gate (0: none), up to last (0: no end known).
type hop struct {
	from, after, last, gate log.Position
}

// head is the head a caught-up source's heartbeat tells the device, of a conversation log whose
// head is convHead, the device's cursor being pos: nothing past the period's end, and nothing
// past pos while the next batch is to start a later period (what lies between is not the
// user's, and a head above the cursor would tell the device entries are missing).
func (h hop) head(convHead, pos log.Position) log.Position {
	switch {
	case h.after != pos:
		return pos
	case h.last != 0:
		return min(convHead, h.last)
	}
	return convHead
}

// firstKept returns the start of the oldest period of src kept.
func (s *sourceSet) firstKept(src *source) log.Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(src.periods) == 0 {
		return 0
	}
	return src.periods[0].From
}

// next returns where src goes from pos, or ok false when the user has no entry after pos: its
// last period ended at or before pos. It also reports whether pos is older than every period
// kept (too old: the device's cursor is in a period the server no longer remembers).
func (s *sourceSet) next(src *source, pos log.Position) (h hop, ok, tooOld bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, p := range src.periods {
		if !p.Open() && pos >= p.Last() {
			continue // the device has all of it
		}
		if pos >= p.From {
			return hop{from: pos + 1, after: pos, last: p.Last()}, true, false
		}
		// The cursor is before the period: the positions up to From were not the user's — unless
		// the cursor is older than the periods kept, and may be in one forgotten.
		if i == 0 && pos > 0 && len(src.periods) == log.MaxPeriods {
			return hop{}, false, true
		}
		return hop{from: p.From + 1, after: p.From, last: p.Last(), gate: p.Gate}, true, false
	}
	return hop{}, false, false
}

// finish ends src's follower once it has told the device the user has nothing after pos
// (SourceEnd), unless a period added meanwhile has: then it reports true, and the follower goes
// on. A period note adds after this starts a new follower.
func (s *sourceSet) finish(src *source, pos log.Position) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.ContainsFunc(src.periods, func(p log.Period) bool { return p.Open() || pos < p.Last() }) {
		return true
	}
	src.live = false
	return false
}

// ended records that src's period ends with the removal at convSeq, found in the conversation
// log (before the user's log may have it).
func (s *sourceSet) ended(src *source, convSeq log.Position) {
	s.mu.Lock()
	defer s.mu.Unlock()
	src.closeAt(convSeq)
}

// closeAt ends src's open period with the removal at convSeq, and reports whether it did.
// REQUIRES: the set's mutex.
func (src *source) closeAt(convSeq log.Position) bool {
	n := len(src.periods)
	if n == 0 || !src.periods[n-1].Open() || src.periods[n-1].From >= convSeq {
		return false
	}
	src.periods[n-1].To = convSeq
	return true
}

// add starts the followers of the sources of one sub-log from its follow records and the
// device's cursors (those it takes are deleted from cursors). A group the user left, which the
// device does not name though it has the entry that started its last period, needs nothing: the
// device had its SourceEnd (a follow record is kept when the user leaves, so that a device that
// has not seen the removal yet gets the rest of the period).
func (s *sourceSet) add(sl *subLog, follows []log.Follow, cursors map[string]proto.SourceCursor) {
	for _, f := range follows {
		c, named := cursors[f.Conv]
		delete(cursors, f.Conv)
		if last := f.Periods[len(f.Periods)-1]; !named && !last.Open() && last.Gate <= sl.from.Pos {
			continue
		}
		s.mu.Lock()
		if _, dup := s.byID[f.Conv]; dup {
			s.mu.Unlock()
			continue
		}
		src := &source{conv: f.Conv, periods: slices.Clone(f.Periods), gateOn: sl.sent, live: true,
			bound: &ackBound{c: log.Cursor{Epoch: log.Epoch(c.Epoch), Pos: log.Position(c.Pos)}}}
		s.byID[f.Conv] = src
		s.mu.Unlock()
		s.spawn(s.newSource(src, log.Cursor{Epoch: log.Epoch(c.Epoch), Pos: log.Position(c.Pos)}))
	}
}

// note takes the entries marked Source that sub-log sl just sent: an addition starts a period
// (and a follower, if none serves the source), a removal ends the open one.
func (s *sourceSet) note(sl *subLog, marks []sourceMark) {
	for _, m := range marks {
		s.mu.Lock()
		src := s.byID[m.conv]
		if m.kind == log.KindMemberRemove {
			if src != nil && src.closeAt(m.convSeq) {
				src.wake()
			}
			s.mu.Unlock()
			continue
		}
		p := log.Period{From: m.convSeq, Gate: m.seq}
		if src == nil {
			src = &source{conv: m.conv, gateOn: sl.sent, bound: &ackBound{}}
			s.byID[m.conv] = src
		}
		if !slices.ContainsFunc(src.periods, func(q log.Period) bool { return q.From == p.From }) {
			src.periods = append(src.periods, p)
			if len(src.periods) > log.MaxPeriods {
				src.periods = slices.Delete(src.periods, 0, len(src.periods)-log.MaxPeriods)
			}
			src.wake()
		}
		start := !src.live
		src.live = true
		cur := src.bound.get()
		s.mu.Unlock()
		if start {
			s.spawn(s.newSource(src, cur))
		}
	}
}

// wake tells src's follower that its periods changed. REQUIRES: the set's mutex.
func (src *source) wake() {
	if src.changed != nil {
		close(src.changed)
		src.changed = nil
	}
}

// changes returns a channel closed at src's next change of periods.
func (s *sourceSet) changes(src *source) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if src.changed == nil {
		src.changed = make(chan struct{})
	}
	return src.changed
}

// get returns the source of conv the stream serves or served, nil if none.
func (s *sourceSet) get(conv string) *source {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[conv]
}

// sourceMark is an entry marked Source that a sub-log sent: where a period starts or ends.
type sourceMark struct {
	kind         log.Kind
	conv         string
	convSeq, seq log.Position
}

// newSource returns the log syncLog serves for src, from the device's cursor.
func (s *sourceSet) newSource(src *source, from log.Cursor) *subLog {
	return &subLog{id: src.conv, src: src, set: s, from: from, bound: src.bound, sent: &ownProgress{}}
}

// followsOf reads the follow records of sub-log sl of the user (its shard's replica, here or on
// another node).
func (ss *session) followsOf(ctx context.Context, sl *subLog) ([]log.Follow, error) {
	rd, err := ss.s.reader(ctx, ss.s.slots.UserShard(sl.id))
	if err != nil {
		return nil, err
	}
	return rd.Follows(sl.id)
}

// startSources starts the followers of the sources the user follows when the stream starts,
// and answers SourceEnd for the sources the device names that the user does not follow. A
// client of a revision before sources, of a user who follows one, gets needs_upgrade.
func (ss *session) startSources(ctx context.Context, w *streamWriter, start *proto.SyncStart, subs *subLogSet) proto.Frame {
	named := map[string]proto.SourceCursor{}
	for _, c := range start.Sources {
		named[c.Conv] = c
	}
	for i := range subs.len() {
		sl := subs.get(i)
		follows, err := ss.followsOf(ctx, sl)
		if err != nil {
			return wireError(ss.s.logger, 0, err)
		}
		if len(follows) > 0 && ss.proto < 6 {
			if slices.ContainsFunc(follows, func(f log.Follow) bool { return f.Periods[len(f.Periods)-1].Open() }) {
				return sourcesNeedUpgrade(ss.user)
			}
			continue
		}
		subs.sources.add(sl, follows, named)
	}
	for _, c := range start.Sources {
		if _, left := named[c.Conv]; left {
			if err := w.send(&proto.SourceEnd{Source: c.Conv, Last: c.Pos}); err != nil {
				return nil
			}
		}
	}
	return nil
}

// sourcesNeedUpgrade is the answer to a client of a revision before sources (6) whose user
// follows a large group.
func sourcesNeedUpgrade(user string) *proto.Error {
	return &proto.Error{Code: proto.CodeNeedsUpgrade, Message: fmt.Sprintf(
		"user %s is a member of a large group, whose entries are read from the group's own log: sync it as a source (protocol revision 6)", user)}
}

// readSource reads src's conversation log from from, up to the period's last position (0: no
// end known) and short of the removal of the user, which ends the period (recorded with
// sourceSet.ended), into batch, from rd wherever it is (replica.followConv). The entries read may
// be the source cache's, shared with other followers: they are cut by re-slicing, never modified.
func (ss *session) readSource(rd replica, sl *subLog, epoch log.Epoch, from, last log.Position, lim log.Limit, wait time.Duration, batch *syncBatch) (liveRead, error) {
	out, err := rd.followConv(sl.id, epoch, from, lim, wait)
	if err != nil {
		return liveRead{}, err
	}
	res := out.res
	if last != 0 {
		res.Info.Head = min(res.Info.Head, last)
	}
	if res.Status == log.ReadEntries {
		cut := len(res.Entries)
		for i, e := range res.Entries {
			if last != 0 && e.Seq > last || e.Kind == log.KindMemberRemove && e.Source && slices.Contains(e.Members, ss.user) {
				cut = i
				if last == 0 || e.Seq <= last {
					sl.set.ended(sl.src, e.Seq) // the user's log may not have the removal yet
					res.Info.Head = e.Seq - 1
				}
				break
			}
		}
		res.Entries = res.Entries[:cut]
		if cut == 0 { // nothing of the period is left to send: the next turn goes on from its end
			res.Status = log.ReadCaughtUp
			out.wake = closedChan
		}
	}
	batch.take(&res, ss.s.pageRoom())
	out.res = res
	return out, nil
}
