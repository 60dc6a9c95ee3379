package log

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Retention bounds how much of a log is kept. Zero fields mean "no bound"; a zero MinAge means
// no retention by device cursors.
//
// With MinAge set, a user log keeps what its devices still need: an entry some active device has
// not acked (its stored cursor is below the entry) is kept until MaxCount or MaxAge drops it, and
// an entry every active device has acked is dropped once it is older than MinAge. The first
// retained position after a trim is therefore
//
//	max(bound, min(hold, young))
//
// where bound is the first position MaxCount and MaxAge keep, hold the first position an active
// device has not acked (Head+1 if none), and young the first entry not older than MinAge. A
// device whose cursor the bound passes is answered "too old" and rebases; none is moved
// silently. Conversation logs have no device cursors: for them MinAge and InactiveAfter are
// ignored.
//
// The time is always the trim command's proposer clock, and the cursors are replicated state, so
// every replica computes the same position.
type Retention struct {
	MaxCount uint64 // keep at most this many newest entries
	MaxAge   int64  // drop entries older than this (ns), measured on the command's proposer clock
	// MinAge (ns), when positive, ties a user log's retention to its devices' cursors (above):
	// entries every active device has acked are kept this long, so that a device added later
	// still finds recent history in the log; entries an active device lacks are kept up to the
	// bounds. MinAge at or above MaxAge leaves the bounds alone in charge.
	MinAge int64
	// InactiveAfter (ns) is how long after its last cursor store ([DeviceCursor.Seen]) a device
	// stops holding entries under MinAge; zero means devices never stop (the bounds still
	// apply). A cursor stored before sightings were kept (Seen 0) counts as active and is given
	// the time of the first trim that finds it holding entries, so an upgrade drops nothing a
	// device had not acked; from then on it ages like any other.
	InactiveAfter int64
}

// TrimUser applies r to the log of uid and returns its first retained position afterwards.
// Trimming only moves First forward; positions are never reused, and a reader asking for a
// trimmed position is told "too old" ([ReadTooOld]) rather than moved silently.
func (t *Tx) TrimUser(st Stamp, uid string, r Retention) (Position, error) {
	if !ValidLog(uid) {
		return 0, invalidf("bad user id %q", uid)
	}
	if err := t.checkNotMoving(uid); err != nil {
		return 0, err
	}
	var legacy []deviceCursor // with their keys: records from before sightings were kept
	var legacyKeys [][]byte
	first, err := t.trim(t.s.k.user(uid), t.s.k.userEntryPrefix(uid), st, r, func(m logMeta) (Position, error) {
		return deviceHold(t.b, t.s.k, uid, m, st.Time, r.InactiveAfter, func(key []byte, c Cursor) bool {
			legacy, legacyKeys = append(legacy, deviceCursor{Cursor: c, Seen: st.Time}), append(legacyKeys, key)
			return true
		})
	})
	if err != nil {
		return 0, err
	}
	// After every check: their devices were seen no later than now, as far as this log knows.
	for i, key := range legacyKeys {
		if err := t.set(key, encodeDeviceCursor(legacy[i])); err != nil {
			return 0, err
		}
	}
	return first, nil
}

// RetentionDue reports whether applying r at time now (Unix ns, the caller's clock) would move
// the first retained position of the log id, a user log for [TrimUserLog] and a conversation
// log for [TrimConvLog]: the question a shard's leader asks before proposing a [Trim]. It reads
// one snapshot and at most a few entries and the log's cursors. A log that does not exist is not
// due. A device cursor stored before sightings were kept counts as inactive here, so the leader
// proposes the trim that gives it a sighting ([Retention.InactiveAfter]); that trim may then
// keep everything. It returns the errors of reads ([ErrMoved] for a user moved away or moving
// in, [ErrInvalid] for a bad id or target).
func (s *Shard) RetentionDue(target TrimTarget, id string, now int64, r Retention) (bool, error) {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	var metaKey, prefix []byte
	var hold func(logMeta) (Position, error)
	switch target {
	case TrimUserLog:
		if !ValidLog(id) {
			return false, invalidf("bad user id %q", id)
		}
		if err := s.servesUser(snap, id); err != nil {
			return false, err
		}
		metaKey, prefix = s.k.user(id), s.k.userEntryPrefix(id)
		hold = func(m logMeta) (Position, error) {
			return deviceHold(snap, s.k, id, m, now, r.InactiveAfter, func([]byte, Cursor) bool { return false })
		}
	case TrimConvLog:
		if !ValidID(id) {
			return false, invalidf("bad conversation id %q", id)
		}
		if err := s.servesConv(snap, id); err != nil {
			return false, err
		}
		metaKey, prefix = s.k.conv(id), s.k.convEntryPrefix(id)
	default:
		return false, invalidf("retention of trim target %d", target)
	}
	m, ok, err := getLogMeta(snap, metaKey)
	if err != nil || !ok {
		return false, err
	}
	first, err := retainFrom(snap, prefix, m, now, r, hold, true)
	return first > m.First, err
}

