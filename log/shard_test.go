// Unit tests of contracts the scripts cannot express well: requests are never modified by the
// shard (determinism when a request object is applied twice), group receipts beyond the scan limit,
// bounded dedup garbage collection, key-format versioning on open, reads that stay consistent
// while the one writer trims and appends (G3: never a spurious hole), msg id parsing and isolation
// between shards sharing one Pebble database.
package log

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

func TestAppendDoesNotModifyRequest(t *testing.T) {
	s := newMemShard(t, testShardID)
	reqs := []Append{
		{Conv: "d:a:b", Sender: "b", ClientMsgID: "1", Kind: KindMessage, Body: []byte("x"), Members: []string{"b", "a"}},
		{Conv: "g1", Sender: "a", ClientMsgID: "2", Kind: KindGroupCreate, Members: []string{"c", "b", "c"}},
		{Conv: "g1", Sender: "a", ClientMsgID: "3", Kind: KindMemberAdd, Members: []string{"e", "d", "e"}},
		{Conv: "g1", Sender: "a", ClientMsgID: "4", Kind: KindMemberRemove, Members: []string{"e", "d", "e"}},
	}
	for i, req := range reqs {
		orig := req
		orig.Members = slices.Clone(req.Members)
		appendOK(t, s, Stamp{Index: uint64(i + 1), Time: 100}, req)
		if !reflect.DeepEqual(req, orig) {
			t.Errorf("Append modified its request: %+v, was %+v", req, orig)
		}
	}
}

// A group receipt that covers more than receiptScanLimit new entries goes to every member
// instead of scanning for the senders concerned.
func TestGroupReceiptBeyondScanLimit(t *testing.T) {
	s := newMemShard(t, testShardID)
	idx := uint64(0)
	next := func() Stamp { idx++; return Stamp{Index: idx, Time: int64(idx)} }
	appendOK(t, s, next(), Append{Conv: "g", Sender: "a", ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{"b", "c"}})
	for i := 0; i < receiptScanLimit+1; i++ {
		appendOK(t, s, next(), Append{Conv: "g", Sender: "a", ClientMsgID: fmt.Sprint("m", i), Kind: KindMessage, Body: []byte("x")})
	}
	recipients := func(upTo Position) []string {
		res := appendOK(t, s, next(), Append{Conv: "g", Sender: "c", ClientMsgID: fmt.Sprint("r", upTo), Kind: KindReceipt, ReadUpTo: upTo})
		info, err := s.Outbox()
		if err != nil || res.NoOp {
			t.Fatalf("outbox: %v, result %+v", err, res)
		}
		items, err := s.ReadOutbox(info.Head, 1)
		if err != nil || len(items) != 1 {
			t.Fatalf("read outbox: %v %v", items, err)
		}
		return items[0].Recipients
	}
	if got := recipients(receiptScanLimit); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("receipt within the scan limit went to %v, want the reader and the sender", got)
	}
	// Move on by more than the limit: c's mark is receiptScanLimit, head is now past 2*limit.
	for i := 0; i < receiptScanLimit; i++ {
		appendOK(t, s, next(), Append{Conv: "g", Sender: "a", ClientMsgID: fmt.Sprint("n", i), Kind: KindMessage, Body: []byte("x")})
	}
	info, err := s.ConvInfo("g")
	if err != nil {
		t.Fatal(err)
	}
	if got := recipients(info.Head); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("receipt beyond the scan limit went to %v, want every member", got)
	}
}

