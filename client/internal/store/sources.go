package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/syncd-dev/syncd/proto"
)

// Sources (PROTOCOL.md §6 "Sources: large groups", §8.4; revision 6). A large group's entries are
// not copied into its members' logs: the device reads them from the conversation log itself, as a
// source of its sync stream with a cursor of its own, (the conversation log's epoch, a conv_seq).
// The store keeps, per source the device follows:
//
//   - its cursor (0x1c), written in the same synced batch as the source's entries up to it, like
//     a sub-log's;
//   - its entries as received (0x1d), under (conv, conv_seq) where a sub-log's are under (sub,
//     seq), applied to the message view, marks and members exactly as user-log entries are
//     (deduplicated by msg_id);
//
// and, from the user log, where the user's following of each large group started and ended (0x1e:
// the entries with Entry.Source set, noted by ApplySync whatever the sub-log), which is what
// makes a Batch.After other than the cursor acceptable (sourceStart).
//
// A source has no run and no repair (runs.go): the digest checks cover the user log and its
// sub-logs only. The entries are kept as received all the same, so that a check of a
// conversation's history by conv_seq (PROTOCOL §8.7, optional) has them to compare.

// getSourceCursor reads the cursor of source conv from r; ok is false when the device follows no
// such source (a store written before revision 6 has none).
func getSourceCursor(r pebble.Reader, conv string) (cur proto.SubCursor, ok bool, err error) {
	v, ok, err := getValue(r, sk.sourceCursor(conv))
	if err != nil || !ok {
		return proto.SubCursor{}, false, err
	}
	if len(v) != 16 {
		return proto.SubCursor{}, false, fmt.Errorf("client: cursor of source %s: value of %d bytes", conv, len(v))
	}
	return proto.SubCursor{Epoch: proto.Epoch(binary.BigEndian.Uint64(v)), Pos: proto.Position(binary.BigEndian.Uint64(v[8:]))}, true, nil
}

// setSourceCursor writes the cursor of source conv into b.
func setSourceCursor(b *pebble.Batch, conv string, epoch proto.Epoch, pos proto.Position) error {
	v := binary.BigEndian.AppendUint64(nil, uint64(epoch))
	return b.Set(sk.sourceCursor(conv), binary.BigEndian.AppendUint64(v, uint64(pos)), nil)
}

// noteFollow records, for a user-log entry with Entry.Source set, that the user's following of
// its large group started (a group_create or member_add) or ended (a member_remove) at its
// conv_seq. Any other entry is left alone.
func noteFollow(b *pebble.Batch, e *proto.Entry) error {
	if !e.Source || e.ConvSeq == 0 || !keyableID(e.Conv) || !followStart(e.Kind) && e.Kind != proto.KindMemberRemove {
		return nil
	}
	return b.Set(sk.followMark(e.Conv, e.ConvSeq), []byte{byte(e.Kind)}, nil)
}

// followStart reports whether a follow mark of kind k starts a following (rather than ends it).
func followStart(k proto.Kind) bool { return k == proto.KindGroupCreate || k == proto.KindMemberAdd }

// checkConv refuses a source id that cannot be part of a key.
func checkConv(conv string) error {
	if !keyableID(conv) {
		return fmt.Errorf("client: bad source conversation id %q", conv)
	}
	return nil
}

// SourceCursors returns the stored cursor of every source the device follows, in id order: what
// SyncStart.Sources lists. None for a device that follows none.
func (s *Store) SourceCursors() ([]proto.SourceCursor, error) {
	db, err := s.read()
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	var out []proto.SourceCursor
	prefix := sk.sourceCursorPrefix()
	err = scan(db, prefix, func(k, v []byte) error {
		conv := string(k[len(prefix) : len(k)-1])
		if len(v) != 16 {
			return fmt.Errorf("client: cursor of source %s: value of %d bytes", conv, len(v))
		}
		out = append(out, proto.SourceCursor{Conv: conv, Epoch: proto.Epoch(binary.BigEndian.Uint64(v)),
			Pos: proto.Position(binary.BigEndian.Uint64(v[8:]))})
		return nil
	})
	return out, err
}

// SourceCursor returns the stored cursor of source conv; ok is false when the device has none.
func (s *Store) SourceCursor(conv string) (cur proto.SubCursor, ok bool, err error) {
	if !keyableID(conv) {
		return proto.SubCursor{}, false, nil
	}
	db, err := s.read()
	if err != nil {
		return proto.SubCursor{}, false, err
	}
	defer s.mu.RUnlock()
	return getSourceCursor(db, conv)
}

