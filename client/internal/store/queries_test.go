package store

import (
	"fmt"
	"slices"
	"testing"

	"github.com/syncd-dev/syncd/proto"
)

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
		got, err := s.ReadMark("c", tc.user)
		if err != nil || got != tc.want {
			t.Errorf("readMark(c, %s) = %d, %v; want %d", tc.user, got, err, tc.want)
		}
	}
	stApply(t, s, 1, receipt(7, 7, "bob", 3))
	if got, _ := s.ReadMark("c", "bob"); got != 3 {
		t.Fatalf("readMark(c, bob) = %d, want 3", got)
	}
	if got, _ := s.ReadMark("other", "bob"); got != 0 {
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
		got, err := s.Members("g")
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
	if got, err := s.Members("g2"); err != nil || len(got) != 0 {
		t.Fatalf("members(g2) = %v, %v", got, err)
	}
	if ms := stMessages(t, s, "g"); len(ms) != 0 {
		t.Fatalf("membership entries listed as messages: %+v", ms)
	}
	if convs, _ := s.Conversations(); !slices.Equal(convs, []string{"g"}) {
		t.Fatalf("conversations = %v", convs)
	}
}
