package log

import (
	"fmt"
)

// Retention bounds how much of a user log is kept. Zero fields mean "no bound".
type Retention struct {
	MaxCount uint64 // keep at most this many newest entries
	MaxAge   int64  // drop entries older than this (ns), measured on the command's proposer clock
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
	return t.trim(t.s.k.user(uid), t.s.k.userEntryPrefix(uid), st, r)
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
	return t.trim(t.s.k.conv(conv), t.s.k.convEntryPrefix(conv), st, r)
}

func (t *Tx) trim(metaKey, prefix []byte, st Stamp, r Retention) (Position, error) {
	m, ok, err := t.logMeta(metaKey)
	if err != nil || !ok {
		return m.First, err
	}
	if m.First == 0 || m.First > m.Head+1 {
		return 0, corruptf("log meta has first %d past head %d", m.First, m.Head)
	}
	newFirst := m.First
	if r.MaxCount > 0 && uint64(m.Head-m.First+1) > r.MaxCount {
		newFirst = m.Head - Position(r.MaxCount) + 1
	}
	if r.MaxAge > 0 {
		// Entries are in time order, so walk from the oldest kept entry while it is too old.
		cutoff := st.Time - r.MaxAge
		for newFirst <= m.Head {
			entries, err := scanEntries(t.b, prefix, newFirst, m.Head, 64, 1<<62)
			if err != nil {
				return 0, err
			}
			n := 0
			for n < len(entries) && entries[n].Time < cutoff {
				n++
			}
			newFirst += Position(n)
			if n < len(entries) {
				break
			}
		}
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
