package log

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
)

// idIn returns the first id prefix0, prefix1, … whose slot (by slot) is in span, or out of it.
func idIn(t *testing.T, prefix string, slot func(string) int, span SlotSpan, in bool) string {
	t.Helper()
	for i := range 10_000 {
		if id := fmt.Sprint(prefix, i); span.Contains(slot(id)) == in {
			return id
		}
	}
	t.Fatal("no id found")
	return ""
}

// TestMoveSlots walks the upper half of shard S's slots to shard D through every step of a slot
// move, with S homing the conversations and holding the users, sends and deliveries going on
// throughout: the copy by enumeration, the cutover (later entries of the range's users held on
// D), the fence (the range's writes refused on S, the rest served), a key created during the
// copy found by the pass after the fence, the activation (users' logs contiguous, conv_seqs
// continuing, the range's conversations behind S's fence at every destination), the settle and
// the chunked drop. Every step repeated changes nothing, and a reopened shard keeps its range
// markers.
func TestMoveSlots(t *testing.T) {
	const move MoveID = 90
	span := SlotSpan{First: 2048, Last: NumSlots - 1}
	dbS := newMemDB(t)
	src, err := OpenShard(dbS, 2)
	if err != nil {
		t.Fatal(err)
	}
	dst := newMemShard(t, 3)
	idx := map[*Shard]uint64{}
	at := func(s *Shard) Stamp { idx[s]++; return Stamp{Index: idx[s], Time: int64(1000 + idx[s])} }
	in1, in2, late := idIn(t, "in", UserSlot, span, true), idIn(t, "jn", UserSlot, span, true), idIn(t, "late", UserSlot, span, true)
	out := idIn(t, "out", UserSlot, span, false)
	gin, gout := idIn(t, "gin", ConvSlot, span, true), idIn(t, "gout", ConvSlot, span, false)
	step := rangeStep(t, at, move, span)
	mustStep := func(s *Shard, r MoveStep) uint64 {
		t.Helper()
		res, err := step(s, r)
		if err != nil {
			t.Fatalf("step %d on shard %d: %v", r.Op, s.ID(), err)
		}
		return res
	}
	send := func(conv string, n int) {
		t.Helper()
		for range n {
			st := at(src)
			appendOK(t, src, st, Append{Conv: conv, Sender: out, ClientMsgID: fmt.Sprint("m", st.Index), Kind: KindMessage, Body: []byte("hi")})
		}
	}
	// deliver applies S's outbox (prev, last] to s, the recipients routed to s: by the record's
	// pinning if it has one, else to S (the slot table before the switch).
	var marks = map[ShardID]uint64{}
	deliver := func(s *Shard) {
		t.Helper()
		info, err := src.Outbox()
		if err != nil {
			t.Fatal(err)
		}
		prev := marks[s.ID()]
		if info.Head <= prev {
			return
		}
		items, err := src.ReadOutbox(prev+1, int(info.Head-prev))
		if err != nil {
			t.Fatal(err)
		}
		b := &DeliveryBatch{Source: src.ID(), Prev: prev, Last: info.Head}
		for _, it := range items {
			var users []string
			for _, u := range it.Recipients {
				to, ok := it.Pinned[u]
				if !ok {
					to = src.ID()
				}
				if to == s.ID() {
					users = append(users, u)
				}
			}
			if len(users) > 0 {
				b.Items = append(b.Items, Delivery{Pos: it.Pos, Users: users, Entry: it.Entry.CopyFor(users), After: it.After})
			}
		}
		mustApply(t, s, at(s), func(tx *Tx) error { _, err := tx.Deliver(Stamp{Time: 5000}, b); return err })
		marks[s.ID()] = info.Head
	}
	st := at(src)
	appendOK(t, src, st, Append{Conv: gin, Sender: out, ClientMsgID: "c1", Kind: KindGroupCreate, Members: []string{in1, in2}})
	st = at(src)
	appendOK(t, src, st, Append{Conv: gout, Sender: out, ClientMsgID: "c2", Kind: KindGroupCreate, Members: []string{in1}})
	send(gin, 4)
	send(gout, 3)
	deliver(src)
	st = at(src)
	mustApply(t, src, st, func(tx *Tx) error {
		return tx.SetCursor(st, in1, "phone", Cursor{Epoch: userInfo(t, src, in1).Epoch, Pos: 3})
	})

	// D: begin; the range's keys are not served there, the others are not D's business.
	mustStep(dst, MoveStep{Op: MoveBegin, From: src.ID()})
	mustStep(dst, MoveStep{Op: MoveBegin, From: src.ID()})
	if _, err := dst.ReadUser(in1, 0, 1, Limit{}); !errors.Is(err, ErrMoved) {
		t.Fatalf("read of a user of a range moving in: %v, want ErrMoved", err)
	}
	// The copy: every key of the range S holds, by enumeration.
	users, convs, err := src.KeysInSlots(span)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(users, sorted(in1, in2)) || !slices.Equal(convs, []string{gin}) {
		t.Fatalf("keys in slots: users %v convs %v, want [%s %s] [%s]", users, convs, in1, in2, gin)
	}
	copied := map[string]Position{}
	copyKeys := func(users, convs []string, final *MoveStep) {
		t.Helper()
		var batch []MoveKey
		for _, k := range append(slices.Clone(users), convs...) {
			mk := MoveKey{User: k}
			export := src.ExportUser
			if slices.Contains(convs, k) {
				mk, export = MoveKey{Conv: k}, src.ExportConv
			}
			after, seen := copied[k]
			mk.Restart = !seen
			_, last, done, err := export(k, after, 0, func(r Record) error { mk.Records = append(mk.Records, r); return nil })
			if err != nil || !done {
				t.Fatalf("export %s: done=%v %v", k, done, err)
			}
			copied[k] = last
			batch = append(batch, mk)
		}
		if final != nil {
			final.Batch = batch
			mustStep(dst, *final)
			return
		}
		mustStep(dst, MoveStep{Op: MoveStage, Batch: batch})
	}
	copyKeys(users, convs, nil)
	if _, err := step(dst, MoveStep{Op: MoveStage, Batch: []MoveKey{{User: out}}}); !Rejected(err) {
		t.Fatalf("staging a user outside the range: %v", err)
	}

	// S cuts over: its later records of the range's users go to D, which holds them.
	cut := mustStep(src, MoveStep{Op: MoveCutover, From: src.ID(), To: dst.ID()})
	if again := mustStep(src, MoveStep{Op: MoveCutover, From: src.ID(), To: dst.ID()}); again != cut {
		t.Fatalf("a repeated cutover answered %d, then %d", cut, again)
	}
	send(gin, 2)
	send(gout, 1)
	st = at(src) // a user of the range that S has no log of yet: its first entries come after the cutover
	appendOK(t, src, st, Append{Conv: gout, Sender: out, ClientMsgID: "add", Kind: KindMemberAdd, Members: []string{late}})
	send(gout, 1)
	deliver(src)
	deliver(dst)

	// S: fence. The range's writes are refused; the other keys' go on.
	f := mustStep(src, MoveStep{Op: MoveFence})
	if again := mustStep(src, MoveStep{Op: MoveFence}); again != f {
		t.Fatalf("a repeated fence answered %d, then %d", f, again)
	}
	for name, op := range map[string]func(*Tx) error{
		"cursor": func(tx *Tx) error { return tx.SetCursor(Stamp{Time: 6000}, in1, "phone", Cursor{Epoch: 1, Pos: 4}) },
		"send": func(tx *Tx) error {
			_, err := tx.Append(Stamp{Time: 6000}, &Append{Conv: gin, Sender: out, ClientMsgID: "x", Kind: KindMessage, Body: []byte("x")})
			return err
		},
		"create": func(tx *Tx) error {
			_, err := tx.Append(Stamp{Time: 6000}, &Append{Conv: idIn(t, "new", ConvSlot, span, true), Sender: out, ClientMsgID: "y", Kind: KindGroupCreate, Members: []string{in1}})
			return err
		},
	} {
		if _, err := apply(t, src, at(src), op); !errors.Is(err, ErrMoving) {
			t.Errorf("%s in the fenced range: %v, want ErrMoving", name, err)
		}
	}
	send(gout, 1) // outside the range: accepted, its entry for in1 goes to D
	deliver(src)
	deliver(dst)
	wantIn1 := append(entriesOf(t, src, in1), heldFor(t, dst, move, in1)...)

	// The pass after the fence finds every key of the range S holds, and rides with the activation.
	users, convs, err = src.KeysInSlots(span)
	if err != nil {
		t.Fatal(err)
	}
	srcGin, _ := readAll(t, src, gin, true)
	if _, err := step(dst, MoveStep{Op: MoveActivate, From: 9, Fence: f}); !Rejected(err) {
		t.Fatalf("an activation naming another source: %v", err)
	}
	copyKeys(users, convs, &MoveStep{Op: MoveActivate, From: src.ID(), Fence: f})
	mustStep(dst, MoveStep{Op: MoveActivate, From: src.ID(), Fence: f})

	_, gotIn1 := readAll(t, dst, in1, false)
	if len(gotIn1) != len(wantIn1) {
		t.Fatalf("in1 on D has %d entries, want %d", len(gotIn1), len(wantIn1))
	}
	for i, e := range gotIn1 {
		if e.MsgID != wantIn1[i].MsgID || e.Seq != Position(i+1) {
			t.Fatalf("in1's entry %d on D: %s at %d, want %s at %d", i, e.MsgID, e.Seq, wantIn1[i].MsgID, i+1)
		}
	}
	if info := userInfo(t, dst, in1); info.Epoch != userInfo(t, src, in1).Epoch {
		t.Fatalf("in1's epoch changed across the move: %d, was %d", info.Epoch, userInfo(t, src, in1).Epoch)
	}
	if cs, err := dst.Cursors(in1); err != nil || len(cs) != 1 || cs[0].Cursor.Pos != 3 {
		t.Fatalf("in1's cursors on D: %v %v", cs, err)
	}
	if _, e := readAll(t, dst, late, false); len(e) != 3 {
		t.Fatalf("late, first written during the move, has %d entries on D, want 3 (the add and two messages)", len(e))
	}
	dstGin, _ := readAll(t, dst, gin, true)
	if dstGin.Head != srcGin.Head || dstGin.Epoch != srcGin.Epoch {
		t.Fatalf("gin on D: %+v, on S: %+v", dstGin, srcGin)
	}
	// A send to gin on D continues its conv_seq, and its record waits behind S's fence.
	res := appendOK(t, dst, at(dst), Append{Conv: gin, Sender: out, ClientMsgID: "after", Kind: KindMessage, Body: []byte("z")})
	if res.ConvSeq != srcGin.Head+1 {
		t.Fatalf("first send on D got conv_seq %d, want %d", res.ConvSeq, srcGin.Head+1)
	}
	items, err := dst.ReadOutbox(1, 10)
	if err != nil || len(items) != 1 || items[0].After != (Barrier{Source: src.ID(), Pos: f}) {
		t.Fatalf("D's outbox: %+v %v, want one record behind (%d, %d)", items, err, src.ID(), f)
	}

	// Settle, then the drop in chunks; reads of the range's keys on S answer ErrMoved from the first.
	mustStep(dst, MoveStep{Op: MoveSettle})
	if items, _ := dst.ReadOutbox(1, 10); items[0].After != (Barrier{}) {
		t.Fatalf("after the settle, D's record still waits: %+v", items[0].After)
	}
	if _, err := step(src, MoveStep{Op: MoveDropped}); !Rejected(err) {
		t.Fatalf("the drop's end before its start: %v", err)
	}
	mustStep(src, MoveStep{Op: MoveDrop})
	if _, err := src.ReadUser(in1, 0, 1, Limit{}); !errors.Is(err, ErrMoved) {
		t.Fatalf("read of a user of a range being dropped: %v, want ErrMoved", err)
	}
	if _, err := step(src, MoveStep{Op: MoveDrop, Batch: []MoveKey{{User: out}}}); !Rejected(err) {
		t.Fatalf("dropping a user outside the range: %v", err)
	}
	users, convs, err = src.KeysInSlots(span)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		mustStep(src, MoveStep{Op: MoveDrop, Batch: []MoveKey{{User: u}}})
	}
	mustStep(src, MoveStep{Op: MoveDrop, Batch: []MoveKey{{Conv: convs[0]}}})
	mustStep(src, MoveStep{Op: MoveDropped})
	mustStep(src, MoveStep{Op: MoveDropped})
	if users, convs, err = src.KeysInSlots(span); err != nil || len(users)+len(convs) != 0 {
		t.Fatalf("after the drop, S holds %v %v of the range (%v)", users, convs, err)
	}
	if _, gout := readAll(t, src, gout, true); len(gout) == 0 {
		t.Fatal("a conversation outside the range went with the drop")
	}

	// Reopened, S still answers the range's keys ErrMoved, and serves the rest.
	old := src
	if src, err = OpenShard(dbS, 2); err != nil {
		t.Fatal(err)
	}
	idx[src] = idx[old]
	if _, err := src.ReadConv(gin, 0, 1, Limit{}); !errors.Is(err, ErrMoved) {
		t.Fatalf("read of a moved conversation after a reopen: %v, want ErrMoved", err)
	}
	if _, err := apply(t, src, at(src), func(tx *Tx) error { return tx.SetCursor(Stamp{Time: 6000}, in2, "phone", Cursor{Epoch: 1, Pos: 1}) }); !errors.Is(err, ErrMoved) {
		t.Fatalf("a cursor write of a moved user after a reopen: %v, want ErrMoved", err)
	}
	if _, e := readAll(t, src, out, false); len(e) == 0 {
		t.Fatal("a user outside the range lost its log")
	}
}

