package log

import (
	"fmt"
	"slices"
	"testing"
)

// largeWorld is a shard whose outbox is delivered to itself after every append, as a one-shard
// fan-out would, with a small LargeGroupThreshold so that groups of a few members are large.
type largeWorld struct {
	*marksWorld
	mark uint64 // outbox delivered up to
}

const testThreshold = 3

func newLargeWorld(t *testing.T) *largeWorld { return &largeWorld{marksWorld: newMarksWorld(t)} }

// do appends req with the test threshold and delivers what it put in the outbox.
func (w *largeWorld) do(req Append) AppendResult {
	w.t.Helper()
	req.LargeGroupThreshold = testThreshold
	res := w.ok(req)
	w.deliver()
	return res
}

func (w *largeWorld) deliver() {
	w.t.Helper()
	info, err := w.s.Outbox()
	if err != nil {
		w.t.Fatal(err)
	}
	if info.Head == w.mark {
		return
	}
	b := outboxBatch(w.t, w.s, w.mark, info.Head)
	st := w.at()
	mustApply(w.t, w.s, st, func(tx *Tx) error { _, err := tx.Deliver(st, b); return err })
	w.mark = info.Head
}

func (w *largeWorld) send(conv, sender string) AppendResult {
	w.t.Helper()
	w.idx++
	return w.do(Append{Conv: conv, Sender: sender, ClientMsgID: fmt.Sprint("m", w.idx), Kind: KindMessage, Body: []byte("hi")})
}

// userLog returns uid's entries as "kind conv/conv_seq source" strings.
func (w *largeWorld) userLog(uid string) []string {
	w.t.Helper()
	var out []string
	if _, err := w.s.UserInfo(uid); err != nil {
		w.t.Fatal(err)
	}
	if m, ok, err := getLogMeta(w.s.db, w.s.k.user(uid)); err != nil || !ok {
		return nil
	} else if m.Head == 0 {
		return nil
	}
	_, es := readAll(w.t, w.s, uid, false)
	for _, e := range es {
		s := fmt.Sprintf("%v %s/%d", e.Kind, e.Conv, e.ConvSeq)
		if e.Source {
			s += " source"
		}
		out = append(out, s)
	}
	return out
}

func (w *largeWorld) follows(uid string) string {
	w.t.Helper()
	fs, err := w.s.Follows(uid)
	if err != nil {
		w.t.Fatal(err)
	}
	return fmt.Sprint(fs)
}

// TestLargeGroupWritesNoEntryPerMember: a message to a large group is written once, in the
// conversation log, with no outbox record; its members' logs hold only the entry that started
// their following, and their follow records say from where.
func TestLargeGroupWritesNoEntryPerMember(t *testing.T) {
	w := newLargeWorld(t)
	members := []string{"bob", "cat", "dan", "eve"}
	w.do(Append{Conv: "g", Sender: "ann", ClientMsgID: "c", Kind: KindGroupCreate, Members: members})
	before, err := w.s.Outbox()
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		w.send("g", "bob")
	}
	after, _ := w.s.Outbox()
	if after.Head != before.Head {
		t.Errorf("5 messages to a large group wrote %d outbox records, want none", after.Head-before.Head)
	}
	if st, err := w.s.Conversation("g", "ann"); err != nil || !st.Large || st.Info.Head != 6 {
		t.Fatalf("the group: %+v, %v; want large, head 6", st, err)
	}
	for _, u := range append(members, "ann") {
		if got := w.userLog(u); !slices.Equal(got, []string{"group_create g/1 source"}) {
			t.Errorf("%s's log: %v, want the creation only, marked as a source", u, got)
		}
		if got, want := w.follows(u), "[{g [{1 0 1}]}]"; got != want {
			t.Errorf("%s's follows: %s, want %s", u, got, want)
		}
	}
}

// TestGroupBecomesLarge: the add that takes a group past the threshold goes to every member,
// marked as a source; from it on, only the added see an add and only the removed a removal;
// a removal closes the period and an add again opens a new one.
func TestGroupBecomesLarge(t *testing.T) {
	w := newLargeWorld(t)
	w.do(Append{Conv: "g", Sender: "ann", ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{"bob", "cat"}}) // 1
	w.send("g", "bob")                                                                                               // 2: write diffusion
	if st, _ := w.s.Conversation("g", "ann"); st.Large {
		t.Fatal("a group of 3 with threshold 3 is large")
	}
	w.do(Append{Conv: "g", Sender: "ann", ClientMsgID: "a1", Kind: KindMemberAdd, Members: []string{"dan"}})     // 3: the switch
	w.send("g", "cat")                                                                                           // 4
	w.do(Append{Conv: "g", Sender: "ann", ClientMsgID: "a2", Kind: KindMemberAdd, Members: []string{"eve"}})     // 5
	w.do(Append{Conv: "g", Sender: "cat", ClientMsgID: "bye", Kind: KindMemberRemove, Members: []string{"cat"}}) // 6
	w.send("g", "eve")                                                                                           // 7
	w.do(Append{Conv: "g", Sender: "ann", ClientMsgID: "a3", Kind: KindMemberAdd, Members: []string{"cat"}})     // 8

	for u, want := range map[string][]string{
		"ann": {"group_create g/1", "message g/2", "member_add g/3 source"},
		"bob": {"group_create g/1", "message g/2", "member_add g/3 source"},
		"dan": {"member_add g/3 source"},
		"eve": {"member_add g/5 source"},
		"cat": {"group_create g/1", "message g/2", "member_add g/3 source", "member_remove g/6 source", "member_add g/8 source"},
	} {
		if got := w.userLog(u); !slices.Equal(got, want) {
			t.Errorf("%s's log: %v, want %v", u, got, want)
		}
	}
	if got, want := w.follows("cat"), "[{g [{3 6 3} {8 0 5}]}]"; got != want {
		t.Errorf("cat's follows: %s, want %s (two periods)", got, want)
	}
	if got, want := w.follows("eve"), "[{g [{5 0 1}]}]"; got != want {
		t.Errorf("eve's follows: %s, want %s", got, want)
	}
	if st, _ := w.s.Conversation("g", "ann"); !st.Large || st.MemberCount != 5 {
		t.Errorf("the group after: %+v", st)
	}
}

