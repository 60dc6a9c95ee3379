package store

import (
	"errors"
	"slices"
	"testing"

	"github.com/syncd-dev/syncd/proto"
)

// srcMsg builds a message of large group conv as its source's Batch carries it: seq = conv_seq.
func srcMsg(conv string, convSeq proto.Position, sender, body string) proto.Entry {
	return stMsg(convSeq, conv, convSeq, sender, body)
}

// srcFollow builds the user-log entry at seq that starts (kind group_create or member_add) or
// ends (member_remove) user's following of large group conv at convSeq: Source set.
func srcFollow(seq proto.Position, kind proto.Kind, conv string, convSeq proto.Position, user string) proto.Entry {
	return proto.Entry{Seq: seq, Kind: kind, MsgID: stID(conv, convSeq), Conv: conv, ConvSeq: convSeq,
		Sender: "owner", Members: []string{user}, Source: true}
}

// srcCursor asserts the stored cursor of source conv; ok false: none.
func srcCursor(t *testing.T, s *Store, conv string, ok bool, epoch proto.Epoch, pos proto.Position) {
	t.Helper()
	cur, has, err := s.SourceCursor(conv)
	if err != nil {
		t.Fatalf("source cursor of %s: %v", conv, err)
	}
	if has != ok || has && (cur.Epoch != epoch || cur.Pos != pos) {
		t.Fatalf("source cursor of %s = %+v (stored %v), want (%d, %d) (stored %v)", conv, cur, has, epoch, pos, ok)
	}
}

// srcApply applies a source batch that must succeed and returns the count of new entries.
func srcApply(t *testing.T, s *Store, conv string, epoch proto.Epoch, after proto.Position, entries ...proto.Entry) int {
	t.Helper()
	a, err := s.ApplySource(conv, epoch, after, entries)
	if err != nil {
		t.Fatalf("ApplySource(%s, %d, after %d): %v", conv, epoch, after, err)
	}
	return a.Entries
}

