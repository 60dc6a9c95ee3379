package log

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// TestMoveUser walks a user's log from shard S to shard D through every step of a move, as the
// protocol of docs/MOVES.md runs them, with deliveries going on throughout: the copy in chunks
// (one resumed), a trim on the source after part of the log was copied, the source cutting over
// (its later entries held on D), the fence, the last copy and the activation, then the drop. The
// log on D is the source's, positions, epoch, cursors and group count unchanged, followed by what
// arrived meanwhile, contiguous; every step repeated changes nothing.
func TestMoveUser(t *testing.T) {
	const move MoveID = 77
	conv := newMemShard(t, 1) // homes the conversation: the source of every delivery
	src := newMemShard(t, 2)
	dst := newMemShard(t, 3)
	idx := map[*Shard]uint64{}
	at := func(s *Shard) Stamp { idx[s]++; return Stamp{Index: idx[s], Time: int64(1000 + idx[s])} }
	// deliver applies the conversation's outbox (prev, last] to s, bob's entries among it only
	// past cut (the source's cutover for this destination).
	deliverPast := func(s *Shard, prev, last, cut uint64) {
		t.Helper()
		b := outboxBatch(t, conv, prev, last, "bob")
		b.Items = slices.DeleteFunc(b.Items, func(d Delivery) bool { return d.Pos <= cut })
		mustApply(t, s, at(s), func(tx *Tx) error {
			_, err := tx.Deliver(Stamp{Time: 5000}, b)
			return err
		})
	}
	deliver := func(s *Shard, prev, last uint64) { t.Helper(); deliverPast(s, prev, last, 0) }
	send := func(n int) {
		t.Helper()
		for range n {
			st := at(conv)
			appendOK(t, conv, st, Append{Conv: "g", Sender: "ann", ClientMsgID: fmt.Sprint("m", st.Index), Kind: KindMessage, Body: []byte("hi")})
		}
	}
	st := at(conv)
	appendOK(t, conv, st, Append{Conv: "g", Sender: "ann", ClientMsgID: "create", Kind: KindGroupCreate, Members: []string{"bob"}})
	send(9)
	deliver(src, 0, 10)
	st = at(src)
	mustApply(t, src, st, func(tx *Tx) error {
		return tx.SetCursor(st, "bob", "phone", Cursor{Epoch: mustInfo(t, src).Epoch, Pos: 5})
	})

	// D: begin. A read of bob there is refused, not answered "empty".
	mustApply(t, dst, at(dst), func(tx *Tx) error { return tx.BeginMoveIn(move, "bob") })
	if _, err := dst.ReadUser("bob", 0, 1, Limit{}); !errors.Is(err, ErrMoved) {
		t.Fatalf("read of a user moving in: %v, want ErrMoved", err)
	}
	mustApply(t, dst, at(dst), func(tx *Tx) error { return tx.BeginMoveIn(move, "bob") }) // repeated
	if _, err := apply(t, dst, at(dst), func(tx *Tx) error { return tx.BeginMoveIn(move+1, "bob") }); !Rejected(err) {
		t.Fatalf("a second move of bob: %v", err)
	}
	if _, err := apply(t, src, at(src), func(tx *Tx) error { return tx.BeginMoveIn(move, "bob") }); !Rejected(err) {
		t.Fatalf("moving bob into the shard holding his log: %v", err)
	}

	// Copy in chunks of 4; the second chunk is copied twice (a resumed copy overlaps).
	copyFrom := func(after Position, max int) (Position, bool) {
		t.Helper()
		var recs []Record
		_, last, done, err := src.ExportUser("bob", after, max, func(r Record) error { recs = append(recs, r); return nil })
		if err != nil {
			t.Fatal(err)
		}
		mustApply(t, dst, at(dst), func(tx *Tx) error { return tx.StageUser(move, "bob", recs) })
		return last, done
	}
	last, _ := copyFrom(0, 4)
	copyFrom(last, 4)
	last, _ = copyFrom(last, 4)
	// The source trims entries 1-3 (copied already) and gets more; then it is copied to its head.
	mustApply(t, src, at(src), func(tx *Tx) error {
		_, err := tx.TrimUser(Stamp{Time: 5000}, "bob", Retention{MaxCount: 7})
		return err
	})
	for done := false; !done; {
		last, done = copyFrom(last, 4)
	}

	// Every source cuts over at outbox position 12: up to it to S, after it to D, which holds them.
	send(5)
	deliver(src, 10, 12)
	deliverPast(dst, 0, 15, 12)
	if _, err := apply(t, dst, at(dst), func(tx *Tx) error {
		return tx.SetCursor(Stamp{Time: 6000}, "bob", "phone", Cursor{Epoch: 1, Pos: 1})
	}); !errors.Is(err, ErrMoved) {
		t.Fatalf("a cursor write to a user moving in: %v, want ErrMoved", err)
	}

	// S: fence. Writes to bob are refused there from now on; reads still answer.
	mustApply(t, src, at(src), func(tx *Tx) error { return tx.FenceUser(move, "bob") })
	mustApply(t, src, at(src), func(tx *Tx) error { return tx.FenceUser(move, "bob") })
	epoch := mustInfo(t, src).Epoch
	for name, op := range map[string]func(*Tx) error{
		"cursor": func(tx *Tx) error { return tx.SetCursor(st, "bob", "phone", Cursor{Epoch: epoch, Pos: 6}) },
		"reset":  func(tx *Tx) error { _, err := tx.ResetUser(Stamp{Time: 6000}, "bob"); return err },
		"trim": func(tx *Tx) error {
			_, err := tx.TrimUser(Stamp{Time: 6000}, "bob", Retention{MaxCount: 1})
			return err
		},
		"deliver": func(tx *Tx) error { // to zed (first, not moving) and bob: nothing is written
			b := outboxBatch(t, conv, 12, 13, "bob")
			b.Items[0].Users = []string{"bob", "zed"}
			_, err := tx.Deliver(Stamp{Time: 6000}, b)
			return err
		},
	} {
		if _, err := apply(t, src, at(src), op); !errors.Is(err, ErrMoving) || !Rejected(err) {
			t.Errorf("%s on the fenced source: %v, want ErrMoving", name, err)
		}
	}
	srcInfo, srcEntries := readAll(t, src, "bob", false)
	srcCursors, err := src.Cursors("bob")
	if err != nil {
		t.Fatal(err)
	}
	srcGroups, err := src.UserGroups([]string{"bob"})
	if err != nil {
		t.Fatal(err)
	}

	// The last copy (the final meta and cursors), then the activation.
	if _, done := copyFrom(last, 0); !done {
		t.Fatal("the last copy did not reach the head")
	}
	var appended int
	mustApply(t, dst, at(dst), func(tx *Tx) error {
		var err error
		appended, err = tx.ActivateUser(Stamp{Time: 7000}, move, "bob", false)
		return err
	})
	if appended != 3 {
		t.Fatalf("activation appended %d held entries, want 3", appended)
	}
	mustApply(t, dst, at(dst), func(tx *Tx) error { _, err := tx.ActivateUser(Stamp{Time: 7000}, move, "bob", false); return err })
	send(1)
	deliver(dst, 15, 16) // now straight into the log

	info, entries := readAll(t, dst, "bob", false)
	if info.Epoch != srcInfo.Epoch || info.First != srcInfo.First || info.First != 4 || info.Head != srcInfo.Head+4 {
		t.Fatalf("on D: %+v; on S: %+v", info, srcInfo)
	}
	if !slices.EqualFunc(entries[:len(srcEntries)], srcEntries, func(a, b Entry) bool { return a.Seq == b.Seq && a.MsgID == b.MsgID }) {
		t.Fatal("D's log does not start with S's")
	}
	convLog := func(seq Position) Entry {
		_, all := readAll(t, conv, "g", true)
		return all[seq-1]
	}
	for i, e := range entries[len(srcEntries):] {
		if want := convLog(Position(13 + i)); e.MsgID != want.MsgID || e.Seq != srcInfo.Head+Position(i)+1 {
			t.Errorf("entry %d after the move: seq %d msg %v, want seq %d msg %v", i, e.Seq, e.MsgID, srcInfo.Head+Position(i)+1, want.MsgID)
		}
	}
	if cur, err := dst.Cursors("bob"); err != nil || !slices.Equal(cur, srcCursors) || len(cur) != 1 {
		t.Fatalf("cursors on D %+v (%v), on S %+v", cur, err, srcCursors)
	}
	if g, err := dst.UserGroups([]string{"bob"}); err != nil || !slices.Equal(g, srcGroups) || g[0] != 1 {
		t.Fatalf("groups on D %v (%v), on S %v", g, err, srcGroups)
	}
	st = at(dst)
	mustApply(t, dst, st, func(tx *Tx) error { return tx.SetCursor(st, "bob", "phone", Cursor{Epoch: info.Epoch, Pos: info.Head}) })
	if n := countTable(t, dst, tagUserEntry); n != int(info.Head-info.First+1) {
		t.Errorf("D holds %d entries of bob, want %d: trimmed ones came back", n, info.Head-info.First+1)
	}
	for _, tag := range []byte{tagStaged, tagPending, tagMoving} {
		if n := countTable(t, dst, tag); n != 0 {
			t.Errorf("table %#x of D holds %d keys after the activation", tag, n)
		}
	}

	// S: drop. Nothing of bob is left there; repeated, it changes nothing.
	mustApply(t, src, at(src), func(tx *Tx) error { return tx.DropUser(move, "bob") })
	mustApply(t, src, at(src), func(tx *Tx) error { return tx.DropUser(move, "bob") })
	for _, tag := range userTags {
		if n := countTable(t, src, tag); n != 0 {
			t.Errorf("table %#x of S holds %d keys after the drop", tag, n)
		}
	}
	if _, err := src.ReadUser("bob", info.Epoch, 1, Limit{}); !errors.Is(err, ErrMoved) {
		t.Fatalf("a read of bob on S after the drop: %v, want ErrMoved (not an empty log)", err)
	}
	// bob can move back: the tombstone gives way.
	mustApply(t, src, at(src), func(tx *Tx) error { return tx.BeginMoveIn(move+1, "bob") })
}

