package log

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/syncd-dev/syncd/proto/ident"
)

// marksWorld drives one shard with consecutive indexes, for the tests of delivered marks.
type marksWorld struct {
	t   *testing.T
	s   *Shard
	idx uint64
}

func newMarksWorld(t *testing.T) *marksWorld {
	return &marksWorld{t: t, s: newMemShard(t, testShardID)}
}

func (w *marksWorld) at() Stamp { w.idx++; return Stamp{Index: w.idx, Time: int64(1000 + w.idx)} }

func (w *marksWorld) append(req Append) (AppendResult, error) {
	w.t.Helper()
	st := w.at()
	var res AppendResult
	_, err := apply(w.t, w.s, st, func(tx *Tx) error {
		var err error
		res, err = tx.Append(st, &req)
		return err
	})
	return res, err
}

func (w *marksWorld) ok(req Append) AppendResult {
	w.t.Helper()
	res, err := w.append(req)
	if err != nil {
		w.t.Fatalf("append %+v: %v", req, err)
	}
	return res
}

func (w *marksWorld) msg(conv, sender string, members ...string) AppendResult {
	w.t.Helper()
	w.idx++
	return w.okAt(Append{Conv: conv, Sender: sender, ClientMsgID: fmt.Sprint("m", w.idx), Kind: KindMessage, Body: []byte("x"), Members: members})
}

func (w *marksWorld) okAt(req Append) AppendResult { w.t.Helper(); return w.ok(req) }

func delivered(conv, uid string, upTo Position) Append {
	return Append{Conv: conv, Sender: uid, Kind: KindDelivered, ReadUpTo: upTo}
}

// lastOutbox returns the newest outbox record.
func (w *marksWorld) lastOutbox() OutboxItem {
	w.t.Helper()
	info, err := w.s.Outbox()
	if err != nil {
		w.t.Fatal(err)
	}
	items, err := w.s.ReadOutbox(info.Head, 1)
	if err != nil || len(items) != 1 {
		w.t.Fatalf("outbox %d: %v, %v", info.Head, items, err)
	}
	return items[0]
}

func (w *marksWorld) receipts(conv, uid string, seqs ...Position) []ReceiptCount {
	w.t.Helper()
	out, err := w.s.Receipts(conv, uid, seqs)
	if err != nil {
		w.t.Fatalf("receipts of %s: %v", conv, err)
	}
	return out
}

