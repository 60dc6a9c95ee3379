package log

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Moving a conversation to another shard: the storage half of docs/MOVES.md, "Moving a
// conversation". A conversation has one writer, its home shard S, and its entries leave through
// S's outbox; so instead of routing per source, as a user's move does, its move fences it on S at
// an outbox position f and makes D's deliveries of it wait, at every destination, behind S's
// deliveries up to f (a barrier): no destination can apply a new entry of the conversation
// before its old ones, and the conversation's writers wait only for the fence and the last copy,
// not for S's fan-out. Each step is a Tx operation, idempotent per move:
//
//	D  BeginConvIn     conv is moving in under move: reads and writes of it here are refused
//	                   (ErrMoved)
//	D  StageConv       records exported from S (ExportConv) are written, invisible behind the
//	                   marker; the conversation's meta waits under the move's staging key
//	S  FenceConv       conv's writes are refused (ErrMoving); it returns the outbox position f
//	                   every record of conv is at or before
//	D  ActivateConv    the staged meta becomes conv's, conv_seq continuing, and its records in
//	                   D's outbox carry the barrier (S, f) (OutboxItem.After): a destination
//	                   applies them once its mark for S has reached f (Tx.Deliver, ErrNotYet)
//	S  DropConv        conv's meta, members and entries go; a tombstone makes its reads answer
//	                   ErrMoved
//	D  SettleConv      S's fan-out has delivered up to f everywhere: the barrier goes
//
// Its msg_id index entries and dedup records are copied with its messages (msgRef names the
// dedup record of the send), and on S they are left, not deleted: msg_ids are never reused, and
// dedup records expire with their window, while deleting them one by one would make the drop of
// a long history one very large Raft command. msg_ids keep naming S, which stays their source.
//
// Keys (after move.go's):
//
//	0x64 | conv 0x00   the conversation's move marker (moveMarker; pending holds, on S, the fence
//	                   position f)
//	0x65 | conv 0x00   a moved-in conversation's barrier: source u32 | pos u64
const (
	tagConvMoving byte = 0x64
	tagBarrier    byte = 0x65
)

func (k keys) barrier(conv string) []byte { return appendID(k.table(tagBarrier, len(conv)+1), conv) }

func encodeBarrier(b Barrier) []byte {
	v := binary.BigEndian.AppendUint32([]byte{valueV1}, uint32(b.Source))
	return binary.BigEndian.AppendUint64(v, b.Pos)
}

func decodeBarrier(v []byte) (Barrier, error) {
	if len(v) != 13 || v[0] != valueV1 {
		return Barrier{}, corruptf("barrier of %d bytes", len(v))
	}
	b := Barrier{Source: ShardID(binary.BigEndian.Uint32(v[1:])), Pos: binary.BigEndian.Uint64(v[5:])}
	if b.Source == 0 || b.Pos == 0 {
		return Barrier{}, corruptf("barrier %+v", b)
	}
	return b, nil
}

// readBarriers returns every moved-in conversation's barrier from r, or nil if the shard has none.
func (s *Shard) readBarriers(r pebble.Reader) (map[string]Barrier, error) {
	if !s.barriers.Load() {
		return nil, nil
	}
	return readIDTable(r, s.k, tagBarrier, decodeBarrier)
}

func (k keys) convMoving(conv string) []byte {
	return appendID(k.table(tagConvMoving, len(conv)+1), conv)
}

// convMove returns conv's move marker, if any, from this Tx's writes or the shard's state.
func (t *Tx) convMove(conv string) (moveMarker, bool, error) {
	return t.marker(t.s.k.convMoving(conv))
}

// servesConv refuses with ErrMoved a read of conv while it is moving in here (not complete yet)
// or after it moved out; a fenced conversation is final and is read as usual.
func (s *Shard) servesConv(r pebble.Reader, conv string) error {
	if !s.anyMoves() { // before the marker's key is built: every read of a conversation comes here
		return nil
	}
	return s.serves(r, s.k.convMoving(conv), "conversation", conv)
}

