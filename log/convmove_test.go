package log

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// TestMoveConv walks a group from its home shard S to shard D through every step of a
// conversation move, through Tx.Move as the Raft commands make them, with sends, a receipt, a
// recall and a removal going on while it copies: the copy in chunks (one copied twice), the fence
// (its position is S's outbox head; new writes refused, a resend of an acked one still answered),
// the last copy, the activation (D's records of the group carry the barrier of S's fence), the
// drop and the settling. On D the group is S's — entries, msg_ids, members, read marks, recall
// flags, dedup records — and its conv_seq continues; every step repeated changes nothing.
func TestMoveConv(t *testing.T) {
	const move MoveID = 91
	var fence uint64 // the fence's position, once fenced: the activation carries it
	src := newMemShard(t, 1)
	dst := newMemShard(t, 2)
	idx := map[*Shard]uint64{}
	at := func(s *Shard) Stamp { idx[s]++; return Stamp{Index: idx[s], Time: int64(1000 + idx[s])} }
	step := func(s *Shard, op MoveOp, recs []Record, empty bool) (uint64, error) {
		t.Helper()
		var n uint64
		_, err := apply(t, s, at(s), func(tx *Tx) error {
			var err error
			n, err = tx.Move(Stamp{Index: idx[s], Time: 1_000_000}, &MoveStep{Op: op, Move: move, Conv: "g", From: 1, To: 2, Records: recs, SourceEmpty: empty, Fence: fence})
			return err
		})
		return n, err
	}
	mustStep := func(s *Shard, op MoveOp, recs []Record) uint64 {
		t.Helper()
		n, err := step(s, op, recs, false)
		if err != nil {
			t.Fatalf("move step %d on shard %d: %v", op, s.id, err)
		}
		return n
	}
	sends := map[string]AppendResult{}
	send := func(s *Shard, n int) {
		t.Helper()
		for range n {
			st := at(s)
			id := fmt.Sprint("m", s.id, "-", st.Index)
			sends[id] = appendOK(t, s, st, Append{Conv: "g", Sender: "ann", ClientMsgID: id, Kind: KindMessage, Body: []byte("hi")})
		}
	}
	appendOK(t, src, at(src), Append{Conv: "g", Sender: "ann", ClientMsgID: "create", Kind: KindGroupCreate, Members: []string{"bob", "carol"}})
	send(src, 6)
	firstMsg := sends["m1-2"].MsgID

	// D: begin. Reads and writes of g there are refused, not answered "no conversation".
	mustStep(dst, MoveBegin, nil)
	mustStep(dst, MoveBegin, nil)
	if _, err := dst.ReadConv("g", 0, 1, Limit{}); !errors.Is(err, ErrMoved) {
		t.Fatalf("read of a conversation moving in: %v, want ErrMoved", err)
	}
	if _, err := apply(t, dst, at(dst), func(tx *Tx) error {
		_, err := tx.Append(at(dst), &Append{Conv: "g", Sender: "ann", ClientMsgID: "x", Kind: KindGroupCreate})
		return err
	}); !errors.Is(err, ErrMoved) {
		t.Fatalf("a write to a conversation moving in: %v, want ErrMoved", err)
	}
	if _, err := step(src, MoveBegin, nil, false); !Rejected(err) {
		t.Fatalf("moving g into its own home: %v", err)
	}

	// Copy in chunks of 3, the second twice, to the head; then S takes a receipt, a recall of a
	// copied message and carol's removal, and the copy goes on to the head again.
	copyFrom := func(after Position, max int) (Position, bool) {
		t.Helper()
		var recs []Record
		_, last, done, err := src.ExportConv("g", after, max, func(r Record) error { recs = append(recs, r); return nil })
		if err != nil {
			t.Fatal(err)
		}
		mustStep(dst, MoveStage, recs)
		return last, done
	}
	last, _ := copyFrom(0, 3)
	copyFrom(last, 3)
	for done := false; !done; { // to the head: the members (carol among them) are staged
		last, done = copyFrom(last, 3)
	}
	appendOK(t, src, at(src), Append{Conv: "g", Sender: "bob", ClientMsgID: "r1", Kind: KindReceipt, ReadUpTo: 5})
	appendOK(t, src, at(src), Append{Conv: "g", Sender: "ann", ClientMsgID: "rc1", Kind: KindRecall, Target: firstMsg})
	appendOK(t, src, at(src), Append{Conv: "g", Sender: "carol", ClientMsgID: "bye", Kind: KindMemberRemove, Members: []string{"carol"}})
	send(src, 2)
	for done := false; !done; {
		last, done = copyFrom(last, 3)
	}

	// S: fence at its outbox head. A new write is refused; a resend of an acked one is answered.
	head := func() uint64 {
		t.Helper()
		o, err := src.Outbox()
		if err != nil {
			t.Fatal(err)
		}
		return o.Head
	}
	if fence = mustStep(src, MoveFence, nil); fence != head() {
		t.Fatalf("fence at %d, want the outbox head %d", fence, head())
	}
	refused := func(s *Shard, want error) {
		t.Helper()
		if _, err := apply(t, s, at(s), func(tx *Tx) error {
			_, err := tx.Append(at(s), &Append{Conv: "g", Sender: "ann", ClientMsgID: "new", Kind: KindMessage, Body: []byte("x")})
			return err
		}); !errors.Is(err, want) || !Rejected(err) {
			t.Fatalf("a send on shard %d: %v, want %v", s.id, err, want)
		}
	}
	refused(src, ErrMoving)
	if _, err := apply(t, src, at(src), func(tx *Tx) error { _, err := tx.TrimConv(at(src), "g", Retention{MaxCount: 1}); return err }); !errors.Is(err, ErrMoving) {
		t.Fatalf("a trim of the fenced conversation: %v, want ErrMoving", err)
	}
	if res := appendOK(t, src, at(src), Append{Conv: "g", Sender: "ann", ClientMsgID: "m1-3", Kind: KindMessage, Body: []byte("hi")}); !res.Duplicate || res.MsgID != sends["m1-3"].MsgID {
		t.Fatalf("a resend to the fenced source: %+v, want the original answer", res)
	}
	if f := mustStep(src, MoveFence, nil); f != head() {
		t.Fatalf("the fence repeated answered %d, want %d", f, head())
	}
	srcInfo, srcEntries := readAll(t, src, "g", true)
	srcMembers, _, err := src.MembersAfter("g", "ann", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []Position
	for seq := range srcInfo.Head + 2 {
		seqs = append(seqs, seq)
	}
	srcCounts, err := src.Receipts("g", "ann", seqs)
	if err != nil || srcCounts[5] != (ReceiptCount{ConvSeq: 5, Members: 2, Delivered: 1, Read: 1}) {
		t.Fatalf("counts on S: %+v, %v", srcCounts, err)
	}

	// The last copy rides with the activation, as the driver sends it; copy steps repeated after
	// it change nothing.
	var tail []Record
	if _, _, done, err := src.ExportConv("g", last, 0, func(r Record) error { tail = append(tail, r); return nil }); err != nil || !done {
		t.Fatalf("the last copy: done %v, %v", done, err)
	}
	if _, err := apply(t, dst, at(dst), func(tx *Tx) error {
		_, err := tx.Move(Stamp{Time: 1}, &MoveStep{Op: MoveActivate, Move: move, Conv: "g", From: 2, To: 2, Fence: 5, Records: tail})
		return err
	}); !Rejected(err) {
		t.Fatalf("an activation behind a barrier of its own shard: %v", err)
	}
	mustStep(dst, MoveActivate, tail)
	mustStep(dst, MoveActivate, tail)
	copyFrom(0, 0)
	if n := mustStep(dst, MoveResume, nil); n != ResumeActivated {
		t.Fatalf("a resume after the activation answered %d, want ResumeActivated", n)
	}

	info, entries := readAll(t, dst, "g", true)
	if info != srcInfo || !slices.EqualFunc(entries, srcEntries, func(a, b Entry) bool {
		return a.ConvSeq == b.ConvSeq && a.MsgID == b.MsgID && a.Kind == b.Kind
	}) {
		t.Fatalf("on D: %+v, %d entries; on S: %+v, %d entries", info, len(entries), srcInfo, len(srcEntries))
	}
	members, _, err := dst.MembersAfter("g", "ann", "", 10)
	if err != nil || !slices.Equal(members, srcMembers) || len(members) != 2 {
		t.Fatalf("members on D: %v, %v; on S: %v (carol left)", members, err, srcMembers)
	}
	if st, err := dst.Conversation("g", "bob"); err != nil || st.ReadMark != 5 || st.DeliveredMark != 5 {
		t.Fatalf("bob's read mark on D: %+v, %v", st, err)
	}
	// The histograms came along: D answers the counts S did (carol's removal included).
	if counts, err := dst.Receipts("g", "ann", seqs); err != nil || !slices.Equal(counts, srcCounts) {
		t.Fatalf("counts on D: %+v, %v; on S: %+v", counts, err, srcCounts)
	}
	// Dedup records came along: every acked send resent to D gets its original answer.
	for id, orig := range sends {
		res := appendOK(t, dst, at(dst), Append{Conv: "g", Sender: "ann", ClientMsgID: id, Kind: KindMessage, Body: []byte("hi")})
		if !res.Duplicate || res.MsgID != orig.MsgID || res.ConvSeq != orig.ConvSeq {
			t.Fatalf("resend of %s to D: %+v, want %+v", id, res, orig)
		}
	}
	// The recall flag came along; an old message can still be recalled on D by its msg_id.
	if _, err := apply(t, dst, at(dst), func(tx *Tx) error {
		_, err := tx.Append(Stamp{Index: idx[dst], Time: 1010}, &Append{Conv: "g", Sender: "ann", ClientMsgID: "rc2", Kind: KindRecall, Target: firstMsg})
		return err
	}); !errors.Is(err, ErrAlreadyRecalled) {
		t.Fatalf("recalling the recalled message again on D: %v", err)
	}
	st := at(dst)
	st.Time = 1010 // within the recall window of the messages sent at ~1000
	if res := appendOK(t, dst, st, Append{Conv: "g", Sender: "ann", ClientMsgID: "rc3", Kind: KindRecall, Target: sends["m1-3"].MsgID}); res.ConvSeq != srcInfo.Head+1 {
		t.Fatalf("recall on D at %d, want conv_seq %d", res.ConvSeq, srcInfo.Head+1)
	}
	res := appendOK(t, dst, at(dst), Append{Conv: "g", Sender: "bob", ClientMsgID: "after", Kind: KindMessage, Body: []byte("on D")})
	if res.ConvSeq != srcInfo.Head+2 || res.MsgID.Shard != 2 || res.Epoch != srcInfo.Epoch {
		t.Fatalf("first send on D: %+v, want conv_seq %d under epoch %d, a msg_id of shard 2", res, srcInfo.Head+2, srcInfo.Epoch)
	}
	if o, err := dst.Outbox(); err != nil || o.Head != 2 {
		t.Fatalf("D's outbox after two writes: %+v, %v", o, err)
	}
	items, err := dst.ReadOutbox(1, 0)
	if err != nil || len(items) != 2 || items[0].After != (Barrier{Source: 1, Pos: fence}) {
		t.Fatalf("D's outbox records of the group: %+v, %v; want them behind S's fence at %d", items, err, fence)
	}

	// S: drop. Its reads and writes of g answer ErrMoved; a resend is still answered by its
	// dedup record, which S keeps until it expires.
	if _, err := step(src, MoveActivate, nil, false); !Rejected(err) {
		t.Fatalf("activating on the source: %v", err)
	}
	mustStep(src, MoveDrop, nil)
	mustStep(src, MoveDrop, nil)
	if _, err := src.ReadConv("g", 0, 1, Limit{}); !errors.Is(err, ErrMoved) {
		t.Fatalf("read of a dropped conversation: %v, want ErrMoved", err)
	}
	if _, err := src.Conversation("g", "ann"); !errors.Is(err, ErrMoved) {
		t.Fatalf("conversation query after the drop: %v, want ErrMoved", err)
	}
	refused(src, ErrMoved)
	if f := mustStep(src, MoveFence, nil); f != fence {
		t.Fatalf("the fence asked again after the drop answered %d, want %d (a resumed driver needs it)", f, fence)
	}
	for _, tag := range []byte{tagConv, tagMember, tagCounts, tagConvEntry} {
		if n := countTable(t, src, tag); n != 0 {
			t.Errorf("table %#x holds %d keys on the source after the drop", tag, n)
		}
	}
	if n := countTable(t, dst, tagStaged); n != 0 {
		t.Errorf("D holds %d staged keys after the activation", n)
	}

	// Settled (S has delivered up to its fence everywhere): D's records go without the barrier.
	mustStep(dst, MoveSettle, nil)
	mustStep(dst, MoveSettle, nil)
	if items, err := dst.ReadOutbox(1, 0); err != nil || items[1].After != (Barrier{}) {
		t.Fatalf("D's outbox after the settling: %+v, %v", items, err)
	}
}

// TestDeliveryBarrier: a delivery whose entry waits behind another source's position is refused
// with ErrNotYet, changing nothing, until this shard's mark for that source reaches it; then the
// same batch applies.
func TestDeliveryBarrier(t *testing.T) {
	home := newMemShard(t, 1)
	y := newMemShard(t, 3)
	appendOK(t, home, Stamp{Index: 1, Time: 1000}, Append{Conv: "g", Sender: "ann", ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{"bob"}})
	b := outboxBatch(t, home, 0, 1, "bob")
	b.Items[0].After = Barrier{Source: 2, Pos: 5}
	// apply fails the test if a refused command left writes.
	if _, err := apply(t, y, Stamp{Index: 1, Time: 2000}, func(tx *Tx) error { _, err := tx.Deliver(Stamp{Time: 2000}, b); return err }); !errors.Is(err, ErrNotYet) || !Rejected(err) {
		t.Fatalf("a delivery behind an unreached barrier: %v, want ErrNotYet", err)
	}
	// Shard 2's deliveries up to 5 (nothing for this shard's users among them).
	mustApply(t, y, Stamp{Index: 2, Time: 2000}, func(tx *Tx) error {
		_, err := tx.Deliver(Stamp{Time: 2000}, &DeliveryBatch{Source: 2, Prev: 0, Last: 5})
		return err
	})
	mustApply(t, y, Stamp{Index: 3, Time: 2000}, func(tx *Tx) error { _, err := tx.Deliver(Stamp{Time: 2000}, b); return err })
	if info, err := y.UserInfo("bob"); err != nil || info.Head != 1 {
		t.Fatalf("bob after the barrier was reached: %+v, %v", info, err)
	}
	for i, bad := range []Barrier{{Source: 2}, {Pos: 3}, {Source: 1, Pos: 3}} {
		c := outboxBatch(t, home, 0, 1, "bob")
		c.Items[0].After = bad
		if _, err := apply(t, y, Stamp{Index: uint64(4 + i), Time: 2000}, func(tx *Tx) error { _, err := tx.Deliver(Stamp{Time: 2000}, c); return err }); !errors.Is(err, ErrInvalid) {
			t.Errorf("barrier %+v: %v, want refused as invalid", bad, err)
		}
	}
}

// TestMoveConvCancelAndEmpty: a canceled conversation move leaves nothing of the conversation on
// the destination and refuses its late steps; a conversation the source does not hold moves as
// an empty one (its first write creates it on the destination).
func TestMoveConvCancelAndEmpty(t *testing.T) {
	src := newMemShard(t, 1)
	dst := newMemShard(t, 2)
	appendOK(t, src, Stamp{Index: 1, Time: 1000}, Append{Conv: "g", Sender: "ann", ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{"bob"}})
	var recs []Record
	if _, _, done, err := src.ExportConv("g", 0, 0, func(r Record) error { recs = append(recs, r); return nil }); err != nil || !done {
		t.Fatal(done, err)
	}
	var i uint64
	do := func(op MoveOp, move MoveID, conv string, recs []Record, empty bool) error {
		i++
		_, err := apply(t, dst, Stamp{Index: i, Time: 2000}, func(tx *Tx) error {
			_, err := tx.Move(Stamp{Index: i, Time: 2000}, &MoveStep{Op: op, Move: move, Conv: conv, From: 1, Records: recs, SourceEmpty: empty, Fence: 1})
			return err
		})
		return err
	}
	for _, op := range []MoveOp{MoveBegin, MoveStage, MoveCancel, MoveCancel} {
		if err := do(op, 5, "g", recs, false); err != nil {
			t.Fatalf("step %d: %v", op, err)
		}
	}
	for _, tag := range []byte{tagConv, tagMember, tagConvEntry, tagStaged} {
		if n := countTable(t, dst, tag); n != 0 {
			t.Errorf("table %#x holds %d keys after the cancel", tag, n)
		}
	}
	for _, op := range []MoveOp{MoveStage, MoveBegin, MoveActivate} {
		if err := do(op, 5, "g", recs, false); !errors.Is(err, ErrInvalid) {
			t.Errorf("a late step %d of the canceled move: %v, want refused", op, err)
		}
	}
	if _, err := dst.ConvInfo("g"); !errors.Is(err, ErrNoConversation) {
		t.Errorf("g on the destination after the cancel: %v, want no conversation and no refusal", err)
	}
	if err := do(MoveCutover, 6, "g", nil, false); !errors.Is(err, ErrInvalid) {
		t.Errorf("a cutover of a conversation: %v, want refused", err)
	}

	// A conversation S does not hold: nothing staged, activated as empty, created on D.
	if err := do(MoveBegin, 7, "d:ann:bob", nil, false); err != nil {
		t.Fatal(err)
	}
	if err := do(MoveActivate, 7, "d:ann:bob", nil, false); !errors.Is(err, ErrInvalid) {
		t.Fatalf("activating with nothing staged: %v, want refused", err)
	}
	if err := do(MoveActivate, 7, "d:ann:bob", nil, true); err != nil { // with the fence's position (do)
		t.Fatal(err)
	}
	res := appendOK(t, dst, Stamp{Index: 99, Time: 3000}, Append{Conv: "d:ann:bob", Sender: "ann", ClientMsgID: "hi", Kind: KindMessage, Members: []string{"ann", "bob"}})
	if res.ConvSeq != 1 {
		t.Fatalf("first message of the moved direct conversation: %+v", res)
	}
}

// TestMoveMarkersAfterReopen: a shard reopened on its store still knows its move markers (they
// are looked up in memory first): a fenced conversation and a fenced user stay refused.
func TestMoveMarkersAfterReopen(t *testing.T) {
	db := newMemDB(t)
	s, err := OpenShard(db, 1)
	if err != nil {
		t.Fatal(err)
	}
	appendOK(t, s, Stamp{Index: 1, Time: 1000}, Append{Conv: "g", Sender: "ann", ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{"bob"}})
	mustApply(t, s, Stamp{Index: 2, Time: 1000}, func(tx *Tx) error { _, err := tx.FenceConv(3, "g"); return err })
	mustApply(t, s, Stamp{Index: 3, Time: 1000}, func(tx *Tx) error { return tx.FenceUser(4, "bob") })
	if s, err = OpenShard(db, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(t, s, Stamp{Index: 4, Time: 1000}, func(tx *Tx) error {
		_, err := tx.Append(Stamp{Index: 4, Time: 1000}, &Append{Conv: "g", Sender: "ann", ClientMsgID: "m", Kind: KindMessage, Body: []byte("x")})
		return err
	}); !errors.Is(err, ErrMoving) {
		t.Fatalf("a send to the fenced conversation after a reopen: %v, want ErrMoving", err)
	}
	if _, err := apply(t, s, Stamp{Index: 5, Time: 1000}, func(tx *Tx) error {
		return tx.SetCursor(Stamp{Index: 5, Time: 1000}, "bob", "phone", Cursor{Epoch: 1, Pos: 1})
	}); !errors.Is(err, ErrMoving) {
		t.Fatalf("a cursor write of the fenced user after a reopen: %v, want ErrMoving", err)
	}
}