// TestDeliveredDirect: a delivered report in a direct conversation moves the member's mark
// (clamped to the head), goes to both members as an entry that takes a conv_seq, writes no
// dedup record, and never moves the mark back: a report at or below it is a NoOp that writes
// nothing. A receipt raises the delivered mark with the read mark. The peer's marks show in
// the other member's ConvState.
func TestDeliveredDirect(t *testing.T) {
	w := newMarksWorld(t)
	conv := ident.DirectConv("alice", "bob")
	w.msg(conv, "alice", "alice", "bob")
	w.msg(conv, "alice")
	dedups := countTable(t, w.s, tagDedup)

	res := w.ok(delivered(conv, "bob", 9))
	if res.NoOp || res.ConvSeq != 3 {
		t.Fatalf("delivered report: %+v, want an entry at conv_seq 3", res)
	}
	it := w.lastOutbox()
	if it.Entry.Kind != KindDelivered || it.Entry.ReadUpTo != 2 || !slices.Equal(it.Recipients, []string{"alice", "bob"}) {
		t.Fatalf("delivered entry: %+v to %v, want up to 2 (the head then) to both", it.Entry, it.Recipients)
	}
	if n := countTable(t, w.s, tagDedup); n != dedups {
		t.Fatalf("a delivered report wrote dedup records: %d, had %d", n, dedups)
	}
	for _, upTo := range []Position{2, 1} {
		before := stateSum(t, w.s)
		st := w.at()
		tx := w.s.Begin()
		res, err := tx.Append(st, &Append{Conv: conv, Sender: "bob", Kind: KindDelivered, ReadUpTo: upTo})
		if err != nil || !res.NoOp || tx.b.Count() != 0 {
			t.Fatalf("report up to %d at the mark: %+v, %v, %d writes; want a NoOp writing nothing", upTo, res, err, tx.b.Count())
		}
		tx.Close()
		if stateSum(t, w.s) != before {
			t.Fatal("a NoOp report changed the state")
		}
	}
	if _, err := w.append(delivered(conv, "carol", 1)); !errors.Is(err, ErrNotMember) {
		t.Fatalf("a non-member's report: %v, want ErrNotMember", err)
	}
	if _, err := w.append(delivered(conv, "bob", 0)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a report up to 0: %v, want ErrInvalid", err)
	}
	w.msg(conv, "alice")                                                                      // 4
	w.ok(Append{Conv: conv, Sender: "bob", ClientMsgID: "r", Kind: KindReceipt, ReadUpTo: 4}) // 5
	st, err := w.s.Conversation(conv, "alice")
	if err != nil || st.PeerDelivered != 4 || st.PeerRead != 4 || st.DeliveredMark != 0 {
		t.Fatalf("alice's view: %+v, %v; want bob delivered and read up to 4", st, err)
	}
	if st, err := w.s.Conversation(conv, "bob"); err != nil || st.DeliveredMark != 4 || st.ReadMark != 4 || st.PeerDelivered != 0 {
		t.Fatalf("bob's view: %+v, %v", st, err)
	}
	if res := w.ok(delivered(conv, "bob", 4)); !res.NoOp {
		t.Fatalf("a report below what the receipt raised: %+v, want a NoOp", res)
	}
	if got := w.receipts(conv, "alice", 4, 5, 6); got[0] != (ReceiptCount{ConvSeq: 4, Members: 2, Delivered: 1, Read: 1}) ||
		got[1] != (ReceiptCount{ConvSeq: 5, Members: 2}) || got[2] != (ReceiptCount{ConvSeq: 6}) {
		t.Fatalf("direct counts: %+v", got)
	}
}

// TestDeliveredGroupRecipients: in a group up to the fan-out limit a report goes to the senders
// of the messages it covers (not the reporter, nor a sender who left); when it covers none, or
// in a larger group, no entry is written but the mark and the counts move.
func TestDeliveredGroupRecipients(t *testing.T) {
	w := newMarksWorld(t)
	w.ok(Append{Conv: "g", Sender: "ann", ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{"bob", "cat", "dan", "eve"}}) // 1
	w.msg("g", "cat")                                                                                                              // 2
	w.msg("g", "bob")                                                                                                              // 3
	w.msg("g", "dan")                                                                                                              // 4
	w.ok(Append{Conv: "g", Sender: "dan", ClientMsgID: "bye", Kind: KindMemberRemove, Members: []string{"dan"}})                   // 5
	res := w.ok(delivered("g", "bob", 5))
	if it := w.lastOutbox(); res.NoOp || it.Entry.Kind != KindDelivered || !slices.Equal(it.Recipients, []string{"cat"}) {
		t.Fatalf("bob's report: %+v to %v, want one to cat only", res, it.Recipients)
	}
	head := res.ConvSeq
	// eve's report over the create only: nobody to tell.
	if res := w.ok(delivered("g", "eve", 1)); !res.NoOp {
		t.Fatalf("a report covering no message: %+v, want a NoOp", res)
	}
	if st, err := w.s.Conversation("g", "eve"); err != nil || st.DeliveredMark != 1 || st.Info.Head != head {
		t.Fatalf("eve after her report: %+v, %v", st, err)
	}
	// Over the limit: the mark and the counts move, no entry.
	res = w.ok(Append{Conv: "g", Sender: "eve", Kind: KindDelivered, ReadUpTo: 4, StatusFanoutLimit: 3})
	if st, _ := w.s.Conversation("g", "eve"); !res.NoOp || st.DeliveredMark != 4 || st.Info.Head != head {
		t.Fatalf("a report in a group over the limit: %+v, state %+v", res, st)
	}
	if got := w.receipts("g", "ann", 2, 4); got[0] != (ReceiptCount{ConvSeq: 2, Members: 4, Delivered: 2}) || got[1] != (ReceiptCount{ConvSeq: 4, Members: 4, Delivered: 2}) {
		t.Fatalf("counts: %+v", got)
	}
	// A receipt raises delivered too.
	w.ok(Append{Conv: "g", Sender: "cat", ClientMsgID: "r", Kind: KindReceipt, ReadUpTo: 4})
	if got := w.receipts("g", "ann", 4); got[0] != (ReceiptCount{ConvSeq: 4, Members: 4, Delivered: 3, Read: 1}) {
		t.Fatalf("counts after cat's receipt: %+v", got)
	}
	// A member added later counts only for what comes after its join.
	add := w.ok(Append{Conv: "g", Sender: "ann", ClientMsgID: "add", Kind: KindMemberAdd, Members: []string{"fay"}})
	after := w.msg("g", "ann")
	got := w.receipts("g", "ann", 4, add.ConvSeq, after.ConvSeq)
	if got[0].Members != 4 || got[1].Members != 4 || got[2].Members != 5 || got[2].Delivered != 0 {
		t.Fatalf("counts around fay's join: %+v", got)
	}
	if _, err := w.s.Receipts("g", "dan", []Position{1}); !errors.Is(err, ErrNotMember) {
		t.Fatalf("receipts for a former member: %v", err)
	}
	if _, err := w.s.Receipts("g", "ann", make([]Position, MaxReceiptSeqs+1)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("receipts of too many positions: %v", err)
	}
}