// convMeta returns conv's meta from r, for a read: ErrNoConversation if there is no such
// conversation, ErrMoved if it is not served here (servesConv).
func (s *Shard) convMeta(r pebble.Reader, conv string) (logMeta, error) {
	if err := s.servesConv(r, conv); err != nil {
		return logMeta{}, err
	}
	m, ok, err := getLogMeta(r, s.k.conv(conv))
	if err == nil && !ok {
		err = ErrNoConversation
	}
	return m, err
}

// checkConvNotMoving refuses a write to conv while it is moving: out (fenced: ErrMoving) or in,
// or gone (not served here: ErrMoved).
func (t *Tx) checkConvNotMoving(conv string) error {
	if !t.s.anyMoves() { // before the marker's key is built: every send comes here
		return nil
	}
	return t.refuseMoving(t.s.k.convMoving(conv), "conversation", conv)
}

// moveConv makes the conversation step r names (Tx.Move).
func (t *Tx) moveConv(st Stamp, r *MoveStep) (uint64, error) {
	if !ValidID(r.Conv) || r.Move == 0 {
		return 0, invalidf("move: bad conversation id %q or move 0", r.Conv)
	}
	switch r.Op {
	case MoveBegin:
		return 0, t.BeginConvIn(r.Move, r.Conv)
	case MoveStage:
		return 0, t.StageConv(st, r.Move, r.Conv, r.Records)
	case MoveFence:
		return t.FenceConv(r.Move, r.Conv)
	case MoveActivate:
		after := Barrier{Source: r.From, Pos: r.Fence}
		if len(r.Records) > 0 { // the copy's last records, staged in the same command
			err := t.validBarrier(r.Conv, after)
			if err == nil {
				err = t.checkStagedMeta(r.Move, t.s.k.convMoving(r.Conv), t.s.k.conv(r.Conv), r.Records, r.SourceEmpty, fmt.Sprintf("conversation %q", r.Conv))
			}
			if err == nil {
				err = t.StageConv(st, r.Move, r.Conv, r.Records)
			}
			if err != nil {
				return 0, err
			}
		}
		return 0, t.ActivateConv(r.Move, r.Conv, r.SourceEmpty, after)
	case MoveSettle:
		return 0, t.SettleConv(r.Move, r.Conv)
	case MoveDrop:
		return 0, t.DropConv(r.Move, r.Conv)
	case MoveResume:
		return resumeResult(t.resumeCopy(r.Move, t.s.k.convMoving(r.Conv), t.s.k.convEntryPrefix(r.Conv), r.Epoch,
			func() (bool, error) { return t.RestartConvCopy(r.Move, r.Conv) }))
	case MoveCancel:
		return 0, t.CancelConvIn(r.Move, r.Conv)
	}
	return 0, invalidf("move step %d does not apply to a conversation", r.Op)
}

// BeginConvIn makes this shard the destination of move for conv: until ActivateConv, reads and
// writes of conv here are refused with ErrMoved. A conversation that exists here, or that moves
// under another move, is refused. Repeating it changes nothing.
func (t *Tx) BeginConvIn(move MoveID, conv string) error {
	return t.beginMoveIn(move, t.s.k.convMoving(conv), t.s.k.conv(conv), fmt.Sprintf("conversation %q", conv))
}

// convActivated reports whether conv, without a move marker here (marked false), exists here:
// on a destination, the sign that its move was activated, so that resumed copy steps change
// nothing.
func (t *Tx) convActivated(conv string, marked bool) (bool, error) {
	if marked {
		return false, nil
	}
	_, has, err := t.logMeta(t.s.k.conv(conv))
	return has, err
}

// movingInConv checks that conv is moving in here under move, for a copy step; done reports
// that it was activated already, so the step has nothing to do.
func (t *Tx) movingInConv(move MoveID, conv, step string) (done bool, err error) {
	m, ok, err := t.convMove(conv)
	if err != nil {
		return false, err
	}
	if done, err := t.convActivated(conv, ok); err != nil || done {
		return done, err
	}
	if !ok || m.move != move || m.role != movingIn {
		return false, invalidf("%s: conversation %q is not moving in under move %d", step, conv, move)
	}
	return false, nil
}