// userInfo returns uid's log info on s.
func userInfo(t *testing.T, s *Shard, uid string) LogInfo {
	t.Helper()
	info, err := s.UserInfo(uid)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func sorted(s ...string) []string { slices.Sort(s); return s }

// entriesOf returns the whole retained log of uid on s.
func entriesOf(t *testing.T, s *Shard, uid string) []Entry {
	_, e := readAll(t, s, uid, false)
	return e
}

// heldFor returns the entries move holds on s for uid, in the order they arrived.
func heldFor(t *testing.T, s *Shard, move MoveID, uid string) []Entry {
	t.Helper()
	m, ok := s.committedRanges().marker(move)
	if !ok {
		t.Fatalf("no range marker of move %d", move)
	}
	var out []Entry
	for n := uint64(1); n <= m.pending; n++ {
		v, ok, err := getValue(s.db, s.k.pending(move, n))
		if err != nil || !ok {
			t.Fatalf("held entry %d: %v", n, err)
		}
		u, _, e, err := decodePending(v)
		if err != nil {
			t.Fatal(err)
		}
		if u == uid {
			out = append(out, e)
		}
	}
	return out
}

// TestSlotMoveAroundKeysMovedOnTheirOwn: a slot move meets keys of its range that moved on their
// own before. On the destination, a user already held there (pinned by its own move) is served
// and delivered to throughout, not taken for one of the range moving in. On a source shard, a
// user whose own cutover sends its records to the range's source switches with the range, one
// whose records go elsewhere keeps its own routing, and a user of the range getting a cutover of
// its own later starts from the range's. A cancel before the cutover drops what was copied.
func TestSlotMoveAroundKeysMovedOnTheirOwn(t *testing.T) {
	const move MoveID = 50
	span := SlotSpan{First: 0, Last: 2047}
	x := newMemShard(t, 1) // homes the conversation: the source of every delivery
	dst := newMemShard(t, 3)
	idx := map[*Shard]uint64{}
	at := func(s *Shard) Stamp { idx[s]++; return Stamp{Index: idx[s], Time: int64(1000 + idx[s])} }
	pinned, withS, away, plain := idIn(t, "p", UserSlot, span, true), idIn(t, "s", UserSlot, span, true),
		idIn(t, "a", UserSlot, span, true), idIn(t, "n", UserSlot, span, true)
	z := idIn(t, "z", UserSlot, span, false) // the sender: outside the range, routed by the map
	// pinned already lives on D (moved there on its own earlier: its log is simply there).
	mustApply(t, dst, at(dst), func(tx *Tx) error {
		b := &DeliveryBatch{Source: 9, Prev: 0, Last: 1, Items: []Delivery{{Pos: 1, Users: []string{pinned},
			Entry: Entry{Conv: "h", ConvSeq: 1, Kind: KindMessage, MsgID: MsgID{Shard: 9, Index: 1}, Sender: "z", Body: []byte("x")}}}}
		_, err := tx.Deliver(Stamp{Time: 5000}, b)
		return err
	})
	// On X, withS moved to S (2) on its own, away to E (4).
	mustApply(t, x, at(x), func(tx *Tx) error { _, err := tx.Cutover(10, withS, 5, 2); return err })
	mustApply(t, x, at(x), func(tx *Tx) error { _, err := tx.Cutover(11, away, 5, 4); return err })

	step := rangeStep(t, at, move, span)
	if _, err := step(dst, MoveStep{Op: MoveBegin, From: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.UserInfo(pinned); err != nil {
		t.Fatalf("a user held on D before the range moved in: %v", err)
	}
	if _, err := dst.UserInfo(plain); !errors.Is(err, ErrMoved) {
		t.Fatalf("a user of the range moving in: %v, want ErrMoved", err)
	}
	// A cancel before the cutover: a key's copy goes, then the move is marked canceled.
	if _, err := step(dst, MoveStep{Op: MoveStage, Batch: []MoveKey{{User: plain, Restart: true,
		Records: []Record{{Key: []byte{tagCursor, 'n'}, Value: []byte{1}}}}}}); !Rejected(err) {
		t.Fatalf("staging a record that is not the key's: %v", err)
	}
	if _, err := step(dst, MoveStep{Op: MoveCancel, Batch: []MoveKey{{User: plain}, {User: pinned}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := step(dst, MoveStep{Op: MoveCancel}); err != nil {
		t.Fatal(err)
	}
	if _, err := step(dst, MoveStep{Op: MoveStage, Batch: []MoveKey{{User: plain}}}); !Rejected(err) {
		t.Fatalf("a copy step of a canceled move: %v", err)
	}
	if _, err := dst.UserInfo(plain); err != nil {
		t.Fatalf("a user of a canceled range: %v", err)
	}

	// X cuts the range over from S (2) to D (3) at its head now, p.
	appendOK(t, x, at(x), Append{Conv: "g", Sender: z, ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{withS, away, plain}})
	p, err := step(x, MoveStep{Op: MoveCutover, From: 2, To: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := step(x, MoveStep{Op: MoveCutover, From: 4, To: 3}); err != nil {
		t.Fatalf("a repeated cutover: %v", err)
	}
	appendOK(t, x, at(x), Append{Conv: "g", Sender: z, ClientMsgID: "m", Kind: KindMessage, Body: []byte("hi")})
	items, err := x.ReadOutbox(1, 10)
	if err != nil || len(items) != 2 {
		t.Fatalf("outbox: %v %v", items, err)
	}
	for i, want := range []map[string]ShardID{{withS: 2, away: 4, plain: 2}, {withS: 3, away: 4, plain: 3}} {
		if items[i].Pos != p+uint64(i) || !maps.Equal(items[i].Pinned, want) {
			t.Errorf("record at %d (cutover at %d) routed %v, want %v", items[i].Pos, p, items[i].Pinned, want)
		}
	}
	// plain, moving on its own later (D → E), starts from the range's cutover.
	mustApply(t, x, at(x), func(tx *Tx) error { _, err := tx.Cutover(60, plain, 3, 4); return err })
	items, _ = x.ReadOutbox(1, 10)
	if items[0].Pinned[plain] != 2 || items[1].Pinned[plain] != 3 {
		t.Errorf("after its own cutover, plain's records route %v, %v; want 2, 3", items[0].Pinned, items[1].Pinned)
	}
	if _, err := apply(t, x, at(x), func(tx *Tx) error { _, err := tx.Cutover(61, withS, 2, 4); return err }); !Rejected(err) {
		t.Errorf("a cutover of withS from the range's old source: %v", err)
	}
}

// rangeStep returns a function that applies a step of slot move move over span to a shard, at
// the shard's next stamp (at), and returns the step's result.
func rangeStep(t *testing.T, at func(*Shard) Stamp, move MoveID, span SlotSpan) func(*Shard, MoveStep) (uint64, error) {
	return func(s *Shard, r MoveStep) (uint64, error) {
		t.Helper()
		r.Move, r.Slots = move, &span
		var res uint64
		_, err := apply(t, s, at(s), func(tx *Tx) error { var err error; res, err = tx.Move(Stamp{Time: 5000}, &r); return err })
		return res, err
	}
}

// TestRangeCutoverLeavesPinnedUsers: on a source shard that has no cutover of a user the map pins
// elsewhere (the shard was added after the user moved), a range cutover of her slot leaves her
// records going to her own shard, while the range's other users switch to the destination; the
// user's next move cuts over from her own shard; and a pin that the range would move is refused.
func TestRangeCutoverLeavesPinnedUsers(t *testing.T) {
	const from, to, home ShardID = 2, 3, 9
	span := SlotSpan{First: 0, Last: NumSlots/2 - 1}
	x := newMemShard(t, 5)
	var idx uint64
	at := func() Stamp { idx++; return Stamp{Index: idx, Time: int64(1000 + idx)} }
	pin, stays := idIn(t, "pin", UserSlot, span, true), idIn(t, "in", UserSlot, span, true)
	owner := idIn(t, "own", UserSlot, span, false)
	appendOK(t, x, at(), Append{Conv: "g", Sender: owner, ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{pin, stays}})

	cut := func(pinned map[string]ShardID) (uint64, error) {
		var p uint64
		_, err := apply(t, x, at(), func(tx *Tx) error {
			var err error
			p, err = tx.RangeCutover(7, span, from, to, pinned)
			return err
		})
		return p, err
	}
	if _, err := cut(map[string]ShardID{pin: from}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a pin to the range's source: %v, want ErrInvalid", err)
	}
	p, err := cut(map[string]ShardID{pin: home})
	if err != nil {
		t.Fatal(err)
	}
	if again, err := cut(map[string]ShardID{pin: home}); err != nil || again != p {
		t.Fatalf("the cutover again: %d, %v; want %d", again, err, p)
	}
	appendOK(t, x, at(), Append{Conv: "g", Sender: owner, ClientMsgID: "m", Kind: KindMessage, Body: []byte("hi")})
	items, err := x.ReadOutbox(1, 10)
	if err != nil || len(items) != 2 {
		t.Fatalf("outbox: %d items, %v", len(items), err)
	}
	if got := items[1].Pinned; got[pin] != home || got[stays] != to {
		t.Fatalf("a record past the cutover routes %v; want %s to %d (pinned) and %s to %d (the range)", got, pin, home, stays, to)
	}
	if got := items[0].Pinned; got[pin] != home || got[stays] != from {
		t.Fatalf("a record before the cutover routes %v; want %s to %d and %s to %d", got, pin, home, stays, from)
	}
	// Her next move cuts over from her own shard (before, the range's destination was taken for it).
	if _, err := apply(t, x, at(), func(tx *Tx) error { _, err := tx.Cutover(8, pin, home, 4); return err }); err != nil {
		t.Fatalf("the pinned user's next move: %v", err)
	}
}
