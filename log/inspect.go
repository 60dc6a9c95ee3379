package log

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Read-only lookups for operators (syncctl trace and cursor, through syncd's admin HTTP): where a
// message lives, whether a user's log holds it, whether the outbox still does, and who the members
// of a conversation are. Like every read they see the local replica, and like every read they are
// safe for concurrent use with each other and with the shard's one writer. Nothing on a client's
// path uses them.

// LookupMsg returns where message id lives in this shard, its home shard: its conversation, its
// position in the conversation log and whether it was recalled. ok is false if this shard never
// assigned id. The msg index is never trimmed, so a message whose entry left the conversation
// log's retained history is still found (and ReadConv at seq then answers ReadTooOld).
func (s *Shard) LookupMsg(id MsgID) (conv string, seq Position, recalled bool, ok bool, err error) {
	v, ok, err := getValue(s.db, s.k.msgIndex(id))
	if err != nil || !ok {
		return "", 0, false, false, err
	}
	ref, err := decodeMsgRef(v)
	if err != nil {
		return "", 0, false, false, fmt.Errorf("msg index of %s: %w", id, err)
	}
	return ref.Conv, ref.ConvSeq, ref.Recalled, true, nil
}

// FindInUserLog looks for the entry whose own MsgID is id in the log of uid, newest first, from
// the head back to the first retained position, reading at most scanLimit entries (at least one).
// Receipts and recalls are entries with msg ids of their own: a recall of id is not a match. It
// returns the entry's position when found, and how many entries it read either way; found=false
// with scanned == scanLimit means the scan stopped at the limit and the entry may lie further
// back, found=false with scanned < scanLimit that the retained log does not hold it. A log that
// does not exist holds nothing (scanned 0).
//
// The scan does not stop early at older entries of the same home shard: entries of one source
// usually arrive in msg id order, but a replayed delivery is appended at the head, out of order.
func (s *Shard) FindInUserLog(uid string, id MsgID, scanLimit int) (pos Position, found bool, scanned int, err error) {
	if !ValidLog(uid) {
		return 0, false, 0, invalidf("bad user id %q", uid)
	}
	scanLimit = max(scanLimit, 1)
	snap := s.db.NewSnapshot() // meta and entries from one point in time, despite the writer
	defer snap.Close()
	m, ok, err := getLogMeta(snap, s.k.user(uid))
	if err != nil || !ok || m.Head < m.First {
		return 0, false, 0, err
	}
	prefix := s.k.userEntryPrefix(uid)
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: entryKey(prefix, m.First), UpperBound: entryKey(prefix, m.Head+1)})
	if err != nil {
		return 0, false, 0, fmt.Errorf("log: read: %w", err)
	}
	defer it.Close()
	for ok := it.Last(); ok && scanned < scanLimit; ok = it.Prev() {
		key := it.Key()
		seq := Position(binary.BigEndian.Uint64(key[len(key)-8:]))
		e, err := decodeEntry(it.Value(), seq)
		if err != nil {
			return 0, false, scanned, fmt.Errorf("log of %q at %d: %w", uid, seq, err)
		}
		scanned++
		if e.MsgID == id {
			return seq, true, scanned, nil
		}
	}
	if err := it.Error(); err != nil {
		return 0, false, scanned, fmt.Errorf("log: read: %w", err)
	}
	return 0, false, scanned, nil
}

// FindInOutbox returns the outbox record of message id, which this shard assigned, if the outbox
// still holds it. ok=false means the record is not retained: the outbox was trimmed past it
// because every destination's delivery mark had passed it (or id was never assigned here).
//
// It is a binary search over the retained positions, a few point reads however long the outbox
// has grown: records are written in Raft index order, one per conversation entry, and a msg id is
// (shard, Raft index, sub), so the records' msg ids ascend with their positions.
func (s *Shard) FindInOutbox(id MsgID) (item OutboxItem, ok bool, err error) {
	snap := s.db.NewSnapshot() // range and records read at one point in time
	defer snap.Close()
	info, err := outboxInfo(snap, s.k)
	if err != nil {
		return OutboxItem{}, false, err
	}
	lo, hi := info.First, info.Head // search [lo, hi]; First is at least 1, so hi never wraps
	for lo <= hi {
		mid := lo + (hi-lo)/2
		v, found, err := getValue(snap, s.k.outbox(mid))
		if err != nil {
			return OutboxItem{}, false, err
		}
		if !found {
			return OutboxItem{}, false, corruptf("outbox has a hole at %d (retained %d..%d)", mid, info.First, info.Head)
		}
		rec, err := decodeOutboxRecord(v)
		if err != nil {
			return OutboxItem{}, false, fmt.Errorf("outbox %d: %w", mid, err)
		}
		switch got := rec.Entry.MsgID; {
		case got == id:
			return OutboxItem{Pos: mid, Recipients: rec.Recipients, Entry: rec.Entry}, true, nil
		case msgIDLess(got, id):
			lo = mid + 1
		default:
			hi = mid - 1
		}
	}
	return OutboxItem{}, false, nil
}

// msgIDLess orders msg ids of one shard by the order they were assigned.
func msgIDLess(a, b MsgID) bool {
	if a.Index != b.Index {
		return a.Index < b.Index
	}
	return a.Sub < b.Sub
}

// ConvMembers returns the kind of conversation conv and its current members, sorted, whoever
// asks (unlike [Shard.Conversation], which answers members only). It returns ErrNoConversation
// if the conversation does not exist. The members are the current ones: a message was sent to
// the members of its time, which its outbox record names while the outbox holds it.
func (s *Shard) ConvMembers(conv string) (ConvKind, []string, error) {
	if !ValidID(conv) {
		return 0, nil, invalidf("bad conversation id %q", conv)
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	m, err := s.convMeta(snap, conv)
	if err != nil {
		return 0, nil, err
	}
	if m.Kind != ConvGroup {
		return m.Kind, m.Members, nil
	}
	members, err := readIDs(snap, s.k.memberPrefix(conv))
	return m.Kind, members, err
}