// TestReadersPaging: Readers pages the members whose mark covers a position and who joined
// before it, bounded by limit and by the scan, and says where to go on.
func TestReadersPaging(t *testing.T) {
	w := newMarksWorld(t)
	var members []string
	for i := range 30 {
		members = append(members, fmt.Sprintf("u%02d", i))
	}
	w.ok(Append{Conv: "g", Sender: "u00", ClientMsgID: "c", Kind: KindGroupCreate, Members: members}) // 1
	w.msg("g", "u00")                                                                                 // 2
	var want []string
	for i, u := range members {
		if i%3 == 0 {
			w.ok(delivered("g", u, 2))
			want = append(want, u)
		}
	}
	w.ok(Append{Conv: "g", Sender: "u00", ClientMsgID: "add", Kind: KindMemberAdd, Members: []string{"v"}})
	w.ok(delivered("g", "v", 99)) // joined after 2: not a reader of it
	var got []string
	after, pages := "", 0
	for {
		users, next, more, err := w.s.Readers("g", "u01", 2, KindDelivered, after, 4)
		if err != nil {
			t.Fatal(err)
		}
		got, after, pages = append(got, users...), next, pages+1
		if !more {
			break
		}
		if len(users) != 4 || next != users[3] {
			t.Fatalf("a full page: %v next %q", users, next)
		}
	}
	if !slices.Equal(got, want) || pages != 3 {
		t.Fatalf("readers of g/2 in %d pages: %v, want %v", pages, got, want)
	}
	if users, _, _, err := w.s.Readers("g", "u01", 2, KindReceipt, "", 10); err != nil || len(users) != 0 {
		t.Fatalf("readers who read g/2: %v, %v", users, err)
	}
	if _, _, _, err := w.s.Readers("g", "u01", 2, KindMessage, "", 10); !errors.Is(err, ErrInvalid) {
		t.Fatalf("readers of a state that is no mark: %v", err)
	}
}