// ResetUser drops the whole log of uid and its device cursors, and restarts the log empty under
// a new epoch (positions start again at 1). It is the operator's last resort for a user log that
// must be rebuilt or erased; conversations are untouched, and so is the index of the user's
// conversations, which devices need to rebase. Every device then gets an explicit "epoch
// changed" answer (G3) and resyncs; none is moved silently. It returns the new epoch, which is
// always greater than the old one. A user without a log is refused.
func (t *Tx) ResetUser(st Stamp, uid string) (Epoch, error) {
	if !ValidLog(uid) {
		return 0, invalidf("bad user id %q", uid)
	}
	if err := t.checkNotMoving(uid); err != nil {
		return 0, err
	}
	k := t.s.k
	m, ok, err := t.logMeta(k.user(uid))
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, invalidf("user %q has no log to reset", uid)
	}
	epoch := max(newEpoch(st), m.Epoch+1)
	// The fold index names positions of the old epoch, which the new one reuses.
	if err := t.deletePrefixes(k.userEntryPrefix(uid), k.cursorPrefix(uid), k.foldPrefix(uid)); err != nil {
		return 0, err
	}
	if err := t.deleteReports(uid); err != nil { // the new epoch's first cursor starts them again
		return 0, err
	}
	if err := t.ungateFollows(uid); err != nil {
		return 0, err
	}
	// The user stays in their groups, so the count of them stays too.
	if err := t.putLogMeta(k.user(uid), logMeta{Epoch: epoch, First: 1, Groups: m.Groups}); err != nil {
		return 0, err
	}
	if t.touched == nil {
		t.touched = map[string]struct{}{}
	}
	t.touched[uid] = struct{}{} // wake its sync streams, which answer "epoch changed"
	return epoch, nil
}

// TrimConv applies r to the conversation log of conv, like [Tx.TrimUser].
func (t *Tx) TrimConv(st Stamp, conv string, r Retention) (Position, error) {
	if !ValidID(conv) {
		return 0, invalidf("bad conversation id %q", conv)
	}
	if err := t.checkConvNotMoving(conv); err != nil {
		return 0, err
	}
	return t.trim(t.s.k.conv(conv), t.s.k.convEntryPrefix(conv), st, r, nil)
}

// trim moves the first retained position of the log of metaKey, its entries under prefix, to
// where r puts it at st.Time (retainFrom); hold, nil for a log without device cursors, gives the
// first position an active device still needs.
func (t *Tx) trim(metaKey, prefix []byte, st Stamp, r Retention, hold func(logMeta) (Position, error)) (Position, error) {
	m, ok, err := t.logMeta(metaKey)
	if err != nil || !ok {
		return m.First, err
	}
	newFirst, err := retainFrom(t.b, prefix, m, st.Time, r, hold, false)
	if err != nil {
		return 0, err
	}
	if newFirst == m.First {
		return m.First, nil
	}
	lo := entryKey(prefix, m.First)
	hi := entryKey(prefix, newFirst)
	if err := t.b.DeleteRange(lo, hi, nil); err != nil {
		return 0, fmt.Errorf("log: write: %w", err)
	}
	m.First = newFirst
	return newFirst, t.putLogMeta(metaKey, m)
}

// retainFrom returns the first position the log of meta m, its entries under rd's prefix, keeps
// under r at time now: max(bound, min(hold, young)) as [Retention] describes, where hold (nil:
// the bounds alone) is asked only when MinAge could trim more than the bounds do. With probe it
// only answers whether the result is past m.First, reading at most one entry per rule: it then
// returns m.First or a position past it, not necessarily the final one.
func retainFrom(rd pebble.Reader, prefix []byte, m logMeta, now int64, r Retention, hold func(logMeta) (Position, error), probe bool) (Position, error) {
	if m.First == 0 || m.First > m.Head+1 {
		return 0, corruptf("log meta has first %d past head %d", m.First, m.Head)
	}
	end := m.Head + 1
	first := m.First
	if r.MaxCount > 0 && uint64(m.Head-m.First+1) > r.MaxCount {
		first = m.Head - Position(r.MaxCount) + 1
	}
	var err error
	if r.MaxAge > 0 && !(probe && first > m.First) {
		if first, err = skipOlder(rd, prefix, first, end, now-r.MaxAge, probe); err != nil {
			return 0, err
		}
	}
	if r.MinAge <= 0 || hold == nil || first == end || (probe && first > m.First) {
		return first, nil
	}
	until, err := hold(m)
	if err != nil || until <= first {
		return first, err
	}
	return skipOlder(rd, prefix, first, min(until, end), now-r.MinAge, probe)
}

// skipOlder returns the first position in [from, to) whose entry is not older than cutoff, or to
// if all are. Entries are in time order, so it walks from the oldest and stops at the first young
// one. With probe it looks at the entry at from alone.
func skipOlder(rd pebble.Reader, prefix []byte, from, to Position, cutoff int64, probe bool) (Position, error) {
	count := 64
	if probe {
		count = 1
	}
	for from < to {
		entries, err := scanEntries(rd, prefix, from, to-1, count, 1<<62)
		if err != nil {
			return 0, err
		}
		n := 0
		for n < len(entries) && entries[n].Time < cutoff {
			n++
		}
		from += Position(n)
		if n < len(entries) || n == 0 || probe {
			break
		}
	}
	return from, nil
}