// FollowStart returns where the user log says the user's current following of conv started: the
// conv_seq of the latest entry with Entry.Source set, if that one started it (ok is false when the
// latest ended it, or the log never said: not stored, or jumped over by a rebase). A source the
// device has no cursor for starts there: its first Batch carries that position as After.
func (s *Store) FollowStart(conv string) (start proto.Position, ok bool, err error) {
	if !keyableID(conv) {
		return 0, false, nil
	}
	db, err := s.read()
	if err != nil {
		return 0, false, err
	}
	defer s.mu.RUnlock()
	seq, kind, found, err := lastFollowMark(db, conv, ^proto.Position(0))
	if err != nil || !found || !followStart(kind) {
		return 0, false, err
	}
	return seq, true, nil
}

// lastFollowMark returns the follow mark of conv with the highest conv_seq below before.
func lastFollowMark(r pebble.Reader, conv string, before proto.Position) (seq proto.Position, kind proto.Kind, found bool, err error) {
	prefix := sk.followMarkPrefix(conv)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: sk.followMark(conv, before)})
	if err != nil {
		return 0, 0, false, fmt.Errorf("client: store scan: %w", err)
	}
	defer func() { err = errors.Join(err, it.Close()) }()
	if !it.Last() {
		return 0, 0, false, it.Error()
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return 0, 0, false, err
	}
	if len(it.Key()) != len(prefix)+8 || len(v) != 1 {
		return 0, 0, false, fmt.Errorf("client: follow mark %x: value of %d bytes", it.Key(), len(v))
	}
	return proto.Position(binary.BigEndian.Uint64(it.Key()[len(prefix):])), proto.Kind(v[0]), true, nil
}

// ApplySource stores a Batch of source conv (PROTOCOL.md §6 "Sources", §8.4) in one synced Pebble
// batch: every entry under (conv, conv_seq), the message view, marks and members as ApplySync
// does for user-log entries (deduplicated by msg_id: a known one is stored under its position
// and moves the cursor, but changes nothing in the view), and the source's cursor (epoch, last
// conv_seq). after is the Batch's After (0 when absent). The batch must continue (sourceStart):
//
//   - a source the device has no cursor for: from after, whatever its epoch (adopted). The
//     gate (§6) has stored the user-log entry that started the following before any frame of
//     the source, so after must be where the log says it starts — unless the log does not say
//     (a rebase of the user log jumped over the entry), when after is taken as it comes;
//   - else, under the stored epoch (ErrEpochMismatch), from the stored cursor — or from an after
//     beyond it when the user log shows the user was removed and added again there (sourceStart).
//
// Anything else is ErrNotContiguous, and nothing is written: the caller restarts the sync from
// the stored cursors. An entry that names another conversation than conv, or a conv_seq other
// than its seq, is refused (an error, not a gap: the server sent something it must not); one
// that leaves either out is stored with conv and its seq. The caller's entries are not modified.
func (s *Store) ApplySource(conv string, epoch proto.Epoch, after proto.Position, entries []proto.Entry) (Applied, error) {
	if err := checkConv(conv); err != nil {
		return Applied{}, err
	}
	if epoch == 0 {
		return Applied{}, fmt.Errorf("%w: batch of source %s without epoch", ErrEpochMismatch, conv)
	}
	entries = slices.Clone(entries)
	for i := range entries {
		e := &entries[i]
		if err := checkEntryIDs(e); err != nil {
			return Applied{}, err
		}
		switch {
		case e.Conv == "":
			e.Conv = conv
		case e.Conv != conv:
			return Applied{}, fmt.Errorf("client: a batch of source %s holds an entry of conversation %s", conv, e.Conv)
		}
		switch {
		case e.ConvSeq == 0:
			e.ConvSeq = e.Seq
		case e.ConvSeq != e.Seq:
			return Applied{}, fmt.Errorf("client: a batch of source %s holds an entry at seq %d with conv_seq %d", conv, e.Seq, e.ConvSeq)
		}
	}
	db, err := s.write()
	if err != nil {
		return Applied{}, err
	}
	defer s.mu.Unlock()
	mk, err := newMarks(db, true)
	if err != nil {
		return Applied{}, err
	}
	pos, err := sourceStart(db, conv, epoch, after)
	if err != nil {
		return Applied{}, err
	}
	for i := range entries {
		if want := pos + 1 + proto.Position(i); entries[i].Seq != want {
			return Applied{}, fmt.Errorf("%w: source %s: entry %d has seq %d, want %d", ErrNotContiguous, conv, i, entries[i].Seq, want)
		}
	}
	if len(entries) == 0 {
		return Applied{}, nil
	}
	b := db.NewIndexedBatch() // reads see the batch's own writes (dedup within one batch)
	defer b.Close()
	applied := 0
	for i := range entries {
		e := &entries[i]
		v, err := encode(e)
		if err != nil {
			return Applied{}, err
		}
		if err := b.Set(sk.sourceEntry(conv, e.Seq), v, nil); err != nil {
			return Applied{}, err
		}
		if e.MsgID != "" {
			_, seen, err := getValue(b, sk.msgIndex(e.MsgID))
			if err != nil {
				return Applied{}, err
			}
			if seen {
				continue
			}
			if err := b.Set(sk.msgIndex(e.MsgID), sk.msgRef(e.Conv, e.ConvSeq), nil); err != nil {
				return Applied{}, err
			}
		}
		applied++
		if err := applyToView(b, e, false, mk); err != nil {
			return Applied{}, err
		}
	}
	if err := setSourceCursor(b, conv, epoch, entries[len(entries)-1].Seq); err != nil {
		return Applied{}, err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return Applied{}, fmt.Errorf("client: write batch of source %s: %w", conv, err)
	}
	return Applied{Entries: applied, Moves: mk.moves, Steps: mk.steps}, nil
}

