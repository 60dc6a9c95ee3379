package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/syncd-dev/syncd/proto"
)

// Errors of the sync state.
var (
	// ErrNotContiguous: a batch does not start right after the stored cursor or has a hole, or
	// (ErrEpochMismatch) belongs to another epoch. Nothing was stored; the caller restarts the
	// sync from the stored cursor (a gap is refetched, never skipped).
	ErrNotContiguous = errors.New("client: batch not contiguous with the stored cursor")
	// ErrEpochMismatch is the ErrNotContiguous of a batch from an epoch other than the stored one.
	ErrEpochMismatch = fmt.Errorf("%w: epoch differs from the stored epoch", ErrNotContiguous)
	// ErrCursorBackward: a rebase would move the cursor back within the same epoch.
	ErrCursorBackward = errors.New("client: the cursor never moves back within an epoch")
)

// Cursor returns the stored sync cursor of the user's own log (sub-log 0); (0, 0) for a device
// that has never synced.
func (s *Store) Cursor() (proto.Epoch, proto.Position, error) {
	db, err := s.read()
	if err != nil {
		return 0, 0, err
	}
	defer s.mu.RUnlock()
	return getCursor(db, 0)
}

// Cursors returns the vector cursor: the stored cursor of every sub-log of the user's stream the
// device has synced, from sub-log 0 up to the highest one stored ((0, 0) for those between). A
// device of a user whose stream is not split has one.
func (s *Store) Cursors() ([]proto.SubCursor, error) {
	db, err := s.read()
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	var out []proto.SubCursor
	for sub := range uint32(proto.MaxSubLogs) {
		epoch, pos, err := getCursor(db, sub)
		if err != nil {
			return nil, err
		}
		out = append(out, proto.SubCursor{Epoch: epoch, Pos: pos})
	}
	n := len(out)
	for n > 1 && out[n-1] == (proto.SubCursor{}) {
		n--
	}
	return out[:n], nil
}

// getCursor reads the cursor of sub-log sub from r.
func getCursor(r pebble.Reader, sub uint32) (proto.Epoch, proto.Position, error) {
	v, ok, err := getValue(r, sk.cursor(sub))
	if err != nil || !ok {
		return 0, 0, err
	}
	if len(v) != 16 {
		return 0, 0, fmt.Errorf("client: cursor value of %d bytes", len(v))
	}
	return proto.Epoch(binary.BigEndian.Uint64(v)), proto.Position(binary.BigEndian.Uint64(v[8:])), nil
}

// setCursor writes the cursor of sub-log sub into b.
func setCursor(b *pebble.Batch, sub uint32, epoch proto.Epoch, pos proto.Position) error {
	v := binary.BigEndian.AppendUint64(nil, uint64(epoch))
	return b.Set(sk.cursor(sub), binary.BigEndian.AppendUint64(v, uint64(pos)), nil)
}

// checkSub refuses a sub-log index no stream has.
func checkSub(sub uint32) error {
	if sub >= proto.MaxSubLogs {
		return fmt.Errorf("client: sub-log %d (a stream has at most %d)", sub, proto.MaxSubLogs)
	}
	return nil
}

// ApplyBatch stores a Batch of sub-log sub of the user's stream (0: the user's own log;
// PROTOCOL.md §8.4) in one synced Pebble batch: every entry under its seq, the message view,
// read marks, members, and the sub-log's cursor (epoch, last seq). A stored cursor (0, 0) adopts
// epoch; otherwise epoch must equal the stored epoch (ErrEpochMismatch, which is an
// ErrNotContiguous), and the entries must be numbered exactly cursor+1, cursor+2, …
// (ErrNotContiguous). On any error nothing is written. Each sub-log has a cursor of its own.
//
// Entries are deduplicated by msg_id: an entry whose msg_id is already stored (re-delivered
// after an epoch change, or already loaded from history) is stored under its seq and moves the
// cursor, but changes nothing in the view — except while a repair is pending (Rewind): an entry
// at or below the run's RepairTo comes again because the stored copy may be damaged, so it
// replaces that copy in the view (keeping its recalled mark, which a recall in another sub-log
// may have set) and is applied again, in log order: read marks only move up, and membership
// changes replayed up to the head end where the log does. applied counts the entries that were
// new.
//
// It also keeps the sub-log's run (Run): the batch extends it, and a repair ends once the
// cursor reaches its RepairTo.
func (s *Store) ApplyBatch(sub uint32, epoch proto.Epoch, entries []proto.Entry) (applied int, err error) {
	a, err := s.ApplySync(sub, epoch, entries)
	return a.Entries, err
}

