package store

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/syncd-dev/syncd/proto"
)

// stRun asserts the run of sub-log sub.
func stRun(t *testing.T, s *Store, sub uint32, want Run) {
	t.Helper()
	got, err := s.Run(sub)
	if err != nil || got != want {
		t.Fatalf("run of sub-log %d: %+v, %v; want %+v", sub, got, err, want)
	}
}

// stSeqs returns the positions of entries.
func stSeqs(entries []proto.Entry) []proto.Position {
	var out []proto.Position
	for _, e := range entries {
		out = append(out, e.Seq)
	}
	return out
}

// stRaw runs fn on the store's database, for tests that change it behind the store's back.
func stRaw(t *testing.T, s *Store, fn func(db *pebble.DB) error) {
	t.Helper()
	db, err := s.write()
	if err != nil {
		t.Fatal(err)
	}
	defer s.mu.Unlock()
	if err := fn(db); err != nil {
		t.Fatal(err)
	}
}

// TestStoreEntriesByRange: Entries returns exactly the stored entries of one sub-log in a range,
// as they were received, with the run they belong to; positions outside what is stored are
// simply absent, and a range up to the largest position does not wrap around.
func TestStoreEntriesByRange(t *testing.T) {
	s := stOpen(t, t.TempDir())
	stRun(t, s, 0, Run{Base: 1})
	var batch []proto.Entry
	for i := range proto.Position(5) {
		batch = append(batch, stMsg(i+1, "c", i+1, "alice", string(rune('a'+i))))
	}
	batch[2].Members = []string{"x"} // a field the view keeps nowhere: the entry is stored whole
	stApply(t, s, 7, batch...)
	if _, err := s.ApplyBatch(2, 9, []proto.Entry{stMsg(1, "d", 1, "bob", "other sub-log")}); err != nil {
		t.Fatal(err)
	}
	got, run, err := s.Entries(0, 2, 4)
	if err != nil || !reflect.DeepEqual(got, batch[1:4]) || run != (Run{Epoch: 7, Pos: 5, Base: 1}) {
		t.Fatalf("entries 2..4: %+v, run %+v, %v; want %+v", got, run, err, batch[1:4])
	}
	for _, c := range []struct {
		from, to proto.Position
		want     []proto.Position
	}{
		{1, 1, []proto.Position{1}},
		{4, 100, []proto.Position{4, 5}},
		{5, math.MaxUint64, []proto.Position{5}},
		{6, 9, nil},
		{4, 3, nil},
	} {
		got, _, err := s.Entries(0, c.from, c.to)
		if err != nil || !slices.Equal(stSeqs(got), c.want) {
			t.Errorf("entries %d..%d: %v, %v; want %v", c.from, c.to, stSeqs(got), err, c.want)
		}
	}
	if got, run, err := s.Entries(2, 1, 10); err != nil || len(got) != 1 || got[0].Conv != "d" || run.Epoch != 9 {
		t.Fatalf("sub-log 2: %+v, %+v, %v", got, run, err)
	}
	if _, _, err := s.Entries(proto.MaxSubLogs, 1, 1); err == nil {
		t.Fatal("entries of sub-log 16: no error")
	}

	// Bytes changed under the store: the read fails with ErrDamaged, not with a silent skip.
	stRaw(t, s, func(db *pebble.DB) error { return db.Set(sk.entry(0, 3), []byte{valueVersion, 0xc1}, pebble.Sync) })
	if _, _, err := s.Entries(0, 1, 5); !errors.Is(err, ErrDamaged) {
		t.Fatalf("a damaged entry: %v, want ErrDamaged", err)
	}
}

