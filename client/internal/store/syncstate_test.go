package store

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/syncd-dev/syncd/proto"
)

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
	if n, err := s.ApplyBatch(0, 7, nil); n != 0 || err != nil {
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
	convs, err := s.Conversations()
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
			n, err := s.ApplyBatch(0, tc.epoch, tc.entries)
			if !errors.Is(err, ErrNotContiguous) || n != 0 {
				t.Fatalf("applyBatch = %d, %v; want ErrNotContiguous", n, err)
			}
			if tc.epochEr != errors.Is(err, ErrEpochMismatch) {
				t.Fatalf("errors.Is(%v, ErrEpochMismatch) = %v, want %v", err, !tc.epochEr, tc.epochEr)
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
	if _, err := s.ApplyBatch(0, 1, []proto.Entry{stMsg(2, "c", 1, "a", "x")}); !errors.Is(err, ErrNotContiguous) {
		t.Fatalf("first batch at seq 2: %v, want ErrNotContiguous", err)
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
	if err := s.ResetForEpoch(0, 2); err != nil {
		t.Fatal(err)
	}
	stCursor(t, s, 2, 0)
	if n := stEntryCount(t, s); n != 0 {
		t.Fatalf("entries after reset = %d, want 0", n)
	}
	if got := stMessages(t, s, "c"); len(got) != 3 {
		t.Fatalf("history after reset = %+v, want kept", got)
	}
	if _, err := s.ApplyBatch(0, 1, []proto.Entry{stMsg(1, "c", 4, "a", "x")}); !errors.Is(err, ErrEpochMismatch) {
		t.Fatalf("batch of the old epoch after reset: %v, want ErrEpochMismatch", err)
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
	if err := s.ResetForEpoch(0, 0); err == nil {
		t.Fatal("resetForEpoch(0): no error")
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
	if _, err := s.ApplyBatch(0, 1, []proto.Entry{bad}); err == nil {
		t.Fatal("entry with a 0x00 in its conversation id: no error")
	}
	stCursor(t, s, 1, 3)
}

func TestStoreRebaseTo(t *testing.T) {
	dir := t.TempDir()
	s := stOpen(t, dir)
	stApply(t, s, 1, stMsg(1, "c", 1, "a", "one"), stMsg(2, "c", 2, "a", "two"))

	// TooOld / Rebase in the same epoch: jump ahead, keep everything else.
	if err := s.RebaseTo(0, 1, 1000); err != nil {
		t.Fatal(err)
	}
	stCursor(t, s, 1, 1000)
	if got := stBodies(stMessages(t, s, "c")); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("bodies = %v", got)
	}
	if _, err := s.ApplyBatch(0, 1, []proto.Entry{stMsg(3, "c", 3, "a", "x")}); !errors.Is(err, ErrNotContiguous) {
		t.Fatalf("batch below the rebased cursor: %v, want ErrNotContiguous", err)
	}
	stApply(t, s, 1, stMsg(1001, "c", 3, "a", "three"))
	stCursor(t, s, 1, 1001)

	// Never backward within an epoch; a no-op jump is fine.
	if err := s.RebaseTo(0, 1, 10); !errors.Is(err, ErrCursorBackward) {
		t.Fatalf("rebase backward: %v, want ErrCursorBackward", err)
	}
	if err := s.RebaseTo(0, 1, 1001); err != nil {
		t.Fatal(err)
	}
	stCursor(t, s, 1, 1001)
	if err := s.RebaseTo(0, 0, 5); err == nil {
		t.Fatal("rebaseTo epoch 0: no error")
	}

	// Another epoch: the old entries go, the history stays; the cursor survives a restart.
	if err := s.RebaseTo(0, 2, 50); err != nil {
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

// TestStoreSubLogs: a split user's sub-logs each have a cursor and entries of their own, checked
// for contiguity and epoch on their own; the vector cursor lists them up to the highest one
// stored, and survives a reopen; an epoch change or a rebase of one sub-log leaves the others
// as they are; messages are merged across sub-logs by msg_id.
func TestStoreSubLogs(t *testing.T) {
	dir := t.TempDir()
	s := stOpen(t, dir)
	if c, err := s.Cursors(); err != nil || !slices.Equal(c, []proto.SubCursor{{}}) {
		t.Fatalf("a new store's vector cursor: %v, %v; want one (0, 0)", c, err)
	}
	stApply(t, s, 7, stMsg(1, "a", 1, "alice", "before"))
	if n, err := s.ApplyBatch(2, 9, []proto.Entry{stMsg(1, "bb", 1, "alice", "in two")}); n != 1 || err != nil {
		t.Fatalf("sub-log 2's first batch: %d, %v", n, err)
	}
	if _, err := s.ApplyBatch(2, 9, []proto.Entry{stMsg(3, "bb", 2, "alice", "gap")}); !errors.Is(err, ErrNotContiguous) {
		t.Fatalf("a gap in sub-log 2: %v", err)
	}
	if _, err := s.ApplyBatch(1, 9, []proto.Entry{stMsg(2, "ccc", 1, "alice", "not from 1")}); !errors.Is(err, ErrNotContiguous) {
		t.Fatalf("sub-log 1's first batch from 2: %v", err)
	}
	// The same message delivered in another sub-log changes nothing in the view.
	if n, err := s.ApplyBatch(1, 8, []proto.Entry{stMsg(1, "a", 1, "alice", "before")}); n != 0 || err != nil {
		t.Fatalf("a message already stored, in sub-log 1: %d, %v", n, err)
	}
	want := []proto.SubCursor{{Epoch: 7, Pos: 1}, {Epoch: 8, Pos: 1}, {Epoch: 9, Pos: 1}}
	if c, err := s.Cursors(); err != nil || !slices.Equal(c, want) {
		t.Fatalf("vector cursor %v, %v; want %v", c, err, want)
	}
	if _, err := s.ApplyBatch(proto.MaxSubLogs, 1, []proto.Entry{stMsg(1, "dddd", 1, "alice", "x")}); err == nil {
		t.Fatal("a batch of sub-log 16 was stored")
	}
	if err := s.ResetForEpoch(1, 10); err != nil {
		t.Fatal(err)
	}
	if err := s.RebaseTo(2, 9, 5); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = stOpen(t, dir)
	want = []proto.SubCursor{{Epoch: 7, Pos: 1}, {Epoch: 10, Pos: 0}, {Epoch: 9, Pos: 5}}
	if c, err := s.Cursors(); err != nil || !slices.Equal(c, want) {
		t.Fatalf("after a reset of 1 and a rebase of 2, reopened: %v, %v; want %v", c, err, want)
	}
	if e, p, err := s.Cursor(); e != 7 || p != 1 || err != nil {
		t.Fatalf("the own log's cursor: (%d, %d), %v", e, p, err)
	}
	for conv, n := range map[string]int{"a": 1, "bb": 1} {
		if got := len(stMessages(t, s, conv)); got != n {
			t.Errorf("%s: %d messages, want %d", conv, got, n)
		}
	}
}