// TestFollowKeepsTheLastPeriods: a member added and removed again and again keeps its last
// MaxPeriods periods.
func TestFollowKeepsTheLastPeriods(t *testing.T) {
	w := newLargeWorld(t)
	w.do(Append{Conv: "g", Sender: "ann", ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{"bob", "cat", "dan"}})
	for i := range MaxPeriods + 2 {
		w.do(Append{Conv: "g", Sender: "ann", ClientMsgID: fmt.Sprint("rm", i), Kind: KindMemberRemove, Members: []string{"dan"}})
		w.do(Append{Conv: "g", Sender: "ann", ClientMsgID: fmt.Sprint("add", i), Kind: KindMemberAdd, Members: []string{"dan"}})
	}
	fs, err := w.s.Follows("dan")
	if err != nil || len(fs) != 1 || len(fs[0].Periods) != MaxPeriods {
		t.Fatalf("dan's follows: %+v, %v; want %d periods", fs, err, MaxPeriods)
	}
	ps := fs[0].Periods
	if last := ps[len(ps)-1]; !last.Open() || last.From != w.s.mustHead(t, "g") {
		t.Errorf("the last period %+v: want open, from the last add", last)
	}
	for _, p := range ps[:len(ps)-1] {
		if p.Open() || p.Last() != p.To-1 || p.To <= p.From {
			t.Errorf("a past period %+v", p)
		}
	}
}

// TestLargeGroupReceiptIsPrivate: in a large group a receipt writes no conversation entry; it
// moves the reader's marks and counts, and reaches the reader's log alone with conv_seq 0; a
// delivered report writes nothing but the mark.
func TestLargeGroupReceiptIsPrivate(t *testing.T) {
	w := newLargeWorld(t)
	w.do(Append{Conv: "g", Sender: "ann", ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{"bob", "cat", "dan"}})
	w.send("g", "ann")
	w.send("g", "ann") // 3
	res := w.do(Append{Conv: "g", Sender: "bob", ClientMsgID: "r", Kind: KindReceipt, ReadUpTo: 3})
	if res.NoOp || res.ConvSeq != 0 || res.MsgID.IsZero() {
		t.Fatalf("the receipt: %+v, want an entry without a conv_seq", res)
	}
	if got := w.userLog("bob"); !slices.Equal(got, []string{"group_create g/1 source", "receipt g/0"}) {
		t.Errorf("bob's log: %v", got)
	}
	if got := w.userLog("ann"); !slices.Equal(got, []string{"group_create g/1 source"}) {
		t.Errorf("ann's log (the sender): %v, want no receipt", got)
	}
	if st, _ := w.s.Conversation("g", "bob"); st.Info.Head != 3 || st.ReadMark != 3 || st.DeliveredMark != 3 {
		t.Errorf("bob's state: %+v", st)
	}
	if got := w.receipts("g", "ann", 3); got[0] != (ReceiptCount{ConvSeq: 3, Members: 4, Delivered: 1, Read: 1}) {
		t.Errorf("counts: %+v", got)
	}
	// A resend is answered with the same result.
	if again := w.do(Append{Conv: "g", Sender: "bob", ClientMsgID: "r", Kind: KindReceipt, ReadUpTo: 3}); !again.Duplicate || again.MsgID != res.MsgID {
		t.Errorf("the resend: %+v", again)
	}
	if res := w.do(delivered("g", "cat", 3)); !res.NoOp {
		t.Errorf("a delivered report: %+v, want a NoOp", res)
	}
	if got := w.receipts("g", "ann", 3); got[0].Delivered != 2 {
		t.Errorf("counts after cat's report: %+v", got)
	}
	if st, _ := w.s.Conversation("g", "ann"); st.Info.Head != 3 {
		t.Errorf("the conversation grew to %d", st.Info.Head)
	}
}