// TestDeliveryDue: a cursor beyond what was reported makes the log due; DeliveryDue names, per
// conversation, the newest message of another user the devices stored; MarkReported ends it
// unless a device is further already. A log's first cursor starts the reporting where its
// devices were, so no history is reported at once.
func TestDeliveryDue(t *testing.T) {
	w := newMarksWorld(t)
	conv := ident.DirectConv("alice", "bob")
	w.msg(conv, "alice", "alice", "bob") // 1
	w.ok(Append{Conv: "g", Sender: "carl", ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{"bob"}})
	w.msg(conv, "bob")   // conv 2: bob's own
	w.msg("g", "carl")   // g 2
	w.msg(conv, "alice") // conv 3
	st := w.at()
	mustApply(t, w.s, st, func(tx *Tx) error { return deliverOwn(w.s, 0, 5)(tx, st) })
	info, err := w.s.UserInfo("bob")
	if err != nil || info.Head != 5 {
		t.Fatalf("bob's log: %+v, %v", info, err)
	}
	cursor := func(dev string, pos Position) {
		t.Helper()
		st := w.at()
		mustApply(t, w.s, st, func(tx *Tx) error { return tx.SetCursor(st, "bob", dev, Cursor{Epoch: info.Epoch, Pos: pos}) })
	}
	due := func() []DeliveryDue {
		t.Helper()
		d, err := w.s.DeliveryDue(10, 100)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	cursor("phone", 1) // the first: reporting starts at 0, the highest before it
	if d := due(); len(d) != 1 || d[0].To != 1 || len(d[0].Convs) != 1 || d[0].Convs[0] != (DeliveredConv{conv, 1}) {
		t.Fatalf("due after the first ack: %+v", d)
	}
	cursor("tablet", 5)
	d := due()
	if len(d) != 1 || d[0].Log != "bob" || d[0].User != "bob" || d[0].To != 5 || d[0].Epoch != info.Epoch ||
		!slices.Equal(d[0].Convs, []DeliveredConv{{conv, 3}, {"g", 2}}) {
		t.Fatalf("due: %+v", d)
	}
	if d, err := w.s.DeliveryDue(10, 2); err != nil || d[0].To != 2 {
		t.Fatalf("due, two entries at most: %+v, %v", d, err)
	}
	mark := func(c Cursor) {
		t.Helper()
		st := w.at()
		mustApply(t, w.s, st, func(tx *Tx) error { return tx.MarkReported("bob", c) })
	}
	mark(Cursor{Epoch: info.Epoch, Pos: 3}) // the tablet is further: still due, from 3
	if d := due(); len(d) != 1 || !slices.Equal(d[0].Convs, []DeliveredConv{{conv, 3}, {"g", 2}}) {
		t.Fatalf("due after a partial report: %+v", d)
	}
	mark(Cursor{Epoch: info.Epoch, Pos: 5})
	mark(Cursor{Epoch: info.Epoch, Pos: 4}) // late and lower: changes nothing
	if d := due(); len(d) != 0 || countTable(t, w.s, tagDue) != 0 {
		t.Fatalf("due after the report: %+v", d)
	}
	cursor("phone", 4) // behind what was reported: not due
	if d := due(); len(d) != 0 {
		t.Fatalf("due after an ack below the report: %+v", d)
	}
	// A reset drops the reporting state; the new epoch's first cursor starts it again.
	mustApply(t, w.s, w.at(), func(tx *Tx) error { _, err := tx.ResetUser(Stamp{Index: w.idx, Time: 1 << 40}, "bob"); return err })
	if countTable(t, w.s, tagReported) != 0 {
		t.Fatal("the reset kept the reported cursor")
	}
	if _, err := w.s.DeliveryDue(0, 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("delivery due with no limit: %v", err)
	}
}

// TestCountsSurviveSnapshot: a snapshot carries the histograms; the restored shard answers the
// same counts.
func TestCountsSurviveSnapshot(t *testing.T) {
	w := newMarksWorld(t)
	w.ok(Append{Conv: "g", Sender: "ann", ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{"bob", "cat"}})
	w.msg("g", "ann")
	w.ok(delivered("g", "bob", 2))
	w.ok(Append{Conv: "g", Sender: "cat", ClientMsgID: "r", Kind: KindReceipt, ReadUpTo: 2})
	want := w.receipts("g", "ann", 1, 2, 3)
	data, _, _ := takeSnapshot(t, w.s)
	dst := newMemShard(t, testShardID)
	if err := restore(t, dst, data); err != nil {
		t.Fatal(err)
	}
	got, err := dst.Receipts("g", "ann", []Position{1, 2, 3})
	if err != nil || !slices.Equal(got, want) || got[1] != (ReceiptCount{ConvSeq: 2, Members: 3, Delivered: 2, Read: 1}) {
		t.Fatalf("restored counts: %+v, %v; want %+v", got, err, want)
	}
}

// TestLargeGroupCounts: a group of 100,000 members, built 1,000 at a time as clients add them,
// some thousands of whose marks move; Receipts equals a count of the member records, and reads
// a few hundred histogram keys per position, not the members. Under the race detector (20 times
// slower: most of it building the group) the group has 20,000 members; the bound on the keys
// read does not depend on the size.
func TestLargeGroupCounts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 100,000-member group")
	}
	n := 100_000
	if raceEnabled {
		n = 20_000
	}
	w := newMarksWorld(t)
	start := time.Now()
	w.ok(Append{Conv: "g", Sender: "owner", ClientMsgID: "c", Kind: KindGroupCreate, MaxGroupSize: int64(n)})
	for i := 0; i < n-1; i += MaxMembersPerRequest {
		var batch []string
		for j := i; j < min(i+MaxMembersPerRequest, n-1); j++ {
			batch = append(batch, fmt.Sprintf("m%06d", j))
		}
		w.ok(Append{Conv: "g", Sender: "owner", ClientMsgID: fmt.Sprint("add", i), Kind: KindMemberAdd, Members: batch, MaxGroupSize: int64(n)})
		if i%10_000 == 0 {
			w.msg("g", "owner")
		}
	}
	built := time.Since(start)
	info, err := w.s.ConvInfo("g")
	if err != nil {
		t.Fatal(err)
	}
	// Marks of 3,000 members move, to positions spread over the log.
	for i := range 3000 {
		uid := fmt.Sprintf("m%06d", i*31%(n-1)) // 31 is prime to n-1: 3,000 distinct members
		upTo := Position(2 + i*7%int(info.Head-1))
		if i%3 == 0 {
			w.ok(Append{Conv: "g", Sender: uid, ClientMsgID: "r", Kind: KindReceipt, ReadUpTo: upTo})
		} else {
			w.ok(delivered("g", uid, upTo))
		}
	}
	var seqs []Position
	for seq := Position(1); seq <= info.Head+1; seq += max(1, info.Head/(MaxReceiptSeqs-10)+1) {
		seqs = append(seqs, seq)
	}
	snap := w.s.db.NewSnapshot()
	defer snap.Close()
	got, keys, err := w.s.receipts(snap, "g", "owner", seqs)
	if err != nil {
		t.Fatal(err)
	}
	m, err := w.s.convMeta(snap, "g")
	if err != nil || !m.Counted || m.MemberCount != n {
		t.Fatalf("meta: %+v, %v", m, err)
	}
	want := make([]ReceiptCount, len(seqs))
	var in []int
	for i, seq := range seqs {
		want[i].ConvSeq = seq
		if seq <= m.Head { // the receipts made entries after info was read
			in = append(in, i)
		}
	}
	if err := w.s.scanReceipts(snap, "g", m, want, in); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("counts from the histograms:\n%+v\nfrom the members:\n%+v", got, want)
	}
	if perSeq := keys / len(in); perSeq > countKinds*countLevels*256 {
		t.Fatalf("Receipts read %d keys a position", perSeq)
	}
	t.Logf("built in %v; %d positions answered reading %d histogram keys", built, len(in), keys)
}