// ApplySync is ApplyBatch reporting, besides the count of new entries, the delivery marks the
// batch moved (marks.go): the marks of members other than the device's user that its
// KindDelivered and KindReceipt entries raised, and the status steps of the user's messages
// that those moves took. The marks are written in the same batch as the entries, so a step is
// reported by the one batch that takes it, never again.
func (s *Store) ApplySync(sub uint32, epoch proto.Epoch, entries []proto.Entry) (Applied, error) {
	if epoch == 0 {
		return Applied{}, fmt.Errorf("%w: batch without epoch", ErrEpochMismatch)
	}
	if err := checkSub(sub); err != nil {
		return Applied{}, err
	}
	for i := range entries {
		if err := checkEntryIDs(&entries[i]); err != nil {
			return Applied{}, err
		}
	}
	db, err := s.write()
	if err != nil {
		return Applied{}, err
	}
	defer s.mu.Unlock()
	applied, mk, err := applyBatch(db, sub, epoch, entries)
	if err != nil {
		return Applied{}, err
	}
	return Applied{Entries: applied, Moves: mk.moves, Steps: mk.steps}, nil
}

// applyBatch is ApplySync under the write lock; mk holds what the batch's marks moved.
func applyBatch(db *pebble.DB, sub uint32, epoch proto.Epoch, entries []proto.Entry) (applied int, mk *marks, err error) {
	mk, err = newMarks(db, true)
	if err != nil {
		return 0, nil, err
	}
	run, err := getRun(db, sub)
	if err != nil {
		return 0, nil, err
	}
	curEpoch, pos := run.Epoch, run.Pos
	if curEpoch == 0 && pos != 0 {
		return 0, nil, fmt.Errorf("client: stored cursor (0, %d) has no epoch", pos)
	}
	if curEpoch != 0 && epoch != curEpoch {
		return 0, nil, fmt.Errorf("%w: batch epoch %d, stored %d", ErrEpochMismatch, epoch, curEpoch)
	}
	for i := range entries {
		if want := pos + 1 + proto.Position(i); entries[i].Seq != want {
			return 0, nil, fmt.Errorf("%w: entry %d has seq %d, want %d", ErrNotContiguous, i, entries[i].Seq, want)
		}
	}
	if len(entries) == 0 {
		return 0, mk, nil
	}
	b := db.NewIndexedBatch() // reads see the batch's own writes (dedup within one batch)
	defer b.Close()
	for i := range entries {
		e := &entries[i]
		v, err := encode(e)
		if err != nil {
			return 0, nil, err
		}
		if err := b.Set(sk.entry(sub, e.Seq), v, nil); err != nil {
			return 0, nil, err
		}
		// Before the dedup below: the entry may be known already (loaded with History, which
		// carries no Source), but only the user log says the following started or ended there.
		if err := noteFollow(b, e); err != nil {
			return 0, nil, err
		}
		seen, recalled := false, false
		if e.MsgID != "" {
			var ref []byte
			ref, seen, err = getValue(b, sk.msgIndex(e.MsgID))
			if err != nil {
				return 0, nil, err
			}
			if seen && e.Seq > run.RepairTo {
				continue
			}
			if seen { // repairing: the stored copy goes, this one takes its place
				if recalled, err = dropStoredCopy(b, ref, e); err != nil {
					return 0, nil, err
				}
			}
			if err := b.Set(sk.msgIndex(e.MsgID), sk.msgRef(e.Conv, e.ConvSeq), nil); err != nil {
				return 0, nil, err
			}
		}
		if !seen {
			applied++
		}
		if err := applyToView(b, e, recalled, mk); err != nil {
			return 0, nil, err
		}
	}
	last := entries[len(entries)-1].Seq
	repairTo := run.RepairTo
	if last >= repairTo {
		repairTo = 0 // every entry the rewind dropped has come again
	}
	if err := errors.Join(setCursor(b, sub, epoch, last), setRun(b, sub, run.Base, repairTo)); err != nil {
		return 0, nil, err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, nil, fmt.Errorf("client: write batch: %w", err)
	}
	return applied, mk, nil
}

