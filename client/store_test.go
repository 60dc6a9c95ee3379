package client

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/syncd-dev/syncd/proto"
)

// stOpen opens the store in dir, closed at the end of the test (closing twice is harmless).
func stOpen(t *testing.T, dir string) *store {
	t.Helper()
	s, err := openStore(dir)
	if err != nil {
		t.Fatalf("openStore: %v", err)
	}
	t.Cleanup(func() { _ = s.close() })
	return s
}

// stReopen closes s and opens the store in dir again.
func stReopen(t *testing.T, s *store, dir string) *store {
	t.Helper()
	if err := s.close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return stOpen(t, dir)
}

// stMsg builds a message entry at user-log seq with msg_id "1.<convSeq>.0" (conversation
// entries of one conversation get distinct ids from their conv_seq).
func stMsg(seq proto.Position, conv string, convSeq proto.Position, sender, body string) proto.Entry {
	return proto.Entry{
		Seq: seq, Kind: proto.KindMessage, MsgID: stID(conv, convSeq), Conv: conv, ConvSeq: convSeq,
		Sender: sender, Time: int64(convSeq) * 1000, Body: []byte(body),
	}
}

// stID returns a canonical msg_id derived from the conversation and conv_seq.
func stID(conv string, convSeq proto.Position) proto.MsgID {
	return proto.MsgID(fmt.Sprintf("%d.%d.0", len(conv), convSeq))
}

// stApply applies a batch that must succeed and returns the applied count.
func stApply(t *testing.T, s *store, epoch proto.Epoch, entries ...proto.Entry) int {
	t.Helper()
	n, err := s.applyBatch(epoch, entries)
	if err != nil {
		t.Fatalf("applyBatch(%d, seq %d..): %v", epoch, entries[0].Seq, err)
	}
	return n
}

// stCursor asserts the stored cursor.
func stCursor(t *testing.T, s *store, epoch proto.Epoch, pos proto.Position) {
	t.Helper()
	e, p, err := s.cursor()
	if err != nil {
		t.Fatalf("cursor: %v", err)
	}
	if e != epoch || p != pos {
		t.Fatalf("cursor = (%d, %d), want (%d, %d)", e, p, epoch, pos)
	}
}

// stMessages returns the messages of conv, failing the test on error.
func stMessages(t *testing.T, s *store, conv string) []Message {
	t.Helper()
	ms, err := s.messages(conv)
	if err != nil {
		t.Fatalf("messages(%s): %v", conv, err)
	}
	return ms
}

// stBodies returns the bodies of ms.
func stBodies(ms []Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Body))
	}
	return out
}