// TestStoreSourceCursors: a source the device has no cursor for starts at the batch's after and
// adopts its epoch; from then on its batches continue the stored cursor under that epoch, or
// nothing is written; its entries are stored under (conv, conv_seq) and applied to the view like
// user-log entries (deduplicated by msg_id with what the user log or History brought); the
// cursors, listed in id order for SyncStart, survive a reopen; a new store follows no source.
func TestStoreSourceCursors(t *testing.T) {
	dir := t.TempDir()
	s := stOpen(t, dir)
	if cs, err := s.SourceCursors(); err != nil || len(cs) != 0 {
		t.Fatalf("a new store's source cursors: %v, %v; want none", cs, err)
	}
	// The user log: alice joins the large group "big" at conv_seq 4 (the gate sends it first).
	stApply(t, s, 7, srcFollow(1, proto.KindMemberAdd, "big", 4, "alice"))
	if start, ok, err := s.FollowStart("big"); err != nil || !ok || start != 4 {
		t.Fatalf("FollowStart = %d, %v, %v; want 4", start, ok, err)
	}
	// The source's first batch says where it starts: after 4.
	if n := srcApply(t, s, "big", 90, 4, srcMsg("big", 5, "bob", "five"), srcMsg("big", 6, "carol", "six")); n != 2 {
		t.Fatalf("applied %d, want 2", n)
	}
	srcCursor(t, s, "big", true, 90, 6)
	srcApply(t, s, "abc", 91, 0, srcMsg("abc", 1, "bob", "a1"))

	for name, tc := range map[string]struct {
		epoch   proto.Epoch
		after   proto.Position
		entries []proto.Entry
		epochEr bool
	}{
		"gap":                   {90, 0, []proto.Entry{srcMsg("big", 8, "bob", "x")}, false},
		"overlap":               {90, 0, []proto.Entry{srcMsg("big", 6, "bob", "x"), srcMsg("big", 7, "bob", "y")}, false},
		"hole inside":           {90, 0, []proto.Entry{srcMsg("big", 7, "bob", "x"), srcMsg("big", 9, "bob", "y")}, false},
		"after below cursor":    {90, 5, []proto.Entry{srcMsg("big", 6, "bob", "x")}, false},
		"after beyond, no mark": {90, 10, []proto.Entry{srcMsg("big", 11, "bob", "x")}, false},
		"other epoch":           {91, 0, []proto.Entry{srcMsg("big", 7, "bob", "x")}, true},
		"epoch zero":            {0, 0, []proto.Entry{srcMsg("big", 7, "bob", "x")}, true},
	} {
		t.Run(name, func(t *testing.T) {
			a, err := s.ApplySource("big", tc.epoch, tc.after, tc.entries)
			if !errors.Is(err, ErrNotContiguous) || a.Entries != 0 {
				t.Fatalf("ApplySource = %+v, %v; want ErrNotContiguous", a, err)
			}
			if tc.epochEr != errors.Is(err, ErrEpochMismatch) {
				t.Fatalf("errors.Is(%v, ErrEpochMismatch) = %v, want %v", err, !tc.epochEr, tc.epochEr)
			}
			srcCursor(t, s, "big", true, 90, 6)
			if got := stBodies(stMessages(t, s, "big")); !slices.Equal(got, []string{"five", "six"}) {
				t.Fatalf("bodies = %v", got)
			}
		})
	}
	// An after equal to the cursor continues it, as does none.
	srcApply(t, s, "big", 90, 6, srcMsg("big", 7, "bob", "seven"))
	// A message History already brought (or the user log, before the group was large) is
	// stored under its position but changes nothing.
	if _, err := s.ApplyHistory([]proto.Entry{srcMsg("big", 9, "bob", "nine")}); err != nil {
		t.Fatal(err)
	}
	dup := srcMsg("big", 9, "bob", "nine, tampered")
	if n := srcApply(t, s, "big", 90, 0, srcMsg("big", 8, "bob", "eight"), dup); n != 1 {
		t.Fatalf("applied %d, want 1 (the duplicate counts for nothing)", n)
	}
	srcCursor(t, s, "big", true, 90, 9)
	want := []string{"five", "six", "seven", "eight", "nine"}
	if got := stBodies(stMessages(t, s, "big")); !slices.Equal(got, want) {
		t.Fatalf("bodies = %v, want %v", got, want)
	}
	got, err := s.SourceEntries("big", 1, 100)
	if err != nil || len(got) != 5 || got[0].Seq != 5 || got[4].Seq != 9 || string(got[4].Body) != "nine, tampered" {
		t.Fatalf("stored entries of the source = %+v, %v; want 5..9 as received", got, err)
	}
	if n := stEntryCount(t, s); n != 1 {
		t.Fatalf("user-log entries = %d, want 1: a source's are not the user log's", n)
	}

	// A source's membership entries and recalls apply as the user log's do.
	srcApply(t, s, "big", 90, 0,
		proto.Entry{Seq: 10, Kind: proto.KindMemberAdd, MsgID: stID("big", 10), Conv: "big", ConvSeq: 10, Sender: "owner", Members: []string{"dave"}},
		proto.Entry{Seq: 11, Kind: proto.KindRecall, MsgID: stID("big", 11), Conv: "big", ConvSeq: 11, Sender: "bob", Target: stID("big", 8)})
	if m, err := s.Members("big"); err != nil || !slices.Contains(m, "dave") || !slices.Contains(m, "alice") {
		t.Fatalf("members = %v, %v; want alice and dave among them", m, err)
	}
	if ms := stMessages(t, s, "big"); !ms[3].Recalled || ms[2].Recalled {
		t.Fatalf("messages after the recall of eight: %+v", ms)
	}

	// An entry of another conversation, or at a conv_seq other than its seq, is refused; one
	// leaving them out gets the source's.
	other := srcMsg("other", 12, "bob", "x")
	if _, err := s.ApplySource("big", 90, 0, []proto.Entry{other}); err == nil || errors.Is(err, ErrNotContiguous) {
		t.Fatalf("an entry of another conversation: %v, want a refusal", err)
	}
	shifted := srcMsg("big", 12, "bob", "x")
	shifted.ConvSeq = 13
	if _, err := s.ApplySource("big", 90, 0, []proto.Entry{shifted}); err == nil {
		t.Fatal("an entry whose conv_seq is not its seq: stored")
	}
	bare := proto.Entry{Seq: 12, Kind: proto.KindMessage, MsgID: "bare.1", Sender: "bob", Body: []byte("twelve")}
	srcApply(t, s, "big", 90, 0, bare)
	if ms := stMessages(t, s, "big"); ms[len(ms)-1].ConvSeq != 12 || string(ms[len(ms)-1].Body) != "twelve" {
		t.Fatalf("an entry without conv and conv_seq: %+v", ms[len(ms)-1])
	}
	if bare.Conv != "" || bare.ConvSeq != 0 {
		t.Fatal("ApplySource changed the caller's entry")
	}
	if _, err := s.ApplySource("a\x00b", 90, 0, []proto.Entry{bare}); err == nil {
		t.Fatal("a source id with 0x00: stored")
	}

	s = stReopen(t, s, dir)
	wantCursors := []proto.SourceCursor{{Conv: "abc", Epoch: 91, Pos: 1}, {Conv: "big", Epoch: 90, Pos: 12}}
	if cs, err := s.SourceCursors(); err != nil || !slices.Equal(cs, wantCursors) {
		t.Fatalf("source cursors after a reopen: %v, %v; want %v", cs, err, wantCursors)
	}
	stCursor(t, s, 7, 1)
}