// TestStoreRuns: the run is where the entries stored without a break up to the cursor begin. A
// batch extends it; a rebase jumps over entries and starts a new one after the head, unless it
// jumps nowhere; an epoch change empties it; a store written before runs were kept counts from
// its first batch after; it survives a reopen.
func TestStoreRuns(t *testing.T) {
	dir := t.TempDir()
	s := stOpen(t, dir)
	stApply(t, s, 7, stMsg(1, "c", 1, "a", "one"), stMsg(2, "c", 2, "a", "two"))
	stRun(t, s, 0, Run{Epoch: 7, Pos: 2, Base: 1})
	if err := s.RebaseTo(0, 7, 2); err != nil { // no jump
		t.Fatal(err)
	}
	stRun(t, s, 0, Run{Epoch: 7, Pos: 2, Base: 1})
	if err := s.RebaseTo(0, 7, 100); err != nil {
		t.Fatal(err)
	}
	stRun(t, s, 0, Run{Epoch: 7, Pos: 100, Base: 101})
	stApply(t, s, 7, stMsg(101, "c", 3, "a", "three"))
	s = stReopen(t, s, dir)
	stRun(t, s, 0, Run{Epoch: 7, Pos: 101, Base: 101})
	if err := s.RebaseTo(0, 8, 50); err != nil {
		t.Fatal(err)
	}
	stRun(t, s, 0, Run{Epoch: 8, Pos: 50, Base: 51})
	if err := s.ResetForEpoch(0, 9); err != nil {
		t.Fatal(err)
	}
	stRun(t, s, 0, Run{Epoch: 9, Pos: 0, Base: 1})

	// A store from before runs: nothing under its cursor counts, since nobody recorded its breaks.
	stApply(t, s, 9, stMsg(1, "c", 4, "a", "four"), stMsg(2, "c", 5, "a", "five"))
	stRaw(t, s, func(db *pebble.DB) error { return db.Delete(sk.run(0), pebble.Sync) })
	stRun(t, s, 0, Run{Epoch: 9, Pos: 2, Base: 3})
	stApply(t, s, 9, stMsg(3, "c", 6, "a", "six"))
	stRun(t, s, 0, Run{Epoch: 9, Pos: 3, Base: 3})
}

// TestStoreRewindRepairs: Rewind moves the cursor back and drops the entries from a position on,
// in one step that survives a reopen, and only within the run of the epoch it names. The entries
// that come again replace the copies stored of their messages — the damaged body, a copy filed
// under another conv_seq — keeping a recall mark set from another sub-log; once the cursor is
// back where it was, the repair ends and a known msg_id is deduplicated again.
func TestStoreRewindRepairs(t *testing.T) {
	dir := t.TempDir()
	s := stOpen(t, dir)
	var orig []proto.Entry
	for i := range proto.Position(5) {
		orig = append(orig, stMsg(i+1, "c", i+1, "alice", string(rune('a'+i))))
	}
	stApply(t, s, 7, orig...)
	// Message 2 recalled through sub-log 1 (a conversation that moved there after a split).
	recall := proto.Entry{Seq: 1, Kind: proto.KindRecall, MsgID: "9.1.0", Conv: "c", ConvSeq: 6, Sender: "alice", Target: orig[1].MsgID}
	if _, err := s.ApplyBatch(1, 8, []proto.Entry{recall}); err != nil {
		t.Fatal(err)
	}
	// Damage: message 3's body in the view, message 4 filed under conv_seq 40 instead of 4.
	stRaw(t, s, func(db *pebble.DB) error {
		v, err := encode(&storedMsg{Kind: proto.KindMessage, MsgID: orig[2].MsgID, Sender: "alice", Body: []byte("garbage")})
		if err != nil {
			return err
		}
		moved, err := encode(&storedMsg{Kind: proto.KindMessage, MsgID: orig[3].MsgID, Sender: "alice", Body: []byte("d")})
		if err != nil {
			return err
		}
		return errors.Join(db.Set(sk.view("c", 3), v, nil), db.Delete(sk.view("c", 4), nil),
			db.Set(sk.view("c", 40), moved, nil), db.Set(sk.msgIndex(orig[3].MsgID), sk.msgRef("c", 40), pebble.Sync))
	})

	for _, c := range []struct {
		name  string
		epoch proto.Epoch
		from  proto.Position
	}{{"another epoch", 8, 2}, {"epoch 0", 0, 2}, {"beyond the cursor", 7, 6}, {"position 0", 7, 0}} {
		if ok, err := s.Rewind(0, c.epoch, c.from); ok || err != nil {
			t.Fatalf("rewind %s: %v, %v; want false", c.name, ok, err)
		}
	}
	stRun(t, s, 0, Run{Epoch: 7, Pos: 5, Base: 1})
	if ok, err := s.Rewind(0, 7, 2); !ok || err != nil {
		t.Fatalf("rewind to 2: %v, %v", ok, err)
	}
	s = stReopen(t, s, dir)
	stRun(t, s, 0, Run{Epoch: 7, Pos: 1, Base: 1, RepairTo: 5})
	stRun(t, s, 1, Run{Epoch: 8, Pos: 1, Base: 1})
	if got, _, err := s.Entries(0, 1, 10); err != nil || !slices.Equal(stSeqs(got), []proto.Position{1}) {
		t.Fatalf("entries after the rewind: %v, %v; want 1 only", stSeqs(got), err)
	}
	if r, err := s.Repairing(); !r || err != nil {
		t.Fatalf("repairing: %v, %v", r, err)
	}
	// The view stays until the entries come again.
	if got := stBodies(stMessages(t, s, "c")); !slices.Equal(got, []string{"a", "b", "garbage", "e", "d"}) {
		t.Fatalf("bodies after the rewind: %q", got)
	}
	if _, err := s.ApplyBatch(0, 7, []proto.Entry{orig[2]}); !errors.Is(err, ErrNotContiguous) {
		t.Fatalf("a batch past the rewound cursor: %v, want ErrNotContiguous", err)
	}

	// The replay, in two batches: nothing new (every msg_id is known), every copy replaced.
	if n := stApply(t, s, 7, orig[1:3]...); n != 0 {
		t.Fatalf("replayed entries counted as new: %d", n)
	}
	stRun(t, s, 0, Run{Epoch: 7, Pos: 3, Base: 1, RepairTo: 5})
	stApply(t, s, 7, orig[3:]...)
	stRun(t, s, 0, Run{Epoch: 7, Pos: 5, Base: 1})
	if r, err := s.Repairing(); r || err != nil {
		t.Fatalf("repairing after the replay: %v, %v", r, err)
	}
	msgs := stMessages(t, s, "c")
	if got := stBodies(msgs); !slices.Equal(got, []string{"a", "b", "c", "d", "e"}) {
		t.Fatalf("bodies after the replay: %q", got)
	}
	for _, m := range msgs {
		if m.Recalled != (m.MsgID == orig[1].MsgID) || m.ConvSeq != proto.Position(m.Body[0]-'a'+1) {
			t.Fatalf("message %+v after the replay: want conv_seq from its body, only b recalled", m)
		}
	}
	if got, _, err := s.Entries(0, 1, 5); err != nil || !reflect.DeepEqual(got, orig) {
		t.Fatalf("entries after the replay: %+v, %v", got, err)
	}

	// The repair is over: a known msg_id is deduplicated again.
	again := orig[0]
	again.Seq, again.Body = 6, []byte("changed")
	if n := stApply(t, s, 7, again); n != 0 {
		t.Fatalf("a known msg_id after the repair: %d new", n)
	}
	if got := stBodies(stMessages(t, s, "c")); got[0] != "a" {
		t.Fatalf("a known msg_id after the repair replaced the view: %q", got)
	}

	// A rebase ends a pending repair: it jumps over the entries to repair.
	if ok, err := s.Rewind(0, 7, 3); !ok || err != nil {
		t.Fatalf("rewind to 3: %v, %v", ok, err)
	}
	if err := s.RebaseTo(0, 7, 100); err != nil {
		t.Fatal(err)
	}
	stRun(t, s, 0, Run{Epoch: 7, Pos: 100, Base: 101})
	if r, err := s.Repairing(); r || err != nil {
		t.Fatalf("repairing after a rebase: %v, %v", r, err)
	}
}