// dropStoredCopy removes, for a repair, the view record the msg_id index entry ref points at if
// it is e's message filed under another (conv, conv_seq) than e's — the damaged copy — and
// reports whether the stored copy was marked recalled. A record there of another msg_id is not
// e's copy (the index itself is off) and is left alone; an undecodable one is e's damaged copy.
func dropStoredCopy(b *pebble.Batch, ref []byte, e *proto.Entry) (recalled bool, err error) {
	conv, seq, err := sk.parseMsgRef(ref)
	if err != nil || seq == 0 || !keyableID(conv) {
		return false, nil // a damaged index entry: the Set that follows replaces it
	}
	v, ok, err := getValue(b, sk.view(conv, seq))
	if err != nil || !ok {
		return false, err
	}
	var m storedMsg
	if decode(v, &m) == nil {
		if m.MsgID != e.MsgID {
			return false, nil
		}
		recalled = m.Recalled
	}
	if conv == e.Conv && seq == e.ConvSeq {
		return recalled, nil // applyToView overwrites it
	}
	return recalled, b.Delete(sk.view(conv, seq), nil)
}

// applyToView applies one entry to the message view, read and delivered marks (mk) and members:
// a new one, or one replacing a damaged copy (recalled: the copy was marked recalled, which the
// new record keeps).
func applyToView(b *pebble.Batch, e *proto.Entry, recalled bool, mk *marks) error {
	if e.Conv == "" {
		return nil // nothing to attach it to (an unknown kind): stored under its seq only
	}
	if err := b.Set(sk.conv(e.Conv), nil, nil); err != nil {
		return err
	}
	m := storedMsg{Kind: e.Kind, MsgID: e.MsgID, Sender: e.Sender, Time: e.Time, Recalled: recalled && e.Kind == proto.KindMessage}
	kind := e.Kind
	if e.Folded != 0 {
		// Superseded by the entry at e.Folded of the same log, which brings its state: stored
		// for its position and id, applied to nothing (PROTOCOL §5, "Folded entries").
		m.Target, kind = e.Target, 0
	}
	switch kind {
	case proto.KindMessage:
		m.Body = e.Body
		if e.MsgID != "" {
			// A recall that arrived before its target (possible after a rebase).
			_, early, err := getValue(b, sk.earlyRecall(e.MsgID))
			if err != nil {
				return err
			}
			if early {
				m.Recalled = true
				if err := b.Delete(sk.earlyRecall(e.MsgID), nil); err != nil {
					return err
				}
			}
		}
	case proto.KindReceipt, proto.KindDelivered:
		m.UpTo = e.UpTo
		if err := mk.raise(b, e.Conv, e.Sender, e.UpTo, e.Kind == proto.KindReceipt); err != nil {
			return err
		}
	case proto.KindRecall:
		m.Target = e.Target
		if e.Target != "" {
			if err := markRecalled(b, e.Target); err != nil {
				return err
			}
		}
	case proto.KindEdit:
		m.Target, m.Body = e.Target, e.Body
		if err := applyEdit(b, e); err != nil {
			return err
		}
	case proto.KindReaction:
		m.Target = e.Target
		if err := applyReaction(b, e); err != nil {
			return err
		}
	case proto.KindGroupCreate, proto.KindMemberAdd, proto.KindMemberRemove, proto.KindRoleChange:
		m.Members = e.Members
		if err := applyMembership(b, e); err != nil {
			return err
		}
	}
	if e.ConvSeq == 0 {
		return nil // not a conversation entry: nothing to show
	}
	v, err := encode(&m)
	if err != nil {
		return err
	}
	return b.Set(sk.view(e.Conv, e.ConvSeq), v, nil)
}