// TestPropertyCounts: random group histories (creations, adds, removals, messages, receipts and
// delivered reports, from members and others) keep the histograms equal to a count of the
// member records at every position, and equal to a brute-force model of the marks.
func TestPropertyCounts(t *testing.T) {
	users := []string{"a", "b", "c", "d", "e"}
	rapid.Check(t, func(rt *rapid.T) {
		s := newMemShard(rt, testShardID)
		var idx uint64
		type mark struct{ delivered, read, joined Position }
		model := map[string]*mark{}
		head := Position(0)
		run := func(req Append) {
			idx++
			st := Stamp{Index: idx, Time: int64(idx)}
			var res AppendResult
			_, err := apply(rt, s, st, func(tx *Tx) error { var err error; res, err = tx.Append(st, &req); return err })
			if err != nil || res.NoOp || res.Duplicate {
				if err != nil && !Rejected(err) {
					rt.Fatalf("append %+v: %v", req, err)
				}
				if err == nil && res.NoOp && req.Kind == KindDelivered {
					if me := model[req.Sender]; me != nil {
						me.delivered = max(me.delivered, min(req.ReadUpTo, head))
					}
				}
				return
			}
			head = res.ConvSeq
			switch req.Kind {
			case KindGroupCreate:
				for _, u := range sortedUnique(append([]string{req.Sender}, req.Members...)) {
					model[u] = &mark{joined: head}
				}
			case KindMemberAdd:
				for _, u := range req.Members {
					if model[u] == nil {
						model[u] = &mark{joined: head}
					}
				}
			case KindMemberRemove:
				for _, u := range req.Members {
					delete(model, u)
				}
			case KindReceipt:
				me := model[req.Sender]
				me.read, me.delivered = req.ReadUpTo, max(me.delivered, req.ReadUpTo)
			case KindDelivered:
				me := model[req.Sender]
				me.delivered = max(me.delivered, min(req.ReadUpTo, head-1))
			}
		}
		run(Append{Conv: "g", Sender: "a", ClientMsgID: "c", Kind: KindGroupCreate,
			Members: rapid.SliceOfN(rapid.SampledFrom(users), 0, 4).Draw(rt, "members")})
		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		for i := range steps {
			u := rapid.SampledFrom(users).Draw(rt, "user")
			upTo := Position(rapid.IntRange(1, int(head)+2).Draw(rt, "upto"))
			cmid := fmt.Sprint("x", i)
			switch rapid.IntRange(0, 5).Draw(rt, "op") {
			case 0:
				run(Append{Conv: "g", Sender: u, ClientMsgID: cmid, Kind: KindMessage, Body: []byte("m")})
			case 1:
				run(Append{Conv: "g", Sender: u, ClientMsgID: cmid, Kind: KindReceipt, ReadUpTo: upTo})
			case 2, 3:
				run(Append{Conv: "g", Sender: u, Kind: KindDelivered, ReadUpTo: upTo,
					StatusFanoutLimit: int64(rapid.IntRange(0, 4).Draw(rt, "limit"))})
			case 4:
				run(Append{Conv: "g", Sender: "a", ClientMsgID: cmid, Kind: KindMemberAdd, Members: []string{rapid.SampledFrom(users).Draw(rt, "add")}})
			default:
				if u != "a" {
					run(Append{Conv: "g", Sender: u, ClientMsgID: cmid, Kind: KindMemberRemove, Members: []string{u}})
				}
			}
		}
		var seqs []Position
		for seq := Position(0); seq <= head+1; seq++ {
			seqs = append(seqs, seq)
		}
		got, err := s.Receipts("g", "a", seqs)
		if err != nil {
			rt.Fatal(err)
		}
		for i, seq := range seqs {
			want := ReceiptCount{ConvSeq: seq}
			if seq >= 1 && seq <= head {
				for _, m := range model {
					if m.joined >= seq {
						continue
					}
					want.Members++
					if max(m.delivered, m.read) >= seq {
						want.Delivered++
					}
					if m.read >= seq {
						want.Read++
					}
				}
			}
			if got[i] != want {
				rt.Fatalf("counts of g/%d: %+v, model %+v (%v)", seq, got[i], want, model)
			}
		}
	})
}