// TestStoreContinueEpoch: an EpochChanged that continues (a restore that kept everything the
// device stored) moves the cursor of a sub-log or a source to the new epoch at the same position,
// keeping the stored entries and the run, so the next batch of the new epoch follows on; a cursor
// of epoch 0 and a source without a cursor stay as they are.
func TestStoreContinueEpoch(t *testing.T) {
	dir := t.TempDir()
	s := stOpen(t, dir)
	stApply(t, s, 7, stMsg(1, "c", 1, "a", "one"), stMsg(2, "c", 2, "a", "two"))
	srcApply(t, s, "big", 5, 0, srcMsg("big", 1, "bob", "b1"), srcMsg("big", 2, "bob", "b2"))
	if err := s.ContinueEpoch(0, 9); err != nil {
		t.Fatal(err)
	}
	if err := s.ContinueSourceEpoch("big", 11); err != nil {
		t.Fatal(err)
	}
	s = stReopen(t, s, dir)
	stRun(t, s, 0, Run{Epoch: 9, Pos: 2, Base: 1})
	srcCursor(t, s, "big", true, 11, 2)
	if got, _ := s.SourceEntries("big", 1, 10); len(got) != 2 {
		t.Fatalf("the source's entries after continuing: %d, want 2", len(got))
	}
	stApply(t, s, 9, stMsg(3, "c", 3, "a", "three"))
	stRun(t, s, 0, Run{Epoch: 9, Pos: 3, Base: 1})
	srcApply(t, s, "big", 11, 0, srcMsg("big", 3, "bob", "b3"))
	srcCursor(t, s, "big", true, 11, 3)

	if err := s.ContinueEpoch(1, 9); err != nil { // sub-log 1 stored nothing
		t.Fatal(err)
	}
	stRun(t, s, 1, Run{Epoch: 0, Pos: 0, Base: 1})
	if err := s.ContinueSourceEpoch("none", 4); err != nil {
		t.Fatal(err)
	}
	srcCursor(t, s, "none", false, 0, 0)
	if err := s.ContinueEpoch(0, 0); err == nil {
		t.Error("continuing in epoch 0: no error")
	}
}