// TestStoreSourceRejoined: a source's batch may carry an after beyond the stored cursor only when
// the user log shows the user removed (at most one past the cursor: the rest of its period came)
// and added again exactly there, with no other following in between; anything else is a gap.
func TestStoreSourceRejoined(t *testing.T) {
	s := stOpen(t, t.TempDir())
	const conv = "big"
	stApply(t, s, 1, srcFollow(1, proto.KindGroupCreate, conv, 1, "alice"))
	srcApply(t, s, conv, 5, 1, srcMsg(conv, 2, "bob", "two"), srcMsg(conv, 3, "bob", "three"))
	stored := proto.Position(3)
	gap := func(after proto.Position, why string) {
		t.Helper()
		if _, err := s.ApplySource(conv, 5, after, []proto.Entry{srcMsg(conv, after+1, "bob", "x")}); !errors.Is(err, ErrNotContiguous) {
			t.Fatalf("%s: %v, want ErrNotContiguous", why, err)
		}
		srcCursor(t, s, conv, true, 5, stored)
	}
	// Removed at 5: the period's last entry is 4, which the device has not stored.
	stApply(t, s, 1, srcFollow(2, proto.KindMemberRemove, conv, 5, "alice"))
	gap(8, "no start mark at after")
	stApply(t, s, 1, srcFollow(3, proto.KindMemberAdd, conv, 8, "alice"))
	if start, ok, err := s.FollowStart(conv); err != nil || !ok || start != 8 {
		t.Fatalf("FollowStart = %d, %v, %v; want 8", start, ok, err)
	}
	gap(8, "entry 4 of the first period skipped")
	srcApply(t, s, conv, 5, 0, srcMsg(conv, 4, "bob", "four"))
	stored = 4
	gap(7, "an after with no start mark")
	// Removed again at 10 and added at 15: jumping from 4 to 15 skips the second period.
	stApply(t, s, 1, srcFollow(4, proto.KindMemberRemove, conv, 10, "alice"), srcFollow(5, proto.KindMemberAdd, conv, 15, "alice"))
	if _, err := s.ApplySource(conv, 5, 15, []proto.Entry{srcMsg(conv, 16, "bob", "x")}); !errors.Is(err, ErrNotContiguous) {
		t.Fatalf("a whole period skipped: %v, want ErrNotContiguous", err)
	}
	if _, err := s.ApplySource(conv, 6, 8, []proto.Entry{srcMsg(conv, 9, "bob", "x")}); !errors.Is(err, ErrEpochMismatch) {
		t.Fatalf("a rejoining in another epoch: %v, want ErrEpochMismatch", err)
	}
	// The second period, from its start, then the third.
	srcApply(t, s, conv, 5, 8, srcMsg(conv, 9, "bob", "nine"))
	srcCursor(t, s, conv, true, 5, 9)
	srcApply(t, s, conv, 5, 15, srcMsg(conv, 16, "bob", "sixteen"))
	srcCursor(t, s, conv, true, 5, 16)
	want := []string{"two", "three", "four", "nine", "sixteen"}
	if got := stBodies(stMessages(t, s, conv)); !slices.Equal(got, want) {
		t.Fatalf("bodies = %v, want %v", got, want)
	}
	// A mark already known from History (deduplicated) is noted all the same.
	add := srcFollow(6, proto.KindMemberRemove, conv, 20, "alice")
	if _, err := s.ApplyHistory([]proto.Entry{{Seq: 20, Kind: add.Kind, MsgID: add.MsgID, Conv: conv, ConvSeq: 20, Sender: "owner", Members: add.Members}}); err != nil {
		t.Fatal(err)
	}
	stApply(t, s, 1, add)
	if _, ok, err := s.FollowStart(conv); err != nil || ok {
		t.Fatalf("FollowStart after the removal at 20: %v, %v; want none", ok, err)
	}
}