// Expired dedup records are reclaimed dedupGCBatch at a time, only on appends whose Raft index is
// a multiple of dedupGCEvery (a rule every replica applies identically), so no command does
// unbounded work and all of them are reclaimed eventually.
func TestDedupGCIsBounded(t *testing.T) {
	s := newMemShard(t, testShardID)
	send := func(idx uint64, time int64, cmid string, window int64) {
		appendOK(t, s, Stamp{Index: idx, Time: time}, Append{Conv: "d:a:b", Sender: "a", ClientMsgID: cmid,
			Kind: KindMessage, Body: []byte("x"), Members: []string{"a", "b"}, DedupWindow: window})
	}
	const n = 2*dedupGCBatch + 5
	for i := 1; i <= n; i++ {
		send(uint64(i), 100, fmt.Sprint("short", i), 10) // expire at 110
	}
	check := func(when string, want int) {
		t.Helper()
		if got := countTable(t, s, tagDedup); got != want {
			t.Fatalf("%s: %d dedup records, want %d", when, got, want)
		}
		if got := countTable(t, s, tagDedupByExp); got != want {
			t.Fatalf("%s: %d expiry index entries, want %d", when, got, want)
		}
	}
	check("before expiry", n)
	// An append at an index that is not a GC point reclaims nothing.
	idx := uint64(n/dedupGCEvery+1)*dedupGCEvery + 1
	send(idx, 1000, "long0", 0)
	check("append off a GC point", n+1)
	// Each GC point reclaims up to dedupGCBatch expired records.
	for k := 1; k <= 3; k++ {
		idx = (idx/dedupGCEvery + 1) * dedupGCEvery
		send(idx, 1000, fmt.Sprint("long", k), 0)
		check(fmt.Sprintf("GC point %d", k), 1+k+max(0, n-k*dedupGCBatch))
	}
}