// StageConv writes recs, exported from the source by ExportConv, for move. Entries, members,
// msg_id index entries and dedup records are written where they will stay (the marker keeps
// reads and writes of conv away until ActivateConv); the conversation's meta is staged, since
// its presence is what makes conv exist here. The records of one export that reaches the head
// carry the meta and the whole member list: the members staged before are replaced by them, so
// a member removed on the source meanwhile is not left behind. A dedup record the destination
// holds live under the same key (the same sender reusing a client_msg_id in another
// conversation of this shard) is kept, not replaced.
func (t *Tx) StageConv(st Stamp, move MoveID, conv string, recs []Record) error {
	if done, err := t.movingInConv(move, conv, "stage"); err != nil || done {
		return err
	}
	k := t.s.k
	metaKey := k.conv(conv)[len(k.prefix):]
	final := false
	for _, r := range recs {
		ok, err := convRecord(r, conv)
		if err != nil {
			return err
		}
		if !ok {
			return invalidf("stage: record %x is not one of conversation %q's", r.Key, conv)
		}
		final = final || slices.Equal(r.Key, metaKey)
	}
	if final {
		if err := t.deletePrefixes(k.memberPrefix(conv), k.countPrefix(conv)); err != nil {
			return err
		}
	}
	staged := k.stagedPrefix(move)
	for _, r := range recs {
		key := append(slices.Clip(k.prefix[:]), r.Key...)
		switch r.Key[0] {
		case tagConv:
			key = append(slices.Clip(staged), r.Key...)
		case tagDedup:
			if err := t.stageDedup(st, key, r); err != nil {
				return err
			}
			continue
		}
		if err := t.set(key, r.Value); err != nil {
			return err
		}
	}
	return nil
}

// stageDedup writes a copied dedup record and its expiry index entry, unless this shard holds a
// live record under the key (see StageConv).
func (t *Tx) stageDedup(st Stamp, key []byte, r Record) error {
	rec, err := decodeDedupRecord(r.Value)
	if err != nil {
		return err
	}
	suffix := r.Key[1:]
	if v, ok, err := getValue(t.b, key); err != nil {
		return err
	} else if ok {
		cur, err := decodeDedupRecord(v)
		if err != nil {
			return err
		}
		if cur.Expires > st.Time && cur.Result.MsgID != rec.Result.MsgID {
			return nil
		}
		if err := t.del(t.s.k.dedupByExp(cur.Expires, suffix)); err != nil {
			return err
		}
	}
	if err := t.set(key, r.Value); err != nil {
		return err
	}
	return t.set(t.s.k.dedupByExp(rec.Expires, suffix), nil)
}

// convRecord reports whether r (its key without the shard prefix) is one of conv's records: its
// meta, a member, a histogram bucket, an entry, a msg_id index entry naming conv, or a dedup
// record.
func convRecord(r Record, conv string) (bool, error) {
	if len(r.Key) < 2 {
		return false, nil
	}
	byConv := func() bool {
		return len(r.Key) >= len(conv)+2 && string(r.Key[1:1+len(conv)]) == conv && r.Key[1+len(conv)] == 0
	}
	switch r.Key[0] {
	case tagConv:
		return byConv() && len(r.Key) == len(conv)+2, nil
	case tagMember:
		return byConv() && len(r.Key) > len(conv)+2, nil
	case tagCounts:
		return byConv() && len(r.Key) == len(conv)+12, nil
	case tagConvEntry:
		return byConv() && len(r.Key) == len(conv)+10, nil
	case tagMsgIndex:
		ref, err := decodeMsgRef(r.Value)
		return err == nil && len(r.Key) == 17 && ref.Conv == conv, err
	case tagDedup:
		_, err := decodeDedupRecord(r.Value)
		return err == nil, err
	}
	return false, nil
}

// dropConvState deletes conv's meta, members and entries from this shard, for a move that took it
// elsewhere (DropConv, DropRange).
func (t *Tx) dropConvState(conv string) error {
	if err := t.deleteConvRecords(conv); err != nil {
		return err
	}
	return t.dropMeta(t.s.k.conv(conv))
}

// deleteConvRecords deletes conv's members, histograms and entries (not its meta).
func (t *Tx) deleteConvRecords(conv string) error {
	return t.deletePrefixes(t.s.k.memberPrefix(conv), t.s.k.countPrefix(conv), t.s.k.convEntryPrefix(conv))
}