// stEntryCount counts the stored user-log entries.
func stEntryCount(t *testing.T, s *store) int {
	t.Helper()
	db, err := s.read()
	if err != nil {
		t.Fatal(err)
	}
	defer s.mu.RUnlock()
	n := 0
	if err := storeScan(db, sk.entryPrefix(), func(_, _ []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestStoreStatusString(t *testing.T) {
	for s, want := range map[Status]string{
		StatusSending: "sending", StatusSent: "sent", StatusFailed: "failed", 0: "status(0)", 9: "status(9)",
	} {
		if got := s.String(); got != want {
			t.Errorf("Status(%d).String() = %q, want %q", s, got, want)
		}
	}
}

func TestStoreOutboxLifecycle(t *testing.T) {
	dir := t.TempDir()
	s := stOpen(t, dir)

	a, err := s.addOutbox(outboxItem{Kind: proto.KindMessage, Conv: "d:alice:bob", Peer: "bob", Body: []byte("hi")})
	if err != nil {
		t.Fatal(err)
	}
	if a.Seq != 1 || len(a.ClientMsgID) != 32 || a.Status != StatusSending || a.Created == 0 {
		t.Fatalf("first item = %+v: want seq 1, 32-hex cmid, sending, created", a)
	}
	b, err := s.addOutbox(outboxItem{Kind: proto.KindReceipt, Conv: "d:alice:bob", UpTo: 3, ClientMsgID: "my-cmid"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.addOutbox(outboxItem{Kind: proto.KindGroupCreate, Conv: "g:1", Members: []string{"bob", "carol"}})
	if err != nil {
		t.Fatal(err)
	}
	if b.Seq != 2 || b.ClientMsgID != "my-cmid" || c.Seq != 3 || c.ClientMsgID == a.ClientMsgID {
		t.Fatalf("items: %+v / %+v / %+v", a, b, c)
	}
	if _, err := s.addOutbox(outboxItem{Kind: proto.KindMessage, Conv: "x", ClientMsgID: "my-cmid"}); err == nil {
		t.Fatal("addOutbox with a cmid already used: no error")
	}
	if _, err := s.addOutbox(outboxItem{Kind: proto.KindMessage, Conv: "x", ClientMsgID: "bad cmid"}); err == nil {
		t.Fatal("addOutbox with an invalid cmid: no error")
	}

	// b is sent, c fails, a is retried.
	b.Status = StatusSent
	b.Attempts = 1
	b.Ack = &proto.Ack{ID: 7, MsgID: "1.5.0", Conv: "d:alice:bob", ConvSeq: 5, Time: 42, Epoch: 1}
	if err := s.updateOutbox(b); err != nil {
		t.Fatal(err)
	}
	c.Status, c.LastError, c.Attempts = StatusFailed, "not_member", 1
	if err := s.updateOutbox(c); err != nil {
		t.Fatal(err)
	}
	a.Attempts, a.NextAttempt, a.LastError = 2, 123456789, "timeout"
	if err := s.updateOutbox(a); err != nil {
		t.Fatal(err)
	}

	// Bad updates change nothing.
	bad := a
	bad.ClientMsgID = "other"
	if err := s.updateOutbox(bad); err == nil {
		t.Fatal("updateOutbox changing the cmid: no error")
	}
	if err := s.updateOutbox(outboxItem{Seq: 99, ClientMsgID: "x", Status: StatusSent}); err == nil {
		t.Fatal("updateOutbox of a missing item: no error")
	}
	bad = a
	bad.Status = 0
	if err := s.updateOutbox(bad); err == nil {
		t.Fatal("updateOutbox with status 0: no error")
	}

	check := func(s *store) {
		t.Helper()
		pending, err := s.pendingOutbox()
		if err != nil {
			t.Fatal(err)
		}
		if len(pending) != 1 || pending[0].Seq != 1 || pending[0].Attempts != 2 ||
			pending[0].NextAttempt != 123456789 || pending[0].LastError != "timeout" ||
			string(pending[0].Body) != "hi" || pending[0].Peer != "bob" {
			t.Fatalf("pending = %+v, want only item 1 with its retry state", pending)
		}
		all, err := s.listOutbox()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, it := range all {
			got = append(got, fmt.Sprintf("%d:%s", it.Seq, it.Status))
		}
		if want := []string{"1:sending", "2:sent", "3:failed"}; !slices.Equal(got, want) {
			t.Fatalf("listOutbox = %v, want %v", got, want)
		}
		sent, ok, err := s.outboxByCMID("my-cmid")
		if err != nil || !ok {
			t.Fatalf("outboxByCMID(my-cmid) = %v, %v", ok, err)
		}
		if sent.Ack == nil || sent.Ack.MsgID != "1.5.0" || sent.Ack.ConvSeq != 5 || sent.UpTo != 3 || sent.Kind != proto.KindReceipt {
			t.Fatalf("sent item = %+v (ack %+v)", sent, sent.Ack)
		}
		failed, ok, err := s.outboxByCMID(c.ClientMsgID)
		if err != nil || !ok || failed.LastError != "not_member" || !slices.Equal(failed.Members, []string{"bob", "carol"}) {
			t.Fatalf("failed item = %+v, %v, %v", failed, ok, err)
		}
		if _, ok, err := s.outboxByCMID("nope"); ok || err != nil {
			t.Fatalf("outboxByCMID(nope) = %v, %v", ok, err)
		}
	}
	check(s)

	// An app kill: everything is on disk, and the sequence goes on after the last item.
	s = stReopen(t, s, dir)
	check(s)
	d, err := s.addOutbox(outboxItem{Kind: proto.KindMessage, Conv: "d:alice:bob", Body: []byte("again")})
	if err != nil {
		t.Fatal(err)
	}
	if d.Seq != 4 {
		t.Fatalf("seq after reopen = %d, want 4", d.Seq)
	}
	// A user-initiated resend of the failed item: back to sending with the same cmid.
	c.Status = StatusSending
	if err := s.updateOutbox(c); err != nil {
		t.Fatal(err)
	}
	pending, err := s.pendingOutbox()
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, it := range pending {
		seqs = append(seqs, it.Seq)
	}
	if !slices.Equal(seqs, []uint64{1, 3, 4}) {
		t.Fatalf("pending seqs = %v, want [1 3 4]", seqs)
	}
}

func TestStoreOutboxConcurrentAdds(t *testing.T) {
	s := stOpen(t, t.TempDir())
	const n = 20
	var wg sync.WaitGroup
	seqs := make([]uint64, n)
	for i := range n {
		wg.Go(func() {
			it, err := s.addOutbox(outboxItem{Kind: proto.KindMessage, Conv: "c", Body: []byte{byte(i)}})
			if err != nil {
				t.Error(err)
			}
			seqs[i] = it.Seq
		})
	}
	wg.Wait()
	slices.Sort(seqs)
	for i, seq := range seqs {
		if seq != uint64(i+1) {
			t.Fatalf("seqs = %v: want 1..%d, each once", seqs, n)
		}
	}
}

func TestStoreApplyBatchAndCursor(t *testing.T) {
	dir := t.TempDir()
	s := stOpen(t, dir)
	stCursor(t, s, 0, 0)

	// A first batch adopts its epoch.
	n := stApply(t, s, 7,
		stMsg(1, "d:alice:bob", 1, "alice", "one"),
		stMsg(2, "d:alice:bob", 2, "bob", "two"),
		stMsg(3, "g:team", 1, "carol", "hello team"),
	)
	if n != 3 {
		t.Fatalf("applied %d, want 3", n)
	}
	stCursor(t, s, 7, 3)
	if n := stApply(t, s, 7, stMsg(4, "d:alice:bob", 3, "alice", "three")); n != 1 {
		t.Fatalf("applied %d, want 1", n)
	}
	stCursor(t, s, 7, 4)
	if n, err := s.applyBatch(7, nil); n != 0 || err != nil {
		t.Fatalf("empty batch: %d, %v", n, err)
	}

	ms := stMessages(t, s, "d:alice:bob")
	want := []Message{
		{Conv: "d:alice:bob", ConvSeq: 1, MsgID: stID("d:alice:bob", 1), Sender: "alice", Time: 1000, Body: []byte("one")},
		{Conv: "d:alice:bob", ConvSeq: 2, MsgID: stID("d:alice:bob", 2), Sender: "bob", Time: 2000, Body: []byte("two")},
		{Conv: "d:alice:bob", ConvSeq: 3, MsgID: stID("d:alice:bob", 3), Sender: "alice", Time: 3000, Body: []byte("three")},
	}
	if len(ms) != len(want) {
		t.Fatalf("messages = %+v", ms)
	}
	for i := range want {
		if ms[i].Conv != want[i].Conv || ms[i].ConvSeq != want[i].ConvSeq || ms[i].MsgID != want[i].MsgID ||
			ms[i].Sender != want[i].Sender || ms[i].Time != want[i].Time || !bytes.Equal(ms[i].Body, want[i].Body) || ms[i].Recalled {
			t.Errorf("message %d = %+v, want %+v", i, ms[i], want[i])
		}
	}
	convs, err := s.conversations()
	if err != nil || !slices.Equal(convs, []string{"d:alice:bob", "g:team"}) {
		t.Fatalf("conversations = %v, %v", convs, err)
	}
	if ms := stMessages(t, s, "g:te"); len(ms) != 0 {
		t.Fatalf("messages of a prefix of another conversation: %+v", ms)
	}
	if ms := stMessages(t, s, ""); len(ms) != 0 {
		t.Fatalf("messages of the empty conversation id: %+v", ms)
	}

	// Everything persists.
	s = stReopen(t, s, dir)
	stCursor(t, s, 7, 4)
	if got := stBodies(stMessages(t, s, "d:alice:bob")); !slices.Equal(got, []string{"one", "two", "three"}) {
		t.Fatalf("bodies after reopen = %v", got)
	}
	if n := stEntryCount(t, s); n != 4 {
		t.Fatalf("stored entries = %d, want 4", n)
	}
}

func TestStoreApplyBatchNotContiguous(t *testing.T) {
	s := stOpen(t, t.TempDir())
	stApply(t, s, 3, stMsg(1, "c", 1, "a", "one"), stMsg(2, "c", 2, "a", "two"))

	for name, tc := range map[string]struct {
		epoch   proto.Epoch
		entries []proto.Entry
		epochEr bool
	}{
		"gap before":         {3, []proto.Entry{stMsg(4, "c", 4, "a", "x")}, false},
		"overlap":            {3, []proto.Entry{stMsg(2, "c", 2, "a", "x"), stMsg(3, "c", 3, "a", "y")}, false},
		"hole inside":        {3, []proto.Entry{stMsg(3, "c", 3, "a", "x"), stMsg(5, "c", 5, "a", "y")}, false},
		"repeat inside":      {3, []proto.Entry{stMsg(3, "c", 3, "a", "x"), stMsg(3, "c", 4, "a", "y")}, false},
		"wrong epoch":        {4, []proto.Entry{stMsg(3, "c", 3, "a", "x")}, true},
		"epoch zero":         {0, []proto.Entry{stMsg(3, "c", 3, "a", "x")}, true},
		"empty, wrong epoch": {5, nil, true},
	} {
		t.Run(name, func(t *testing.T) {
			n, err := s.applyBatch(tc.epoch, tc.entries)
			if !errors.Is(err, errNotContiguous) || n != 0 {
				t.Fatalf("applyBatch = %d, %v; want errNotContiguous", n, err)
			}
			if tc.epochEr != errors.Is(err, errEpochMismatch) {
				t.Fatalf("errors.Is(%v, errEpochMismatch) = %v, want %v", err, !tc.epochEr, tc.epochEr)
			}
			// Nothing written: cursor, entries, view.
			stCursor(t, s, 3, 2)
			if n := stEntryCount(t, s); n != 2 {
				t.Fatalf("stored entries = %d, want 2", n)
			}
			if got := stBodies(stMessages(t, s, "c")); !slices.Equal(got, []string{"one", "two"}) {
				t.Fatalf("bodies = %v", got)
			}
		})
	}
	// The refetched batch then applies.
	if n := stApply(t, s, 3, stMsg(3, "c", 3, "a", "three")); n != 1 {
		t.Fatalf("applied %d", n)
	}
	stCursor(t, s, 3, 3)
}

func TestStoreApplyBatchFirstMustStartAtOne(t *testing.T) {
	s := stOpen(t, t.TempDir())
	if _, err := s.applyBatch(1, []proto.Entry{stMsg(2, "c", 1, "a", "x")}); !errors.Is(err, errNotContiguous) {
		t.Fatalf("first batch at seq 2: %v, want errNotContiguous", err)
	}
	stCursor(t, s, 0, 0)
}

func TestStoreDedupAcrossEpochReset(t *testing.T) {
	dir := t.TempDir()
	s := stOpen(t, dir)
	old := []proto.Entry{
		stMsg(1, "c", 1, "alice", "one"),
		stMsg(2, "c", 2, "bob", "two"),
		stMsg(3, "c", 3, "alice", "three"),
	}
	stApply(t, s, 1, old...)
	before := stMessages(t, s, "c")

	// The user log is re-created (epoch 2) and replays the same conversation entries at new
	// positions, plus one new message.
	if err := s.resetForEpoch(2); err != nil {
		t.Fatal(err)
	}
	stCursor(t, s, 2, 0)
	if n := stEntryCount(t, s); n != 0 {
		t.Fatalf("entries after reset = %d, want 0", n)
	}
	if got := stMessages(t, s, "c"); len(got) != 3 {
		t.Fatalf("history after reset = %+v, want kept", got)
	}
	if _, err := s.applyBatch(1, []proto.Entry{stMsg(1, "c", 4, "a", "x")}); !errors.Is(err, errEpochMismatch) {
		t.Fatalf("batch of the old epoch after reset: %v, want errEpochMismatch", err)
	}

	replay := make([]proto.Entry, len(old))
	copy(replay, old)
	replay[1].Body = []byte("tampered: must not replace the stored message")
	replay = append(replay, stMsg(4, "c", 4, "bob", "four"))
	n := stApply(t, s, 2, replay...)
	if n != 1 {
		t.Fatalf("applied %d, want 1 (only the new message)", n)
	}
	stCursor(t, s, 2, 4)
	after := stMessages(t, s, "c")
	if got := stBodies(after); !slices.Equal(got, []string{"one", "two", "three", "four"}) {
		t.Fatalf("bodies = %v", got)
	}
	for i := range before {
		if after[i].MsgID != before[i].MsgID || after[i].Time != before[i].Time || !bytes.Equal(after[i].Body, before[i].Body) {
			t.Fatalf("history changed: %+v -> %+v", before[i], after[i])
		}
	}
	if n := stEntryCount(t, s); n != 4 {
		t.Fatalf("entries = %d, want 4 (duplicates are stored under their seq too)", n)
	}

	// Duplicates within one batch count once.
	dup := stMsg(5, "c", 5, "bob", "five")
	dup2 := dup
	dup2.Seq = 6
	if n := stApply(t, s, 2, dup, dup2); n != 1 {
		t.Fatalf("applied %d, want 1", n)
	}
	if got := len(stMessages(t, s, "c")); got != 5 {
		t.Fatalf("%d messages, want 5", got)
	}
	if err := s.resetForEpoch(0); err == nil {
		t.Fatal("resetForEpoch(0): no error")
	}
}

func TestStoreRecall(t *testing.T) {
	s := stOpen(t, t.TempDir())
	stApply(t, s, 1, stMsg(1, "c", 1, "alice", "oops"), stMsg(2, "c", 2, "alice", "fine"))
	recall := proto.Entry{Seq: 3, Kind: proto.KindRecall, MsgID: "9.1.0", Conv: "c", ConvSeq: 3, Sender: "alice", Target: stID("c", 1)}
	if n := stApply(t, s, 1, recall); n != 1 {
		t.Fatalf("applied %d", n)
	}
	ms := stMessages(t, s, "c")
	if len(ms) != 2 || !ms[0].Recalled || ms[1].Recalled {
		t.Fatalf("messages = %+v: want the first recalled, the recall entry not listed", ms)
	}

	// A recall that arrives before its target (after a rebase) applies when the target arrives.
	early := proto.Entry{Seq: 4, Kind: proto.KindRecall, MsgID: "9.2.0", Conv: "c", ConvSeq: 5, Sender: "bob", Target: stID("c", 4)}
	stApply(t, s, 1, early)
	stApply(t, s, 1, stMsg(5, "c", 4, "bob", "late"))
	ms = stMessages(t, s, "c")
	if len(ms) != 3 || ms[2].ConvSeq != 4 || !ms[2].Recalled {
		t.Fatalf("messages = %+v: want the late target recalled", ms)
	}
}

func TestStoreReadMarks(t *testing.T) {
	s := stOpen(t, t.TempDir())
	receipt := func(seq proto.Position, convSeq proto.Position, reader string, upTo proto.Position) proto.Entry {
		return proto.Entry{Seq: seq, Kind: proto.KindReceipt, MsgID: proto.MsgID(fmt.Sprintf("2.%d.0", seq)),
			Conv: "c", ConvSeq: convSeq, Sender: reader, UpTo: upTo}
	}
	stApply(t, s, 1, stMsg(1, "c", 1, "alice", "a"), stMsg(2, "c", 2, "alice", "b"), stMsg(3, "c", 3, "alice", "c"))
	stApply(t, s, 1, receipt(4, 4, "bob", 2), receipt(5, 5, "carol", 3))
	stApply(t, s, 1, receipt(6, 6, "bob", 1)) // older mark: never backward
	for _, tc := range []struct {
		user string
		want proto.Position
	}{{"bob", 2}, {"carol", 3}, {"alice", 0}} {
		got, err := s.readMark("c", tc.user)
		if err != nil || got != tc.want {
			t.Errorf("readMark(c, %s) = %d, %v; want %d", tc.user, got, err, tc.want)
		}
	}
	stApply(t, s, 1, receipt(7, 7, "bob", 3))
	if got, _ := s.readMark("c", "bob"); got != 3 {
		t.Fatalf("readMark(c, bob) = %d, want 3", got)
	}
	if got, _ := s.readMark("other", "bob"); got != 0 {
		t.Fatalf("readMark(other, bob) = %d, want 0", got)
	}
	if ms := stMessages(t, s, "c"); len(ms) != 3 {
		t.Fatalf("receipts listed as messages: %+v", ms)
	}
}

func TestStoreMembership(t *testing.T) {
	s := stOpen(t, t.TempDir())
	member := func(seq proto.Position, kind proto.Kind, members ...string) proto.Entry {
		return proto.Entry{Seq: seq, Kind: kind, MsgID: proto.MsgID(fmt.Sprintf("3.%d.0", seq)),
			Conv: "g", ConvSeq: seq, Sender: "alice", Members: members}
	}
	check := func(want ...string) {
		t.Helper()
		got, err := s.members("g")
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("members(g) = %v, %v; want %v", got, err, want)
		}
	}
	stApply(t, s, 1, member(1, proto.KindGroupCreate, "bob", "carol"))
	check("alice", "bob", "carol") // the creator is a member
	stApply(t, s, 1, member(2, proto.KindMemberAdd, "dave"), member(3, proto.KindMemberRemove, "bob"))
	check("alice", "carol", "dave")
	stApply(t, s, 1, member(4, proto.KindMemberRemove, "alice", "carol"))
	check("dave")
	if got, err := s.members("g2"); err != nil || len(got) != 0 {
		t.Fatalf("members(g2) = %v, %v", got, err)
	}
	if ms := stMessages(t, s, "g"); len(ms) != 0 {
		t.Fatalf("membership entries listed as messages: %+v", ms)
	}
	if convs, _ := s.conversations(); !slices.Equal(convs, []string{"g"}) {
		t.Fatalf("conversations = %v", convs)
	}
}

func TestStoreUnknownKind(t *testing.T) {
	s := stOpen(t, t.TempDir())
	unknown := proto.Entry{Seq: 1, Kind: 99, MsgID: "4.1.0", Conv: "c", ConvSeq: 1, Sender: "x"}
	noConv := proto.Entry{Seq: 2, Kind: 100}
	if n := stApply(t, s, 1, unknown, noConv, stMsg(3, "c", 2, "a", "hi")); n != 3 {
		t.Fatalf("applied %d, want 3", n)
	}
	stCursor(t, s, 1, 3)
	if got := stBodies(stMessages(t, s, "c")); !slices.Equal(got, []string{"hi"}) {
		t.Fatalf("bodies = %v", got)
	}
	bad := stMsg(4, "c\x00d", 3, "a", "x")
	if _, err := s.applyBatch(1, []proto.Entry{bad}); err == nil {
		t.Fatal("entry with a 0x00 in its conversation id: no error")
	}
	stCursor(t, s, 1, 3)
}

func TestStoreRebaseTo(t *testing.T) {
	dir := t.TempDir()
	s := stOpen(t, dir)
	stApply(t, s, 1, stMsg(1, "c", 1, "a", "one"), stMsg(2, "c", 2, "a", "two"))

	// TooOld / Rebase in the same epoch: jump ahead, keep everything else.
	if err := s.rebaseTo(1, 1000); err != nil {
		t.Fatal(err)
	}
	stCursor(t, s, 1, 1000)
	if got := stBodies(stMessages(t, s, "c")); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("bodies = %v", got)
	}
	if _, err := s.applyBatch(1, []proto.Entry{stMsg(3, "c", 3, "a", "x")}); !errors.Is(err, errNotContiguous) {
		t.Fatalf("batch below the rebased cursor: %v, want errNotContiguous", err)
	}
	stApply(t, s, 1, stMsg(1001, "c", 3, "a", "three"))
	stCursor(t, s, 1, 1001)

	// Never backward within an epoch; a no-op jump is fine.
	if err := s.rebaseTo(1, 10); !errors.Is(err, errCursorBackward) {
		t.Fatalf("rebase backward: %v, want errCursorBackward", err)
	}
	if err := s.rebaseTo(1, 1001); err != nil {
		t.Fatal(err)
	}
	stCursor(t, s, 1, 1001)
	if err := s.rebaseTo(0, 5); err == nil {
		t.Fatal("rebaseTo epoch 0: no error")
	}

	// Another epoch: the old entries go, the history stays; the cursor survives a restart.
	if err := s.rebaseTo(2, 50); err != nil {
		t.Fatal(err)
	}
	s = stReopen(t, s, dir)
	stCursor(t, s, 2, 50)
	if n := stEntryCount(t, s); n != 0 {
		t.Fatalf("entries of the old epoch = %d, want 0", n)
	}
	if got := len(stMessages(t, s, "c")); got != 3 {
		t.Fatalf("%d messages, want 3", got)
	}
	stApply(t, s, 2, stMsg(51, "c", 4, "a", "four"))
	stCursor(t, s, 2, 51)
}

func TestStoreFormatVersion(t *testing.T) {
	dir := t.TempDir()
	s := stOpen(t, dir)
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	if err := s.close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, _, err := s.cursor(); !errors.Is(err, errStoreClosed) {
		t.Fatalf("cursor after close: %v, want errStoreClosed", err)
	}
	if _, err := s.addOutbox(outboxItem{Kind: proto.KindMessage, Conv: "c"}); !errors.Is(err, errStoreClosed) {
		t.Fatalf("addOutbox after close: %v, want errStoreClosed", err)
	}

	// A store of a future format is refused.
	db, err := pebble.Open(dir, &pebble.Options{Logger: storeLogger{slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set(sk.format(), storeUint(storeFormatVersion+1), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err := openStore(dir); err == nil {
		_ = s.close()
		t.Fatal("openStore of a newer format: no error")
	}

	// So is a database with data but no format key.
	other := filepath.Join(t.TempDir(), "other")
	db, err = pebble.Open(other, &pebble.Options{Logger: storeLogger{slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("foreign"), []byte("x"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err := openStore(other); err == nil {
		_ = s.close()
		t.Fatal("openStore of a foreign database: no error")
	}
}