// sourceStart returns the position a Batch of source conv in epoch, carrying after (0: absent),
// must continue from (PROTOCOL §6, "Where a source starts"):
//
//   - no stored cursor: after (case (a) of the spec, a source the SyncStart did not name, or one
//     whose cursor SourceEnd dropped and which the user joined again);
//   - a stored cursor: its epoch must be epoch (ErrEpochMismatch); an after that is 0 or the
//     cursor's position continues the cursor; an after beyond it (case (b): the user was removed
//     and added again, and the positions between were not the user's) only when the user log shows
//     exactly that: the following started again at after (a start mark there), and the mark
//     before it is the removal that ended the period the cursor is in, at most one past the
//     cursor (the period's last entry for the user is the one before the removal) — so neither
//     the rest of that period nor a whole period in between is skipped. Anything else is a gap
//     (ErrNotContiguous).
func sourceStart(r pebble.Reader, conv string, epoch proto.Epoch, after proto.Position) (proto.Position, error) {
	cur, has, err := getSourceCursor(r, conv)
	switch {
	case err != nil:
		return 0, err
	case !has:
		// Where the log says the following started, if it says (a rebase of the user log
		// may have jumped over the entry): a first batch from elsewhere is a gap (§6).
		seq, kind, found, err := lastFollowMark(r, conv, ^proto.Position(0))
		if err != nil {
			return 0, err
		}
		if found && followStart(kind) && seq != after {
			return 0, fmt.Errorf("%w: source %s: the first batch follows %d, the user log says the following started at %d",
				ErrNotContiguous, conv, after, seq)
		}
		return after, nil
	case cur.Epoch == 0 && cur.Pos != 0:
		return 0, fmt.Errorf("client: stored cursor (0, %d) of source %s has no epoch", cur.Pos, conv)
	case cur.Epoch != 0 && epoch != cur.Epoch:
		return 0, fmt.Errorf("%w: source %s: batch epoch %d, stored %d", ErrEpochMismatch, conv, epoch, cur.Epoch)
	case after == 0 || after == cur.Pos:
		return cur.Pos, nil
	case after > cur.Pos:
		ok, err := rejoined(r, conv, cur.Pos, after)
		if err != nil {
			return 0, err
		}
		if ok {
			return after, nil
		}
	}
	return 0, fmt.Errorf("%w: source %s: the batch follows %d, the stored cursor is at %d and the log shows no rejoining there",
		ErrNotContiguous, conv, after, cur.Pos)
}

// rejoined reports whether the user log shows that the user, whose following of conv is stored
// up to pos, was removed from the group at most at pos+1 and added again at after, with no other
// following in between (see sourceStart).
func rejoined(r pebble.Reader, conv string, pos, after proto.Position) (bool, error) {
	v, ok, err := getValue(r, sk.followMark(conv, after))
	if err != nil || !ok || len(v) != 1 || !followStart(proto.Kind(v[0])) {
		return false, err
	}
	seq, kind, found, err := lastFollowMark(r, conv, after)
	if err != nil || !found {
		return false, err
	}
	return kind == proto.KindMemberRemove && seq <= pos+1, nil
}

// EndSource acts on SourceEnd{conv, last}: the user has no entry of source conv after last. If
// the stored cursor is below last, entries the user should have are missing (ErrNotContiguous:
// the caller restarts the sync and they come again); otherwise the source's cursor is dropped,
// durably, and the stored entries and the message view are kept. A source the device has no
// cursor for changes nothing (a SourceEnd seen again).
func (s *Store) EndSource(conv string, last proto.Position) error {
	if err := checkConv(conv); err != nil {
		return err
	}
	db, err := s.write()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	cur, has, err := getSourceCursor(db, conv)
	if err != nil || !has {
		return err
	}
	if cur.Pos < last {
		return fmt.Errorf("%w: source %s ends at %d, stored up to %d", ErrNotContiguous, conv, last, cur.Pos)
	}
	if err := db.Delete(sk.sourceCursor(conv), pebble.Sync); err != nil {
		return fmt.Errorf("client: drop the cursor of source %s: %w", conv, err)
	}
	return nil
}