// RestartConvCopy drops what move has staged for conv (its meta, members and entries), so that a
// copy resumed by a new driver starts from a clean slate. It is refused unless conv is moving in
// under move; activated reports, changing nothing, that conv was activated here already: a
// driver resumed after the activation only switches the map.
func (t *Tx) RestartConvCopy(move MoveID, conv string) (activated bool, err error) {
	if done, err := t.movingInConv(move, conv, "restart copy"); err != nil || done {
		return done, err
	}
	if err := t.del(t.s.k.stagedMeta(move, t.s.k.conv(conv))); err != nil {
		return false, err
	}
	return false, t.deleteConvRecords(conv)
}

// CancelConvIn undoes move on the destination before its fence: what was copied goes, and the
// marker says the move was canceled, so that a copy step still in flight changes nothing. It is
// refused once conv is activated here; repeating it changes nothing.
func (t *Tx) CancelConvIn(move MoveID, conv string) error {
	return t.cancelMoveIn(move, t.s.k.convMoving(conv), fmt.Sprintf("conversation %q", conv),
		func() (bool, error) { return t.convActivated(conv, false) },
		func() error { _, err := t.RestartConvCopy(move, conv); return err })
}

// FenceConv makes this shard the source of move for conv: from now on conv's sends, receipts,
// recalls, membership changes and trims are refused with ErrMoving, and its state here is final.
// It returns the outbox position every record of conv is at or before; once the fan-out has
// delivered up to it, nothing of conv is left to leave this shard. Repeating it returns the same.
func (t *Tx) FenceConv(move MoveID, conv string) (uint64, error) {
	m, ok, err := t.convMove(conv)
	switch {
	case err != nil:
		return 0, err
	case ok && m.move == move && (m.role == movingOut || m.role == movedOut):
		return m.pending, nil
	case ok && m.role != canceled:
		return 0, invalidf("conversation %q is already moving (move %d)", conv, m.move)
	}
	info, err := t.outboxInfo()
	if err != nil {
		return 0, err
	}
	return info.Head, t.setMarker(t.s.k.convMoving(conv), moveMarker{move: move, role: movingOut, pending: info.Head})
}

// ActivateConv completes move on the destination: conv's staged meta becomes its own (entries
// below its first position, trimmed on the source meanwhile, are left out) and conv is served
// here, its conv_seq continuing from the source's head, its records in this shard's outbox held
// back at every destination behind after, the source's fence (SettleConv lifts it). It is
// refused unless conv is moving in under move with its meta staged — or, with sourceEmpty, with
// nothing staged: the source held no such conversation, and it is created here when first
// written. Repeating it changes nothing.
func (t *Tx) ActivateConv(move MoveID, conv string, sourceEmpty bool, after Barrier) error {
	if done, err := t.movingInConv(move, conv, "activate"); err != nil || done {
		return err
	}
	if err := t.validBarrier(conv, after); err != nil {
		return err
	}
	k := t.s.k
	staged := k.stagedPrefix(move)
	metaKey := k.conv(conv)
	mv, has, err := getValue(t.b, append(slices.Clip(staged), metaKey[len(k.prefix):]...))
	switch {
	case err != nil:
		return err
	case has && sourceEmpty:
		return invalidf("activate: conversation %q is staged, but the source was said to hold none", conv)
	case !has && !sourceEmpty:
		return invalidf("activate: conversation %q's meta is not staged: the copy is incomplete", conv)
	}
	if has {
		meta, err := decodeLogMeta(mv)
		if err != nil {
			return err
		}
		if meta.First > 1 {
			p := k.convEntryPrefix(conv)
			if err := t.b.DeleteRange(p, entryKey(p, meta.First), nil); err != nil {
				return fmt.Errorf("log: write: %w", err)
			}
		}
		if err := t.putLogMeta(metaKey, meta); err != nil {
			return err
		}
	}
	if err := t.deletePrefixes(staged); err != nil {
		return err
	}
	if after.Pos > 0 { // 0: the source's outbox never held a record, so nothing comes first
		t.s.barriers.Store(true) // before the barrier is visible to a read of the outbox
		t.routed = true
		if err := t.set(k.barrier(conv), encodeBarrier(after)); err != nil {
			return err
		}
	}
	return t.del(k.convMoving(conv))
}