// TestStoreSourceEnd: SourceEnd drops a source's cursor once it is stored up to last, and is a
// gap (nothing changes) while it is not; the entries and the view stay; the user added again,
// the source starts afresh at the after of its first batch.
func TestStoreSourceEnd(t *testing.T) {
	dir := t.TempDir()
	s := stOpen(t, dir)
	const conv = "big"
	stApply(t, s, 1, srcFollow(1, proto.KindMemberAdd, conv, 3, "alice"))
	srcApply(t, s, conv, 5, 3, srcMsg(conv, 4, "bob", "four"), srcMsg(conv, 5, "bob", "five"))
	if err := s.EndSource(conv, 6); !errors.Is(err, ErrNotContiguous) {
		t.Fatalf("SourceEnd beyond the cursor: %v, want ErrNotContiguous", err)
	}
	srcCursor(t, s, conv, true, 5, 5)
	if err := s.EndSource(conv, 5); err != nil {
		t.Fatal(err)
	}
	srcCursor(t, s, conv, false, 0, 0)
	if err := s.EndSource(conv, 5); err != nil {
		t.Fatalf("SourceEnd again: %v", err)
	}
	s = stReopen(t, s, dir)
	srcCursor(t, s, conv, false, 0, 0)
	if cs, err := s.SourceCursors(); err != nil || len(cs) != 0 {
		t.Fatalf("source cursors after SourceEnd: %v, %v", cs, err)
	}
	if got := stBodies(stMessages(t, s, conv)); !slices.Equal(got, []string{"four", "five"}) {
		t.Fatalf("bodies = %v", got)
	}
	// Removed at 6, added again at 9: the source's first batch starts after 9.
	stApply(t, s, 1, srcFollow(2, proto.KindMemberRemove, conv, 6, "alice"), srcFollow(3, proto.KindMemberAdd, conv, 9, "alice"))
	srcApply(t, s, conv, 5, 9, srcMsg(conv, 10, "bob", "ten"))
	srcCursor(t, s, conv, true, 5, 10)
	// A cursor beyond last (SourceEnd of a SyncStart naming a source not followed after its
	// position says last = that position) is dropped too.
	if err := s.EndSource(conv, 7); err != nil {
		t.Fatal(err)
	}
	srcCursor(t, s, conv, false, 0, 0)
}