// DropSource drops the cursor of source conv without any check: the user is no longer a member
// (a rebase of the source found it so). The stored entries and the message view are kept.
func (s *Store) DropSource(conv string) error {
	if err := checkConv(conv); err != nil {
		return err
	}
	db, err := s.write()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	return db.Delete(sk.sourceCursor(conv), pebble.Sync)
}

// RebaseSource jumps the cursor of source conv to (epoch, head) without entries, after the
// source's TooOld or Rebase (or a rebase of the user log), once the caller has stored the
// conversation's state and recent history. Within the stored epoch the cursor never moves back:
// a head below it (a replica behind) leaves it where it is. Moving to another epoch drops the
// source's stored entries, whose positions mean nothing in the new one. A source the device had
// no cursor for gets one.
func (s *Store) RebaseSource(conv string, epoch proto.Epoch, head proto.Position) error {
	if err := checkConv(conv); err != nil {
		return err
	}
	if epoch == 0 {
		return fmt.Errorf("client: rebase source %s to epoch 0", conv)
	}
	db, err := s.write()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	cur, has, err := getSourceCursor(db, conv)
	if err != nil {
		return err
	}
	if has && cur.Epoch == epoch && head <= cur.Pos {
		return nil
	}
	return setSourceCursorDropping(db, conv, epoch, head, has && cur.Epoch != epoch, "rebase")
}

// setSourceCursorDropping sets the cursor of source conv to (epoch, pos), durably, first
// dropping the source's stored entries if drop is set (their positions are of another epoch).
func setSourceCursorDropping(db *pebble.DB, conv string, epoch proto.Epoch, pos proto.Position, drop bool, what string) error {
	b := db.NewBatch()
	defer b.Close()
	if drop {
		prefix := sk.sourceEntryPrefix(conv)
		if err := b.DeleteRange(prefix, prefixEnd(prefix), nil); err != nil {
			return err
		}
	}
	if err := setSourceCursor(b, conv, epoch, pos); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("client: %s source %s: %w", what, conv, err)
	}
	return nil
}

// ResetSourceForEpoch acts on EpochChanged of source conv: the conversation log was re-created,
// so the source's stored entries and positions mean nothing. It drops the stored entries and sets
// the cursor to (epoch, pos) — the new log's first retained position minus one, so that the next
// stream replays it from there (PROTOCOL §8.4) — keeping the message view, marks, members and the
// msg_id index: entries delivered again are deduplicated by msg_id.
func (s *Store) ResetSourceForEpoch(conv string, epoch proto.Epoch, pos proto.Position) error {
	if err := checkConv(conv); err != nil {
		return err
	}
	if epoch == 0 {
		return fmt.Errorf("client: reset source %s to epoch 0", conv)
	}
	db, err := s.write()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	return setSourceCursorDropping(db, conv, epoch, pos, true, "reset")
}

// ContinueSourceEpoch acts on an EpochChanged of source conv that continues: the conversation
// log was restored from a backup that holds every position up to the stored cursor. It moves the
// cursor to (epoch, its position), keeping the stored entries. A source without a cursor is left
// alone.
func (s *Store) ContinueSourceEpoch(conv string, epoch proto.Epoch) error {
	if err := checkConv(conv); err != nil {
		return err
	}
	if epoch == 0 {
		return fmt.Errorf("client: continue source %s in epoch 0", conv)
	}
	db, err := s.write()
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	cur, has, err := getSourceCursor(db, conv)
	if err != nil || !has || cur.Epoch == epoch {
		return err
	}
	return setSourceCursorDropping(db, conv, epoch, cur.Pos, false, "continue")
}

// SourceEntries returns the stored entries of source conv at conv_seqs from through to,
// ascending, as they were received; a position with no stored entry is absent. An entry that
// cannot be decoded fails the read with ErrDamaged.
func (s *Store) SourceEntries(conv string, from, to proto.Position) (_ []proto.Entry, err error) {
	if !keyableID(conv) || to < from {
		return nil, nil
	}
	db, err := s.read()
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	// Keys are fixed-width after the id: the smallest key above the one at to is it plus a byte.
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: sk.sourceEntry(conv, from), UpperBound: append(sk.sourceEntry(conv, to), 0)})
	if err != nil {
		return nil, fmt.Errorf("client: store scan: %w", err)
	}
	defer func() { err = errors.Join(err, it.Close()) }()
	var out []proto.Entry
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("client: store read: %w", err)
		}
		var e proto.Entry
		if err := decode(v, &e); err != nil {
			return nil, fmt.Errorf("%w: source %s, key %x: %v", ErrDamaged, conv, it.Key(), err)
		}
		out = append(out, e)
	}
	return out, it.Error()
}