// TestMoveRefusals: the steps check who they apply to.
func TestMoveRefusals(t *testing.T) {
	s := newMemShard(t, 2)
	var i uint64
	at := func() Stamp { i++; return Stamp{Index: i, Time: 1000} }
	for name, op := range map[string]func(*Tx) error{
		"stage without begin":    func(tx *Tx) error { return tx.StageUser(5, "bob", nil) },
		"activate without begin": func(tx *Tx) error { _, err := tx.ActivateUser(at(), 5, "bob", false); return err },
		"begin of move 0":        func(tx *Tx) error { return tx.BeginMoveIn(0, "bob") },
		"fence of a bad id":      func(tx *Tx) error { return tx.FenceUser(5, "b ob") },
	} {
		if _, err := apply(t, s, at(), op); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	mustApply(t, s, at(), func(tx *Tx) error { return tx.BeginMoveIn(5, "bob") })
	for name, recs := range map[string][]Record{
		"another user's meta":  {{Key: []byte("\x20bobby\x00")}},
		"another user's entry": {{Key: []byte("\x21al\x00\x00\x00\x00\x00\x00\x00\x00\x01")}},
		"a conversation":       {{Key: []byte("\x10bob\x00")}},
		"a meta with a suffix": {{Key: []byte("\x20bob\x00x")}},
	} {
		if _, err := apply(t, s, at(), func(tx *Tx) error { return tx.StageUser(5, "bob", recs) }); !errors.Is(err, ErrInvalid) {
			t.Errorf("staging %s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := apply(t, s, at(), func(tx *Tx) error { _, err := tx.ActivateUser(at(), 5, "bob", false); return err }); !errors.Is(err, ErrInvalid) {
		t.Errorf("activation with nothing staged: %v, want ErrInvalid", err)
	}
	if _, err := apply(t, s, at(), func(tx *Tx) error { return tx.DropUser(5, "bob") }); !errors.Is(err, ErrInvalid) {
		t.Errorf("drop on the destination: %v, want ErrInvalid", err)
	}
}

func mustInfo(t *testing.T, s *Shard) LogInfo {
	t.Helper()
	info, err := s.UserInfo("bob")
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// TestCutover: a source's records of a moved user go to the old shard up to the cutover and to
// the new one after it, decided by position alone; a second move chains; a trim past a cutover
// prunes it but keeps where later records go.
func TestCutover(t *testing.T) {
	conv := newMemShard(t, 1)
	var i uint64
	at := func() Stamp { i++; return Stamp{Index: i, Time: int64(1000 + i)} }
	send := func(n int) {
		for range n {
			st := at()
			appendOK(t, conv, st, Append{Conv: "g", Sender: "ann", ClientMsgID: fmt.Sprint("m", st.Index), Kind: KindMessage, Body: []byte("x")})
		}
	}
	cut := func(move MoveID, from, to ShardID) (p uint64, err error) {
		_, aerr := apply(t, conv, at(), func(tx *Tx) error { p, err = tx.Cutover(move, "bob", from, to); return err })
		return p, errors.Join(err, aerr)
	}
	routes := func() []string {
		items, err := conv.ReadOutbox(1, 100)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range items {
			to, ok := it.Pinned["bob"]
			if _, ann := it.Pinned["ann"]; ann {
				t.Errorf("ann, who did not move, is pinned at %d", it.Pos)
			}
			if !ok {
				out = append(out, fmt.Sprintf("%d:map", it.Pos))
				continue
			}
			out = append(out, fmt.Sprintf("%d:%d", it.Pos, to))
		}
		return out
	}
	st := at()
	appendOK(t, conv, st, Append{Conv: "g", Sender: "ann", ClientMsgID: "create", Kind: KindGroupCreate, Members: []string{"bob"}})
	send(1)
	if got := routes(); !slices.Equal(got, []string{"1:map", "2:map"}) {
		t.Fatalf("before any move: %v", got)
	}
	if p, err := cut(5, 2, 3); err != nil || p != 2 {
		t.Fatalf("cutover: %d, %v", p, err)
	}
	send(2)
	if p, err := cut(5, 2, 3); err != nil || p != 2 { // repeated: the same position
		t.Fatalf("repeated cutover: %d, %v", p, err)
	}
	if _, err := cut(6, 2, 4); !errors.Is(err, ErrInvalid) { // bob's records go to 3 now, not 2
		t.Fatalf("cutover from the wrong shard: %v", err)
	}
	if p, err := cut(6, 3, 4); err != nil || p != 4 {
		t.Fatalf("second move's cutover: %d, %v", p, err)
	}
	send(1)
	want := []string{"1:2", "2:2", "3:3", "4:3", "5:4"}
	if got := routes(); !slices.Equal(got, want) {
		t.Fatalf("routes %v, want %v", got, want)
	}
	mustApply(t, conv, at(), func(tx *Tx) error { return tx.TrimOutbox(3) })
	items, err := conv.ReadOutbox(4, 10)
	if err != nil || len(items) != 2 || items[0].Pinned["bob"] != 3 || items[1].Pinned["bob"] != 4 {
		t.Fatalf("after the trim: %+v, %v", items, err)
	}
	v, _, err := getValue(conv.db, conv.k.cutover("bob"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := decodeCutover(v)
	if err != nil || len(c.steps) != 1 || c.steps[0] != (cutoverStep{upTo: 4, shard: 3}) || c.after != 4 {
		t.Fatalf("cutover after the trim: %+v, %v; want the first step pruned", c, err)
	}
	// Reopened, the shard still routes by its cutovers.
	reopened, err := OpenShard(conv.db, 1)
	if err != nil {
		t.Fatal(err)
	}
	if items, err := reopened.ReadOutbox(5, 10); err != nil || len(items) != 1 || items[0].Pinned["bob"] != 4 {
		t.Fatalf("reopened: %+v, %v", items, err)
	}
	// Every step pruned, the last move's cutover, repeated (a resumed driver), still answers its
	// position (it used to index the pruned steps and panic the state machine).
	mustApply(t, conv, at(), func(tx *Tx) error { return tx.TrimOutbox(5) })
	if p, err := cut(6, 3, 4); err != nil || p != 4 {
		t.Fatalf("the second move's cutover repeated after its step was pruned: %d, %v", p, err)
	}
}

// TestMoveUserWithoutLog: a user who has no log yet on the source (a new account pinned to a shard
// of its own before it receives anything) moves too; entries delivered to it meanwhile start its
// log on the destination, and without them its log starts there empty; a copy step resumed after
// the activation changes nothing.
func TestMoveUserWithoutLog(t *testing.T) {
	conv := newMemShard(t, 1)
	dst := newMemShard(t, 3)
	var ci, di uint64
	appendOK(t, conv, Stamp{Index: 1, Time: 1000}, Append{Conv: "g", Sender: "ann", ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{"bot"}})
	ci++
	mustApply(t, dst, Stamp{Index: 1, Time: 1000}, func(tx *Tx) error { return tx.BeginMoveIn(9, "bot") })
	mustApply(t, dst, Stamp{Index: 2, Time: 1000}, func(tx *Tx) error { return tx.BeginMoveIn(10, "idle") })
	di = 2
	mustApply(t, dst, Stamp{Index: di + 1, Time: 1000}, func(tx *Tx) error {
		_, err := tx.Deliver(Stamp{Time: 1000}, outboxBatch(t, conv, 0, ci, "bot"))
		return err
	})
	if _, err := apply(t, dst, Stamp{Index: di + 2, Time: 2000}, func(tx *Tx) error {
		_, err := tx.ActivateUser(Stamp{Time: 2000}, 9, "bot", false)
		return err
	}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("activation with nothing staged, not said empty: %v", err)
	}
	var n int
	mustApply(t, dst, Stamp{Index: di + 3, Time: 2000}, func(tx *Tx) error {
		var err error
		n, err = tx.ActivateUser(Stamp{Time: 2000}, 9, "bot", true)
		return err
	})
	if info, err := dst.UserInfo("bot"); err != nil || n != 1 || info.Head != 1 || info.First != 1 || info.Epoch == 0 {
		t.Fatalf("bot after activation: %d appended, %+v, %v", n, info, err)
	}
	mustApply(t, dst, Stamp{Index: di + 4, Time: 2000}, func(tx *Tx) error {
		_, err := tx.ActivateUser(Stamp{Time: 2000}, 10, "idle", true)
		return err
	})
	if info, err := dst.UserInfo("idle"); err != nil || info.Head != 0 || info.Epoch == 0 {
		t.Fatalf("idle after activation: %+v, %v; want an empty log", info, err)
	}
	before := stateSum(t, dst)
	for name, op := range map[string]func(*Tx) error{
		"stage": func(tx *Tx) error {
			return tx.StageUser(10, "idle", []Record{{Key: []byte("\x20idle\x00"), Value: []byte{1}}})
		},
		"restart": func(tx *Tx) error {
			if done, err := tx.RestartCopy(10, "idle"); err != nil || !done {
				return fmt.Errorf("restart after the activation: activated %v, %v; want it said", done, err)
			}
			return nil
		},
		"activate": func(tx *Tx) error {
			_, err := tx.ActivateUser(Stamp{Time: 3000}, 10, "idle", true)
			return err
		},
	} {
		di++
		if _, err := apply(t, dst, Stamp{Index: di + 10, Time: 3000}, op); err != nil {
			t.Fatalf("%s resumed after the activation: %v", name, err)
		}
	}
	if after := stateSum(t, dst); after[1] != before[1] {
		t.Fatalf("resumed copy steps changed the state: %v keys, then %v", before, after)
	}
}

// TestMoveCancel: a move canceled before the cutover leaves nothing of the user on the
// destination; a copy step of it that arrives late changes nothing, its begin is refused, and
// another move of the user may begin.
func TestMoveCancel(t *testing.T) {
	src := newMemShard(t, 2)
	dst := newMemShard(t, 3)
	conv := newMemShard(t, 1)
	appendOK(t, conv, Stamp{Index: 1, Time: 1000}, Append{Conv: "g", Sender: "ann", ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{"bob"}})
	mustApply(t, src, Stamp{Index: 1, Time: 1000}, func(tx *Tx) error {
		_, err := tx.Deliver(Stamp{Time: 1000}, outboxBatch(t, conv, 0, 1, "bob"))
		return err
	})
	var recs []Record
	if _, _, _, err := src.ExportUser("bob", 0, 0, func(r Record) error { recs = append(recs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	var i uint64
	at := func() Stamp { i++; return Stamp{Index: i, Time: 2000} }
	mustApply(t, dst, at(), func(tx *Tx) error { return tx.BeginMoveIn(5, "bob") })
	mustApply(t, dst, at(), func(tx *Tx) error { return tx.StageUser(5, "bob", recs) })
	mustApply(t, dst, at(), func(tx *Tx) error { return tx.CancelMoveIn(5, "bob") })
	mustApply(t, dst, at(), func(tx *Tx) error { return tx.CancelMoveIn(5, "bob") }) // repeated
	for _, tag := range []byte{tagUser, tagUserEntry, tagCursor, tagUserConv, tagStaged, tagPending} {
		if n := countTable(t, dst, tag); n != 0 {
			t.Errorf("table %#x holds %d keys after the cancel", tag, n)
		}
	}
	if _, err := apply(t, dst, at(), func(tx *Tx) error { return tx.StageUser(5, "bob", recs) }); !errors.Is(err, ErrInvalid) {
		t.Errorf("a late copy step of the canceled move: %v, want refused", err)
	}
	if _, err := apply(t, dst, at(), func(tx *Tx) error { return tx.BeginMoveIn(5, "bob") }); !errors.Is(err, ErrInvalid) {
		t.Errorf("a late begin of the canceled move: %v, want refused", err)
	}
	if info, err := dst.UserInfo("bob"); err != nil || info.Head != 0 {
		t.Errorf("bob on the destination after the cancel: %+v, %v; want no log and no refusal", info, err)
	}
	mustApply(t, dst, at(), func(tx *Tx) error { return tx.BeginMoveIn(6, "bob") })
}

// TestResumeCopy: a driver that takes over a move in its copy asks the destination where to go
// on from. What is staged is kept if the marker recorded the source's epoch now, and the copy
// goes on after the highest position staged; under another epoch (the log was reset) it is
// cleared and the copy starts over; once activated, the answer says so.
func TestResumeCopy(t *testing.T) {
	const move MoveID = 12
	conv := newMemShard(t, 1)
	src := newMemShard(t, 2)
	dst := newMemShard(t, 3)
	appendOK(t, conv, Stamp{Index: 1, Time: 1000}, Append{Conv: "g", Sender: "ann", ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{"bob"}})
	for i := range 9 {
		appendOK(t, conv, Stamp{Index: uint64(2 + i), Time: 1000}, Append{Conv: "g", Sender: "ann", ClientMsgID: fmt.Sprint("m", i), Kind: KindMessage, Body: []byte("x")})
	}
	mustApply(t, src, Stamp{Index: 1, Time: 1000}, func(tx *Tx) error {
		_, err := tx.Deliver(Stamp{Time: 1000}, outboxBatch(t, conv, 0, 10, "bob"))
		return err
	})
	epoch := mustInfo(t, src).Epoch
	var i uint64 = 10
	step := func(s MoveStep) uint64 {
		t.Helper()
		i++
		var n uint64
		mustApply(t, dst, Stamp{Index: i, Time: 2000}, func(tx *Tx) error {
			var err error
			s.Move, s.User = move, "bob"
			n, err = tx.Move(Stamp{Index: i, Time: 2000}, &s)
			return err
		})
		return n
	}
	copyChunk := func(after Position) Position {
		t.Helper()
		var recs []Record
		_, last, _, err := src.ExportUser("bob", after, 4, func(r Record) error { recs = append(recs, r); return nil })
		if err != nil {
			t.Fatal(err)
		}
		step(MoveStep{Op: MoveStage, Records: recs})
		return last
	}
	step(MoveStep{Op: MoveBegin})
	if from := step(MoveStep{Op: MoveResume, Epoch: epoch}); from != 0 {
		t.Fatalf("the first resume answered %d, want 0", from)
	}
	last := copyChunk(copyChunk(0))
	// A new driver: the staged part is kept.
	if from := step(MoveStep{Op: MoveResume, Epoch: epoch}); from != uint64(last) || last != 8 {
		t.Fatalf("a resume under the same epoch answered %d, want %d (8)", from, last)
	}
	// The source's log was reset: another epoch, and what was staged goes.
	if from := step(MoveStep{Op: MoveResume, Epoch: epoch + 1}); from != 0 {
		t.Fatalf("a resume under another epoch answered %d, want 0", from)
	}
	if n := countTable(t, dst, tagUserEntry); n != 0 {
		t.Fatalf("%d staged entries kept across a reset", n)
	}
	// Copy it all (under the first epoch again, as if the reset were undone, for the test's sake).
	step(MoveStep{Op: MoveResume, Epoch: epoch})
	var recs []Record
	if _, _, done, err := src.ExportUser("bob", 0, 0, func(r Record) error { recs = append(recs, r); return nil }); err != nil || !done {
		t.Fatal(done, err)
	}
	step(MoveStep{Op: MoveActivate, Records: recs})
	if n := step(MoveStep{Op: MoveResume, Epoch: epoch}); n != ResumeActivated {
		t.Fatalf("a resume after the activation answered %d, want ResumeActivated", n)
	}
	if info, err := dst.UserInfo("bob"); err != nil || info.Head != 10 || info.Epoch != epoch {
		t.Fatalf("bob on the destination: %+v, %v", info, err)
	}
}