// mustHead returns conv's head.
func (s *Shard) mustHead(t *testing.T, conv string) Position {
	t.Helper()
	info, err := s.ConvInfo(conv)
	if err != nil {
		t.Fatal(err)
	}
	return info.Head
}

// moveUser moves uid's log from w's shard to a new shard under move, up to its activation there
// (the source keeps its copy until a DropUser), and returns the destination and its stamps.
func (w *largeWorld) moveUser(move MoveID, uid string) (*Shard, func() Stamp) {
	t := w.t
	t.Helper()
	dst := newMemShard(t, 5)
	var idx uint64
	at := func() Stamp { idx++; return Stamp{Index: idx, Time: int64(1000 + idx)} }
	mustApply(t, dst, at(), func(tx *Tx) error { return tx.BeginMoveIn(move, uid) })
	mustApply(t, w.s, w.at(), func(tx *Tx) error { return tx.FenceUser(move, uid) })
	var recs []Record
	if _, _, done, err := w.s.ExportUser(uid, 0, 0, func(r Record) error { recs = append(recs, r); return nil }); err != nil || !done {
		t.Fatalf("export: done %v, %v", done, err)
	}
	mustApply(t, dst, at(), func(tx *Tx) error { return tx.StageUser(move, uid, recs) })
	mustApply(t, dst, at(), func(tx *Tx) error { _, err := tx.ActivateUser(at(), move, uid, false); return err })
	return dst, at
}

// TestMoveUserCarriesFollows: a user's follow records move with its log (and leave nothing
// behind on the source).
func TestMoveUserCarriesFollows(t *testing.T) {
	const move MoveID = 9
	w := newLargeWorld(t) // homes the group and bob's log
	w.do(Append{Conv: "g", Sender: "ann", ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{"bob", "cat", "dan"}})
	w.do(Append{Conv: "g", Sender: "ann", ClientMsgID: "rm", Kind: KindMemberRemove, Members: []string{"bob"}})
	w.do(Append{Conv: "g", Sender: "ann", ClientMsgID: "add", Kind: KindMemberAdd, Members: []string{"bob"}})
	want := w.follows("bob")
	dst, _ := w.moveUser(move, "bob")
	got, err := dst.Follows("bob")
	if err != nil || fmt.Sprint(got) != want {
		t.Fatalf("bob's follows on the destination: %v, %v; want %s", got, err, want)
	}
	mustApply(t, w.s, w.at(), func(tx *Tx) error { return tx.DropUser(move, "bob") })
	if n := countTable(t, w.s, tagFollow); n != 3 { // cat's, dan's and ann's stay
		t.Errorf("the source holds %d follow records after the drop, want 3", n)
	}
}

// TestMarkDelivered: the acks of a large group's followers move their delivered marks and the
// counts, writing no entry; a repeated or lower mark changes nothing, a member who left is
// skipped, and a group that is not large refuses.
func TestMarkDelivered(t *testing.T) {
	w := newLargeWorld(t)
	w.do(Append{Conv: "g", Sender: "ann", ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{"bob", "cat", "dan"}})
	w.send("g", "ann")
	w.send("g", "ann")                                                                                           // 3
	w.do(Append{Conv: "g", Sender: "dan", ClientMsgID: "bye", Kind: KindMemberRemove, Members: []string{"dan"}}) // 4
	mark := func(marks ...MemberMark) (int, error) {
		var n int
		st := w.at()
		_, err := apply(t, w.s, st, func(tx *Tx) error {
			var err error
			n, err = tx.MarkDelivered(st, &MarkDelivered{Conv: "g", Marks: marks})
			return err
		})
		return n, err
	}
	n, err := mark(MemberMark{User: "bob", UpTo: 3}, MemberMark{User: "dan", UpTo: 3}, MemberMark{User: "cat", UpTo: 99})
	if err != nil || n != 2 {
		t.Fatalf("marks: %d moved, %v; want bob and cat", n, err)
	}
	if got := w.receipts("g", "ann", 3); got[0] != (ReceiptCount{ConvSeq: 3, Members: 3, Delivered: 2}) {
		t.Errorf("counts: %+v", got)
	}
	if st, _ := w.s.Conversation("g", "cat"); st.DeliveredMark != 4 || st.Info.Head != 4 {
		t.Errorf("cat's state: %+v (its mark clamped to the head, no entry)", st)
	}
	if n, err := mark(MemberMark{User: "bob", UpTo: 2}, MemberMark{User: "bob", UpTo: 3}); err != nil || n != 0 {
		t.Errorf("marks that move nothing: %d, %v", n, err)
	}
	w.do(Append{Conv: "d:a:b", Sender: "a", ClientMsgID: "m", Kind: KindMessage, Body: []byte("x"), Members: []string{"a", "b"}})
	st := w.at()
	if _, err := apply(t, w.s, st, func(tx *Tx) error {
		_, err := tx.MarkDelivered(st, &MarkDelivered{Conv: "d:a:b", Marks: []MemberMark{{User: "b", UpTo: 1}}})
		return err
	}); !Rejected(err) {
		t.Errorf("marks of a direct conversation: %v, want a refusal", err)
	}
}