// validBarrier refuses the barrier after for conv's activation here unless it names another shard
// (its position may be 0: that shard's outbox never held a record).
func (t *Tx) validBarrier(conv string, after Barrier) error {
	if after.Source == 0 || after.Source == t.s.id {
		return invalidf("activate: conversation %q needs its source's fence position, not %+v", conv, after)
	}
	return nil
}

// SettleConv lifts conv's barrier once the source's fan-out has delivered everything up to its
// fence to every destination: from then on its records are delivered like any others (those
// read before still carry it, which by then holds nothing back). It is refused while conv is
// still moving in; without a barrier it changes nothing.
func (t *Tx) SettleConv(move MoveID, conv string) error {
	if m, ok, err := t.convMove(conv); err != nil {
		return err
	} else if ok && m.move == move && m.role == movingIn {
		return invalidf("settle: conversation %q is not activated under move %d yet", conv, move)
	}
	return t.del(t.s.k.barrier(conv))
}

// DropConv deletes conv's meta, members and entries from this shard, the source of move, once
// the move has switched, keeping a tombstone: reads and writes of conv here answer ErrMoved
// from then on. It is refused unless conv is fenced under move; repeating it changes nothing.
func (t *Tx) DropConv(move MoveID, conv string) error {
	k := t.s.k
	m, ok, err := t.convMove(conv)
	switch {
	case err != nil:
		return err
	case ok && m.move == move && m.role == movedOut:
		return nil
	case !ok || m.move != move || m.role != movingOut:
		return invalidf("drop: conversation %q is not moving out under move %d", conv, move)
	}
	if err := t.dropConvState(conv); err != nil {
		return err
	}
	m.role = movedOut
	return t.setMarker(k.convMoving(conv), m)
}

// ExportConv passes fn conv's records from one consistent view of this shard, like ExportUser:
// its entries with conv_seqs above after (at most limit of them; limit ≤ 0: all), each with its
// msg_id index entry and its send's dedup record (and a recall with its target's index entry,
// whose recalled flag it set), then, when they reach the head, conv's meta, every member and its histograms. It
// returns the conversation's epoch (0: no such conversation), the last conv_seq passed and
// whether it reached the head.
func (s *Shard) ExportConv(conv string, after Position, limit int, fn func(Record) error) (epoch Epoch, last Position, done bool, err error) {
	if !ValidID(conv) {
		return 0, 0, false, invalidf("bad conversation id %q", conv)
	}
	k := s.k
	// withIndex passes the msg_id index entry of id and, if it names it and dedupToo, the dedup
	// record of the send that wrote id.
	withIndex := func(r pebble.Reader, emit func(key, val []byte) error, id MsgID, dedupToo bool) error {
		key := k.msgIndex(id)
		v, ok, err := getValue(r, key)
		if err != nil || !ok {
			return err
		}
		ref, err := decodeMsgRef(v)
		if err != nil {
			return err
		}
		if err := emit(key, v); err != nil || !dedupToo || len(ref.Dedup) == 0 {
			return err
		}
		dk := k.dedup(ref.Dedup)
		dv, ok, err := getValue(r, dk)
		if err != nil || !ok {
			return err
		}
		if rec, err := decodeDedupRecord(dv); err != nil || rec.Result.MsgID != id {
			return err // a later request's record under the same key: not this send's
		}
		return emit(dk, dv)
	}
	with := func(r pebble.Reader, emit func(key, val []byte) error, _, val []byte, pos Position) error {
		e, err := decodeEntry(val, pos)
		if err == nil {
			err = withIndex(r, emit, e.MsgID, true)
		}
		if err == nil && e.Kind == KindRecall {
			err = withIndex(r, emit, e.Target, false)
		}
		return err
	}
	return s.export(exportSpec{meta: k.conv(conv), entries: k.convEntryPrefix(conv), final: [][]byte{k.memberPrefix(conv), k.countPrefix(conv)}, with: with},
		after, limit, fn)
}