func TestOpenShardChecksFormat(t *testing.T) {
	db := newMemDB(t)
	s, err := OpenShard(db, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenShard(db, 3); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if err := db.Set(s.k.meta(metaFormat), encodeUint(formatVersion+1), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenShard(db, 3); err == nil {
		t.Fatal("opened a shard of an unknown key format")
	}
	// Other shards of the same database are unaffected.
	if _, err := OpenShard(db, 4); err != nil {
		t.Fatalf("open another shard: %v", err)
	}
}

// Shards in one database are isolated: the same commands on two shard ids give the same
// StateChecksum (keys are compared without the shard prefix) except for the msg ids, which carry
// the shard id, and work on one leaves the other untouched.
func TestShardsShareDatabaseIsolated(t *testing.T) {
	db := newMemDB(t)
	a, err := OpenShard(db, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenShard(db, 2)
	if err != nil {
		t.Fatal(err)
	}
	emptyB := stateSum(t, b)
	res := appendOK(t, a, Stamp{Index: 1, Time: 5}, Append{Conv: "d:x:y", Sender: "x", ClientMsgID: "1",
		Kind: KindMessage, Body: []byte("hi"), Members: []string{"x", "y"}})
	if res.MsgID != (MsgID{Shard: 1, Index: 1}) {
		t.Fatalf("msg id %s", res.MsgID)
	}
	if stateSum(t, b) != emptyB {
		t.Fatal("writing shard 1 changed shard 2")
	}
	if _, err := b.ConvInfo("d:x:y"); !errors.Is(err, ErrNoConversation) {
		t.Fatalf("shard 2 sees shard 1's conversation: %v", err)
	}
}

// Readers run concurrently with the one writer (the documented contract). A read must never
// report a hole (ErrCorrupt) because the writer trimmed or appended between the read's steps.
func TestReadsConsistentWithConcurrentWriter(t *testing.T) {
	s := newMemShard(t, testShardID)
	const rounds = 300
	var wg sync.WaitGroup
	done := make(chan struct{})
	errc := make(chan error, 16)
	report := func(err error) {
		select {
		case errc <- err:
		default:
		}
	}
	reader := func(read func() error) {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := read(); err != nil {
				report(err)
				return
			}
		}
	}
	wg.Add(4)
	go reader(func() error {
		info, err := s.UserInfo("u")
		if err != nil {
			return err
		}
		r, err := s.ReadUser("u", 0, max(info.First, 1), Limit{})
		if err != nil {
			return fmt.Errorf("read user: %w", err)
		}
		for i, e := range r.Entries {
			if e.Seq != max(info.First, 1)+Position(i) {
				return fmt.Errorf("read user: hole at %d", e.Seq)
			}
		}
		return nil
	})
	go reader(func() error {
		info, err := s.UserInfo("u")
		if err != nil || info.Head < info.First {
			return err
		}
		_, err = s.Checksum("u", info.First, info.Head)
		if errors.Is(err, ErrCorrupt) {
			return fmt.Errorf("checksum: %w", err)
		}
		return nil // ErrInvalid is fine: the range moved since UserInfo
	})
	go reader(func() error {
		info, err := s.ConvInfo("d:u:v")
		if errors.Is(err, ErrNoConversation) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := s.ReadConvBefore("d:u:v", info.Head+1, Limit{Count: 4}); err != nil {
			return fmt.Errorf("read conv before: %w", err)
		}
		return nil
	})
	go reader(func() error {
		info, err := s.Outbox()
		if err != nil {
			return err
		}
		items, err := s.ReadOutbox(info.First, 8)
		if errors.Is(err, ErrInvalid) {
			return nil // trimmed since Outbox: reported, not skipped
		}
		if err != nil {
			return fmt.Errorf("read outbox: %w", err)
		}
		if len(items) > 0 && items[0].Pos != info.First {
			return fmt.Errorf("read outbox from %d returned %d first", info.First, items[0].Pos)
		}
		return nil
	})

	idx := uint64(0)
	for i := 0; i < rounds; i++ {
		idx++
		st := Stamp{Index: idx, Time: int64(idx)}
		appendOK(t, s, st, Append{Conv: "d:u:v", Sender: "u", ClientMsgID: fmt.Sprint(i), Kind: KindMessage,
			Body: []byte("x"), Members: []string{"u", "v"}})
		out, err := s.Outbox()
		if err != nil {
			t.Fatal(err)
		}
		idx++
		mustApply(t, s, Stamp{Index: idx, Time: int64(idx)}, func(tx *Tx) error {
			if _, err := tx.Deliver(st, outboxBatch(t, s, out.Head-1, out.Head)); err != nil {
				return err
			}
			if err := tx.TrimOutbox(out.Head - 1); err != nil {
				return err
			}
			if _, err := tx.TrimConv(st, "d:u:v", Retention{MaxCount: 3}); err != nil {
				return err
			}
			_, err := tx.TrimUser(st, "u", Retention{MaxCount: 3})
			return err
		})
	}
	close(done)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
}

func TestParseMsgID(t *testing.T) {
	for _, id := range []MsgID{{1, 1, 0}, {1<<32 - 1, 1<<64 - 1, 1<<32 - 1}} {
		got, err := ParseMsgID(id.String())
		if err != nil || got != id {
			t.Errorf("ParseMsgID(%q) = %v, %v", id.String(), got, err)
		}
	}
	for _, s := range []string{"", "1.2", "1.2.3.4", "a.1.0", "1.0.0", "4294967296.1.0", "1.-1.0", "1.1.x"} {
		if _, err := ParseMsgID(s); err == nil {
			t.Errorf("ParseMsgID(%q) accepted", s)
		}
	}
}

func TestNames(t *testing.T) {
	for k, want := range map[Kind]string{KindMessage: "message", KindMemberRemove: "member_remove", KindRoleChange: "role_change", KindDelivered: "delivered", KindEdit: "edit", KindReaction: "reaction", 0: "kind(0)", 11: "kind(11)"} {
		if k.String() != want || k.Valid() != (want[0] != 'k') {
			t.Errorf("Kind(%d) = %q valid=%v", k, k.String(), k.Valid())
		}
	}
	if ReadTooOld.String() != "too_old" || ReadStatus(9).String() != "read_status(9)" {
		t.Error("ReadStatus names")
	}
	if !ValidID("a~!") || ValidID("") || ValidID("a b") || ValidID(string(make([]byte, MaxIDLen+1))) {
		t.Error("ValidID")
	}
}

// Users pages through the shard's user logs in id order.
func TestUsersPages(t *testing.T) {
	s := newMemShard(t, testShardID)
	appendOK(t, s, Stamp{Index: 1, Time: 100}, Append{Conv: "g", Sender: "a", ClientMsgID: "c", Kind: KindGroupCreate,
		Members: []string{"b", "bb", "c"}})
	mustApply(t, s, Stamp{Index: 2, Time: 100}, func(tx *Tx) error {
		_, err := tx.Deliver(Stamp{Index: 2, Time: 100}, outboxBatch(t, s, 0, 1))
		return err
	})
	var got []string
	for after := ""; ; {
		ids, infos, err := s.Users(after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) == 0 {
			break
		}
		for i, id := range ids {
			if infos[i].Head != 1 {
				t.Fatalf("%s: %+v", id, infos[i])
			}
		}
		got = append(got, ids...)
		after = ids[len(ids)-1]
	}
	if fmt.Sprint(got) != "[a b bb c]" {
		t.Fatalf("users %v", got)
	}
}

// Conversation shows a conversation to its members only; UserConvs lists, per user, the
// conversations whose entries reached the user's log, in pages.
func TestConversationAndUserConvs(t *testing.T) {
	s := newMemShard(t, testShardID)
	appendOK(t, s, Stamp{Index: 1, Time: 100}, Append{Conv: "g1", Sender: "a", ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{"b"}})
	appendOK(t, s, Stamp{Index: 2, Time: 100}, Append{Conv: "d:a:c", Sender: "a", ClientMsgID: "m", Kind: KindMessage, Members: []string{"a", "c"}})
	appendOK(t, s, Stamp{Index: 3, Time: 100}, Append{Conv: "g1", Sender: "b", ClientMsgID: "r", Kind: KindMessage, Body: []byte("x")})
	appendOK(t, s, Stamp{Index: 4, Time: 100}, Append{Conv: "g1", Sender: "a", ClientMsgID: "rd", Kind: KindReceipt, ReadUpTo: 2})
	mustApply(t, s, Stamp{Index: 5, Time: 100}, func(tx *Tx) error {
		_, err := tx.Deliver(Stamp{Index: 5, Time: 100}, outboxBatch(t, s, 0, 4))
		return err
	})
	g, err := s.Conversation("g1", "a")
	if err != nil || g.Kind != ConvGroup || g.Info.Head != 3 || fmt.Sprint(g.Members) != "[a b]" || g.ReadMark != 2 {
		t.Fatalf("group as a: %+v %v", g, err)
	}
	d, err := s.Conversation("d:a:c", "c")
	if err != nil || d.Kind != ConvDirect || fmt.Sprint(d.Members) != "[a c]" || d.ReadMark != 0 {
		t.Fatalf("direct as c: %+v %v", d, err)
	}
	if _, err := s.Conversation("g1", "c"); !errors.Is(err, ErrNotMember) {
		t.Fatalf("non-member: %v", err)
	}
	if _, err := s.Conversation("nope", "a"); !errors.Is(err, ErrNoConversation) {
		t.Fatalf("missing: %v", err)
	}
	page1, err := s.UserConvs("a", "", 1)
	if err != nil || fmt.Sprint(page1) != "[d:a:c]" {
		t.Fatalf("a's first page: %v %v", page1, err)
	}
	page2, err := s.UserConvs("a", page1[0], 10)
	if err != nil || fmt.Sprint(page2) != "[g1]" {
		t.Fatalf("a's second page: %v %v", page2, err)
	}
	if c, _ := s.UserConvs("c", "", 10); fmt.Sprint(c) != "[d:a:c]" {
		t.Fatalf("c's conversations: %v", c)
	}
}

// TestRejectionCodes checks that every refusal survives the trip through its code.
func TestRejectionCodes(t *testing.T) {
	for _, s := range rejections {
		err := fmt.Errorf("%w: detail", s)
		code, ok := RejectionCode(err)
		if !ok {
			t.Fatalf("%v: no code", s)
		}
		back := RejectionFromCode(code, err.Error())
		if !errors.Is(back, s) || !Rejected(back) || back.Error() != err.Error() {
			t.Fatalf("%v: came back as %v", s, back)
		}
	}
	if _, ok := RejectionCode(ErrCorrupt); ok {
		t.Fatal("ErrCorrupt has a rejection code")
	}
	if RejectionFromCode(0, "x") != nil || RejectionFromCode(200, "x") != nil {
		t.Fatal("an unknown code rebuilt an error")
	}
}

// TestGroupStorageIsLinear: a group of n members costs O(n) bytes, not O(n²): the copies of its
// creation in the n members' logs do not each carry the n-member list (MaxInlineMembers). With
// 128-byte ids, a quadratic cost would make 1,000 members 16 times 250 members' bytes.
func TestGroupStorageIsLinear(t *testing.T) {
	size := func(n int) int {
		s := newMemShard(t, testShardID)
		members := make([]string, n-1)
		for i := range members {
			members[i] = fmt.Sprintf("%0128d", i)
		}
		appendOK(t, s, Stamp{Index: 1, Time: 1}, Append{Conv: "g", Sender: "owner", ClientMsgID: "c", Kind: KindGroupCreate, Members: members})
		st := Stamp{Index: 2, Time: 2}
		mustApply(t, s, st, func(tx *Tx) error { return deliverOwn(s, 0, 1)(tx, st) })
		read, err := s.ReadUser(members[0], 0, 1, Limit{})
		if err != nil || len(read.Entries) != 1 || read.Entries[0].Members != nil || read.Entries[0].MemberCount != n {
			t.Fatalf("a member's copy: %+v, %v", read.Entries, err)
		}
		if conv, err := s.ReadConv("g", 0, 1, Limit{}); err != nil || len(conv.Entries[0].Members) != n {
			t.Fatalf("the conversation log must keep the whole list: %v", err)
		}
		snap, _, _ := takeSnapshot(t, s)
		t.Logf("a group of %d members with 128-byte ids: %d bytes of state", n, len(snap))
		return len(snap)
	}
	small, large := size(250), size(1000)
	if ratio := float64(large) / float64(small); ratio > 5 {
		t.Fatalf("1,000 members cost %.1f times 250 members (%d vs %d bytes): not linear", ratio, large, small)
	}
}

// TestCopyForNamesOnlyTheDestinationsUsers shows what makes group deliveries O(n): a change of
// more than MaxInlineMembers users travels to each destination naming only its recipients, with
// the total, while a small change travels whole.
func TestCopyForNamesOnlyTheDestinationsUsers(t *testing.T) {
	var many []string
	for i := range MaxInlineMembers + 1 {
		many = append(many, fmt.Sprintf("u%02d", i))
	}
	big := Entry{Kind: KindMemberAdd, Members: many}
	got := big.CopyFor([]string{"owner", "u03", "u17"})
	if !slices.Equal(got.Members, []string{"u03", "u17"}) || got.MemberCount != len(many) {
		t.Fatalf("copy of a %d-member change: members %v, count %d; want [u03 u17], %d", len(many), got.Members, got.MemberCount, len(many))
	}
	if again := got.CopyFor([]string{"u03"}); !slices.Equal(again.Members, got.Members) {
		t.Fatalf("a copy is not cut again: %v", again.Members)
	}
	small := Entry{Kind: KindMemberAdd, Members: many[:3]}
	if got := small.CopyFor([]string{"u01"}); !slices.Equal(got.Members, many[:3]) || got.MemberCount != 0 {
		t.Fatalf("a small change travels whole: %v, count %d", got.Members, got.MemberCount)
	}
	if !slices.Equal(big.Members, many) {
		t.Fatal("CopyFor changed the entry it copies")
	}
}

// Shard.Resend answers a resend from the dedup record exactly as Append would (the original
// result, Duplicate set), refuses another payload under the same key as a conflict, and finds
// nothing for a request never applied or one whose record expired; it writes nothing.
func TestResendReadsDedupRecord(t *testing.T) {
	s := newMemShard(t, testShardID)
	req := Append{Conv: "d:a:b", Sender: "a", ClientMsgID: "m1", Kind: KindMessage, Body: []byte("hi"),
		Members: []string{"a", "b"}, DedupWindow: 100}
	orig := appendOK(t, s, Stamp{Index: 1, Time: 1000}, req)

	got, ok, err := s.Resend(&req, 1050)
	if err != nil || !ok || !got.Duplicate || got.MsgID != orig.MsgID || got.ConvSeq != orig.ConvSeq || got.Time != orig.Time {
		t.Fatalf("Resend of an applied send = %+v %v %v, want %+v as a duplicate", got, ok, err, orig)
	}
	if applied := appendOK(t, s, Stamp{Index: 2, Time: 1060}, req); applied != got {
		t.Fatalf("Append of the resend = %+v, Resend said %+v", applied, got)
	}
	before := stateSum(t, s)
	other := req
	other.Body = []byte("another")
	if _, _, err := s.Resend(&other, 1050); !errors.Is(err, ErrConflict) {
		t.Fatalf("Resend of another payload under the same cmid: %v, want ErrConflict", err)
	}
	fresh := req
	fresh.ClientMsgID = "m2"
	if _, ok, err := s.Resend(&fresh, 1050); ok || err != nil {
		t.Fatalf("Resend of a send never applied: %v %v, want nothing", ok, err)
	}
	if _, ok, err := s.Resend(&req, 1100); ok || err != nil {
		t.Fatalf("Resend once the record expired: %v %v, want nothing", ok, err)
	}
	if after := stateSum(t, s); after != before {
		t.Fatalf("Resend wrote: state %v, was %v", after, before)
	}
}