// TestStoreSourceRebaseAndEpoch: a source's rebase jumps its cursor forward (never back within
// its epoch); one to another epoch, and an epoch change, drop its stored entries but keep the
// view; DropSource forgets the cursor; none of it touches the user log or other sources.
func TestStoreSourceRebaseAndEpoch(t *testing.T) {
	dir := t.TempDir()
	s := stOpen(t, dir)
	stApply(t, s, 1, stMsg(1, "d:alice:bob", 1, "bob", "direct"))
	srcApply(t, s, "big", 5, 0, srcMsg("big", 1, "bob", "one"), srcMsg("big", 2, "bob", "two"))
	srcApply(t, s, "other", 6, 0, srcMsg("other", 1, "bob", "o1"))

	if err := s.RebaseSource("big", 5, 100); err != nil {
		t.Fatal(err)
	}
	srcCursor(t, s, "big", true, 5, 100)
	if err := s.RebaseSource("big", 5, 50); err != nil {
		t.Fatal(err)
	}
	srcCursor(t, s, "big", true, 5, 100) // a replica behind: the cursor never moves back
	if _, err := s.ApplySource("big", 5, 0, []proto.Entry{srcMsg("big", 3, "bob", "x")}); !errors.Is(err, ErrNotContiguous) {
		t.Fatalf("a batch below the rebased cursor: %v", err)
	}
	srcApply(t, s, "big", 5, 0, srcMsg("big", 101, "bob", "hundred and one"))
	if got, _ := s.SourceEntries("big", 1, 200); len(got) != 3 {
		t.Fatalf("entries after a rebase in the epoch: %d, want 3", len(got))
	}
	if err := s.RebaseSource("big", 7, 20); err != nil {
		t.Fatal(err)
	}
	srcCursor(t, s, "big", true, 7, 20)
	if got, _ := s.SourceEntries("big", 1, 200); len(got) != 0 {
		t.Fatalf("entries of the old epoch after a rebase to another: %+v", got)
	}
	if err := s.RebaseSource("big", 0, 20); err == nil {
		t.Fatal("a rebase to epoch 0: no error")
	}
	if err := s.RebaseSource("new", 8, 30); err != nil {
		t.Fatal(err)
	}
	srcCursor(t, s, "new", true, 8, 30)

	srcApply(t, s, "big", 7, 0, srcMsg("big", 21, "bob", "twenty-one"))
	if err := s.ResetSourceForEpoch("big", 9, 20); err != nil {
		t.Fatal(err)
	}
	srcCursor(t, s, "big", true, 9, 20)
	if got, _ := s.SourceEntries("big", 1, 200); len(got) != 0 {
		t.Fatalf("entries after an epoch change: %+v", got)
	}
	if err := s.ResetSourceForEpoch("big", 0, 4); err == nil {
		t.Fatal("a reset to epoch 0: no error")
	}
	// Entries the new epoch delivers again are deduplicated by msg_id.
	if n := srcApply(t, s, "big", 9, 0, srcMsg("big", 21, "bob", "twenty-one"), srcMsg("big", 22, "bob", "twenty-two")); n != 1 {
		t.Fatalf("applied %d, want 1", n)
	}
	if err := s.DropSource("other"); err != nil {
		t.Fatal(err)
	}
	s = stReopen(t, s, dir)
	want := []proto.SourceCursor{{Conv: "big", Epoch: 9, Pos: 22}, {Conv: "new", Epoch: 8, Pos: 30}}
	if cs, err := s.SourceCursors(); err != nil || !slices.Equal(cs, want) {
		t.Fatalf("source cursors: %v, %v; want %v", cs, err, want)
	}
	if got := len(stMessages(t, s, "other")); got != 1 {
		t.Fatalf("a dropped source's messages: %d, want 1 kept", got)
	}
	stCursor(t, s, 1, 1)
	if got := len(stMessages(t, s, "big")); got != 5 {
		t.Fatalf("%d messages of big, want 5: history stays across rebases and epochs", got)
	}
}

// TestStoreOwnReceiptInLargeGroup: the user's own receipt in a large group reaches its log with
// conv_seq 0: it moves the user's own read mark (another device of the user read the group), is
// not a conversation entry (nothing in the view) and says nothing of the user's messages'
// statuses.
func TestStoreOwnReceiptInLargeGroup(t *testing.T) {
	s := stOpen(t, t.TempDir())
	if err := s.SetUser("alice"); err != nil {
		t.Fatal(err)
	}
	const conv = "big"
	stApply(t, s, 1, srcFollow(1, proto.KindMemberAdd, conv, 1, "alice"))
	srcApply(t, s, conv, 5, 1, srcMsg(conv, 2, "alice", "mine"), srcMsg(conv, 3, "bob", "his"))
	receipt := proto.Entry{Seq: 2, Kind: proto.KindReceipt, MsgID: "r.1", Conv: conv, Sender: "alice", UpTo: 3}
	a, err := s.ApplySync(0, 1, []proto.Entry{receipt})
	if err != nil || a.Entries != 1 || len(a.Moves) != 0 || len(a.Steps) != 0 {
		t.Fatalf("ApplySync = %+v, %v; want one entry, no peer move, no status step", a, err)
	}
	if m, err := s.ReadMark(conv, "alice"); err != nil || m != 3 {
		t.Fatalf("alice's read mark = %d, %v; want 3", m, err)
	}
	if st, err := s.StatusOf(conv, 2); err != nil || st != StatusSent {
		t.Fatalf("status of alice's message = %v, %v; want sent", st, err)
	}
	if ms := stMessages(t, s, conv); len(ms) != 2 || ms[0].ConvSeq != 2 || ms[1].ConvSeq != 3 {
		t.Fatalf("messages = %+v: want the two messages only", ms)
	}
	if head, err := s.ConvHead(conv); err != nil || head != 3 {
		t.Fatalf("ConvHead = %d, %v; want 3", head, err)
	}
	stCursor(t, s, 1, 2)
}
