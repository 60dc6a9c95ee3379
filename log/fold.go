package log

import (
	"bytes"
	"crypto/sha256"
)

// Folding: a user log's copy that a later entry of the same log supersedes is rewritten, when
// that later entry is appended, as a stub that keeps its position, kind, ids, conversation
// position, sender, time and Target and drops its payload (Entry.Folded). A device that syncs
// past it later gets the stub — its position is answered explicitly, never skipped — and
// learns the state from the later entry; a device that stored the copy earlier keeps it, and
// its digest of the log is still the server's (Entry.BodyHash).
//
// What supersedes what, in one log (the fold index, table 0x27, remembers the last position of
// each, so folding is a point read and two writes, never a scan):
//
//	a receipt (kind 2)          the next receipt of the same reader in the same conversation
//	a delivered report (8)      the next delivered report of the same reader there
//	an edit (9)                 the next edit of the same message, or its recall (3)
//	a reaction (10)             the next reaction entry of the same reader, message and reaction
//
// Receipts and delivered reports only move marks forward and a reaction's last entry says
// whether it is on, so the later entry alone gives a device the state the earlier one would
// have; an edit's body is replaced by the next (and a recall withdraws them all: a folded edit
// of a recalled message keeps no text of it). Messages, recalls and membership entries are
// never folded. Conversation logs are not folded: History shows what happened.
//
//	0x27 | uid 0x00 | kind u8 | conv 0x00 | sender 0x00               receipt, delivered
//	0x27 | uid 0x00 | 9 | conv 0x00 | target msg_id(16)                edit (and recall)
//	0x27 | uid 0x00 | 10 | conv 0x00 | target(16) | sender 0x00 | reaction
//	                                                                 → position u64
//
// The table is the user's (moved with it, dropped with it: userTags). A position it names may
// have been trimmed since; folding then has nothing to do.

// tagFold is the table of the last foldable entry of each kind of supersession in a user log.
const tagFold byte = 0x27

func (k keys) foldPrefix(uid string) []byte {
	return appendID(k.table(tagFold, len(uid)+1), uid)
}

// foldKey returns the fold index key of e in uid's log, and whether e is folded when a later
// entry arrives (a recall has a key, to fold the edits before it, but is never folded itself).
func (k keys) foldKey(uid string, e *Entry) (key []byte, foldable bool) {
	var class byte
	switch e.Kind {
	case KindReceipt, KindDelivered, KindEdit, KindReaction:
		class, foldable = byte(e.Kind), true
	case KindRecall:
		class = byte(KindEdit)
	default:
		return nil, false
	}
	b := append(k.foldPrefix(uid), class)
	b = appendID(b, e.Conv)
	switch e.Kind {
	case KindReceipt, KindDelivered:
		b = appendID(b, e.Sender)
	case KindEdit, KindRecall:
		b = appendMsgID(b, e.Target)
	case KindReaction:
		b = append(appendID(appendMsgID(b, e.Target), e.Sender), e.Reaction...)
	}
	return b, foldable
}

// foldSuperseded folds the copy in uid's log that e, just appended at e.Seq, supersedes, if
// any, and records e as the one a later entry will fold.
func (t *Tx) foldSuperseded(uid string, e *Entry) error {
	key, foldable := t.s.k.foldKey(uid, e)
	if key == nil {
		return nil
	}
	prev, ok, err := getUint(t.b, key)
	if err != nil {
		return err
	}
	if ok && Position(prev) < e.Seq {
		if err := t.fold(uid, key, Position(prev), e.Seq); err != nil {
			return err
		}
	}
	if !foldable {
		return t.del(key) // nothing is left to fold, and the recall itself stays
	}
	return t.set(key, encodeUint(uint64(e.Seq)))
}

// fold rewrites the entry at pos in uid's log, recorded under the fold index key, as a stub
// superseded by the entry at by.
func (t *Tx) fold(uid string, key []byte, pos, by Position) error {
	k := t.s.k.userEntry(uid, pos)
	v, ok, err := getValue(t.b, k)
	if err != nil || !ok {
		return err // trimmed since: nothing to fold
	}
	old, err := decodeEntry(v, pos)
	if err != nil || old.Folded != 0 {
		return err
	}
	if oldKey, foldable := t.s.k.foldKey(uid, &old); !foldable || !bytes.Equal(oldKey, key) {
		// Not the entry the index recorded: only an index outliving its log could bring this
		// about (ResetUser drops it). Folding it would drop what a device needs, and folding
		// is only a saving: the entry stays whole.
		return nil
	}
	stub := Entry{Kind: old.Kind, MsgID: old.MsgID, Conv: old.Conv, ConvSeq: old.ConvSeq, Sender: old.Sender,
		Time: old.Time, Target: old.Target, Folded: by}
	if len(old.Body) > 0 {
		h := sha256.Sum256(old.Body)
		stub.BodyHash = h[:]
	}
	return t.set(k, encodeEntry(&stub))
}
