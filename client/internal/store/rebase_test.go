package store

import (
	"errors"
	"slices"
	"testing"

	"github.com/syncd-dev/syncd/proto"
)

// TestStoreRebaseState: what a rebase loads — a conversation's state from ConvList, then its
// recent history — lands in the view as if the entries had come through the user log: members
// as the list says and then changed by the history's membership entries in order, the device
// user's read mark never moved back, messages deduplicated by msg_id against the user log that
// follows. Nothing of it is a user-log entry or moves the cursor.
func TestStoreRebaseState(t *testing.T) {
	dir := t.TempDir()
	s := stOpen(t, dir)
	if err := s.SetUser("bob"); err != nil {
		t.Fatal(err)
	}
	// What bob had before: message 1 of g, read up to 1.
	stApply(t, s, 7, stMsg(1, "g", 1, "alice", "one"))
	if err := s.ApplyConvInfo("bob", proto.ConvInfo{Conv: "g", Kind: proto.ConvGroup, Head: 5, First: 1,
		Members: []string{"alice", "bob", "carol"}, MemberCount: 3, ReadMark: 3}); err != nil {
		t.Fatal(err)
	}
	// A later ConvInfo with an older read mark does not move it back.
	if err := s.ApplyConvInfo("bob", proto.ConvInfo{Conv: "g", Kind: proto.ConvGroup, Head: 5, First: 1,
		Members: []string{"alice", "bob", "carol"}, MemberCount: 3, ReadMark: 2}); err != nil {
		t.Fatal(err)
	}
	hist := []proto.Entry{
		stMsg(4, "g", 4, "carol", "four"), // Seq is the conv_seq in a History page
		{Seq: 5, Kind: proto.KindMemberRemove, MsgID: stID("g", 5), Conv: "g", ConvSeq: 5, Sender: "alice", Members: []string{"carol"}},
		stMsg(6, "g", 6, "alice", "six"),
	}
	if n, err := s.ApplyHistory(hist); err != nil || n != 3 {
		t.Fatalf("ApplyHistory = %d, %v; want 3 new", n, err)
	}
	if n, err := s.ApplyHistory(hist); err != nil || n != 0 { // a rebase done again
		t.Fatalf("ApplyHistory again = %d, %v; want 0 new", n, err)
	}
	if got := stBodies(stMessages(t, s, "g")); !slices.Equal(got, []string{"one", "four", "six"}) {
		t.Fatalf("messages %q", got)
	}
	if m, _ := s.Members("g"); !slices.Equal(m, []string{"alice", "bob"}) {
		t.Fatalf("members %q, want carol removed by the history", m)
	}
	if rm, _ := s.ReadMark("g", "bob"); rm != 3 {
		t.Fatalf("bob's read mark %d, want 3", rm)
	}
	if h, err := s.ConvHead("g"); err != nil || h != 6 {
		t.Fatalf("ConvHead = %d, %v; want 6", h, err)
	}
	if h, err := s.ConvHead("none"); err != nil || h != 0 {
		t.Fatalf("ConvHead of an unknown conversation = %d, %v", h, err)
	}
	stCursor(t, s, 7, 1)
	if n := stEntryCount(t, s); n != 1 {
		t.Fatalf("%d user-log entries: history must not be stored as user-log entries", n)
	}
	// After the rebase the user log continues at 10 with an entry the history already had: it
	// moves the cursor and changes nothing.
	if err := s.RebaseTo(0, 7, 9); err != nil {
		t.Fatal(err)
	}
	if n := stApply(t, s, 7, stMsg(10, "g", 6, "alice", "six")); n != 0 {
		t.Fatalf("a user-log copy of a history entry applied %d times", n)
	}
	stCursor(t, s, 7, 10)

	// A big group's list is left out of ConvList: its members are incomplete until fetched.
	if err := s.ApplyConvInfo("bob", proto.ConvInfo{Conv: "big", Kind: proto.ConvGroup, MemberCount: 40}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Members("big"); !errors.Is(err, ErrMembersIncomplete) {
		t.Fatalf("Members of a group listed without members: %v", err)
	}
	// A direct conversation is known, with no members stored.
	if err := s.ApplyConvInfo("bob", proto.ConvInfo{Conv: "d:alice:bob", Kind: proto.ConvDirect, Members: []string{"alice", "bob"}, MemberCount: 2}); err != nil {
		t.Fatal(err)
	}
	if m, _ := s.Members("d:alice:bob"); len(m) != 0 {
		t.Fatalf("direct conversation members %q", m)
	}
	if convs, _ := s.Conversations(); !slices.Equal(convs, []string{"big", "d:alice:bob", "g"}) {
		t.Fatalf("conversations %q", convs)
	}
	if _, err := s.ApplyHistory([]proto.Entry{{Seq: 1, Kind: proto.KindMessage, MsgID: "1.1.0"}}); err == nil {
		t.Fatal("a history entry without conversation was stored")
	}

	s = stReopen(t, s, dir)
	if u, err := s.User(); err != nil || u != "bob" {
		t.Fatalf("User after reopening = %q, %v", u, err)
	}
	if got := stBodies(stMessages(t, s, "g")); !slices.Equal(got, []string{"one", "four", "six"}) {
		t.Fatalf("messages after reopening %q", got)
	}
}