// applyMembership updates the stored members of e's group. An entry whose list was left out
// (MemberCount: a change to more than proto.MaxInlineMembers users) marks them incomplete
// until the app fetches them (Client.FetchMembers); a role change changes no one's membership.
func applyMembership(b *pebble.Batch, e *proto.Entry) error {
	if e.MemberCount > 0 {
		return b.Set(sk.membersStale(e.Conv), nil, nil)
	}
	switch e.Kind {
	case proto.KindGroupCreate, proto.KindMemberAdd:
		add := e.Members
		if e.Kind == proto.KindGroupCreate && e.Sender != "" {
			add = append([]string{e.Sender}, add...) // the creator is always a member
		}
		for _, u := range add {
			if err := b.Set(sk.member(e.Conv, u), nil, nil); err != nil {
				return err
			}
		}
	case proto.KindMemberRemove:
		for _, u := range e.Members {
			if err := b.Delete(sk.member(e.Conv, u), nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// markRecalled marks the stored message target recalled, or remembers the recall until the
// message arrives.
func markRecalled(b *pebble.Batch, target proto.MsgID) error {
	found, err := updateMessage(b, target, func(m *storedMsg) bool {
		changed := !m.Recalled
		m.Recalled = true
		return changed
	})
	if err != nil || found {
		return err
	}
	return b.Set(sk.earlyRecall(target), nil, nil)
}

// applyEdit makes e, an edit, the body of its target unless a later edit is applied already
// (an edit paged in with History may come after a later one). An edit whose target is not
// stored is not remembered, unlike a recall: the target, when it comes (History, a resync),
// comes with the server's state of that time, and the later edit is in the same conversation.
func applyEdit(b *pebble.Batch, e *proto.Entry) error {
	_, err := updateMessage(b, e.Target, func(m *storedMsg) bool {
		if e.ConvSeq <= m.EditSeq {
			return false
		}
		m.Body, m.EditSeq, m.EditedAt = e.Body, e.ConvSeq, e.Time
		return true
	})
	return err
}

// applyReaction records e, a reaction entry, on its target: the state of (sender, reaction) is
// its last entry's, by conv_seq. A target not stored is not remembered (see applyEdit).
func applyReaction(b *pebble.Batch, e *proto.Entry) error {
	_, err := updateMessage(b, e.Target, func(m *storedMsg) bool {
		i := slices.IndexFunc(m.Reactions, func(r reactionMark) bool { return r.Sender == e.Sender && r.Reaction == e.Reaction })
		mark := reactionMark{Sender: e.Sender, Reaction: e.Reaction, Seq: e.ConvSeq, On: !e.Remove}
		switch {
		case i < 0:
			m.Reactions = append(m.Reactions, mark)
		case e.ConvSeq > m.Reactions[i].Seq:
			m.Reactions[i] = mark
		default:
			return false
		}
		return true
	})
	return err
}

// updateMessage applies change to the stored message target, writing it back if change reports
// a change; found is false if the message is not stored.
func updateMessage(b *pebble.Batch, target proto.MsgID, change func(*storedMsg) bool) (found bool, err error) {
	if target == "" {
		return false, nil
	}
	ref, ok, err := getValue(b, sk.msgIndex(target))
	if err != nil || !ok {
		return false, err
	}
	conv, seq, err := sk.parseMsgRef(ref)
	if err != nil || seq == 0 {
		return false, err
	}
	v, ok, err := getValue(b, sk.view(conv, seq))
	if err != nil || !ok {
		return false, err
	}
	var m storedMsg
	if err := decode(v, &m); err != nil {
		return false, fmt.Errorf("client: message %s: %w", target, err)
	}
	if m.Kind != proto.KindMessage || !change(&m) {
		return true, nil
	}
	if v, err = encode(&m); err != nil {
		return true, err
	}
	return true, b.Set(sk.view(conv, seq), v, nil)
}

// checkEntryIDs refuses an entry whose ids contain 0x00, which would break the key layout
// (the server never sends one: ids are printable ASCII).
func checkEntryIDs(e *proto.Entry) error {
	bad := strings.ContainsRune(e.Conv, 0) || strings.ContainsRune(e.Sender, 0) ||
		strings.ContainsRune(string(e.MsgID), 0) || strings.ContainsRune(string(e.Target), 0)
	for _, m := range e.Members {
		bad = bad || strings.ContainsRune(m, 0) || m == ""
	}
	if bad {
		return fmt.Errorf("client: entry seq %d has an id with a 0x00 byte or an empty member", e.Seq)
	}
	return nil
}

// ResetForEpoch handles an epoch change (EpochChanged) of sub-log sub: the log was re-created,
// so its stored entries and positions mean nothing. It drops the sub-log's stored entries (its
// run starts empty, with no repair pending) and sets its cursor to (epoch, 0), keeping the message view, read marks, members and the msg_id
// index: history stays, and entries delivered again are deduplicated by msg_id. If the new log
// starts after 1, the next SyncStart from (epoch, 0) is answered TooOld or Rebase (then
// RebaseTo), or the caller may call RebaseTo(sub, epoch, first-1) itself.
func (s *Store) ResetForEpoch(sub uint32, epoch proto.Epoch) error {
	if epoch == 0 {
		return errors.New("client: reset to epoch 0")
	}
	if err := checkSub(sub); err != nil {
		return err
	}
	db, err := s.write()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	b := db.NewBatch()
	defer b.Close()
	if err := errors.Join(
		b.DeleteRange(sk.entryPrefix(sub), prefixEnd(sk.entryPrefix(sub)), nil),
		setCursor(b, sub, epoch, 0),
		setRun(b, sub, 1, 0), // the new epoch's run starts empty; a pending repair was of the old one
	); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("client: reset cursor: %w", err)
	}
	return nil
}

// ContinueEpoch handles an EpochChanged that continues (PROTOCOL §8.4): sub-log sub was restored
// from a backup that holds every position up to the stored cursor, so the cursor's position names
// the same entries in epoch. It moves the cursor to (epoch, its position), keeping the stored
// entries and the run. A stored cursor of epoch 0 (nothing stored) is left alone.
func (s *Store) ContinueEpoch(sub uint32, epoch proto.Epoch) error {
	if epoch == 0 {
		return errors.New("client: continue in epoch 0")
	}
	if err := checkSub(sub); err != nil {
		return err
	}
	db, err := s.write()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	old, pos, err := getCursor(db, sub)
	if err != nil || old == 0 || old == epoch {
		return err
	}
	b := db.NewBatch()
	defer b.Close()
	if err := setCursor(b, sub, epoch, pos); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("client: continue cursor: %w", err)
	}
	return nil
}

// RebaseTo jumps the cursor of sub-log sub to (epoch, head) without entries, after TooOld or
// Rebase; the caller loads conversation state and recent history separately. Within the stored
// epoch the cursor never moves back (ErrCursorBackward); moving to another epoch also drops the
// sub-log's stored entries, as ResetForEpoch does. A jump starts a new, empty run at head+1
// (the entries jumped over are not stored) and ends a pending repair (the rebase jumped over
// it).
func (s *Store) RebaseTo(sub uint32, epoch proto.Epoch, head proto.Position) error {
	if epoch == 0 {
		return errors.New("client: rebase to epoch 0")
	}
	if err := checkSub(sub); err != nil {
		return err
	}
	db, err := s.write()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	run, err := getRun(db, sub)
	if err != nil {
		return err
	}
	b := db.NewBatch()
	defer b.Close()
	if epoch == run.Epoch {
		if head < run.Pos {
			return fmt.Errorf("%w: rebase to %d, stored %d", ErrCursorBackward, head, run.Pos)
		}
	} else if err := b.DeleteRange(sk.entryPrefix(sub), prefixEnd(sk.entryPrefix(sub)), nil); err != nil {
		return err
	}
	if epoch != run.Epoch || head != run.Pos { // a jump; a rebase to where the cursor is changes nothing
		run.Base, run.RepairTo = head+1, 0
	}
	if err := errors.Join(setCursor(b, sub, epoch, head), setRun(b, sub, run.Base, run.RepairTo)); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("client: rebase cursor: %w", err)
	}
	return nil
}
