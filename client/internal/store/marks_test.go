package store

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/syncd-dev/syncd/proto"
)

// stMark builds a KindDelivered (read false) or KindReceipt (read true) entry of sender at
// user-log seq, conv_seq convSeq, covering conv up to upTo.
func stMark(seq proto.Position, conv string, convSeq proto.Position, sender string, upTo proto.Position, read bool) proto.Entry {
	kind := proto.KindDelivered
	if read {
		kind = proto.KindReceipt
	}
	return proto.Entry{Seq: seq, Kind: kind, MsgID: stID(conv, convSeq), Conv: conv, ConvSeq: convSeq, Sender: sender,
		Time: int64(convSeq) * 1000, UpTo: upTo}
}

// stSync applies a batch of sub-log 0 that must succeed and returns what it reported.
func stSync(t *testing.T, s *Store, epoch proto.Epoch, entries ...proto.Entry) Applied {
	t.Helper()
	a, err := s.ApplySync(0, epoch, entries)
	if err != nil {
		t.Fatalf("ApplySync(seq %d..): %v", entries[0].Seq, err)
	}
	return a
}

// stStatus asserts StatusOf(conv, seq).
func stStatus(t *testing.T, s *Store, conv string, seq proto.Position, want Status) {
	t.Helper()
	if got, err := s.StatusOf(conv, seq); err != nil || got != want {
		t.Fatalf("StatusOf(%s, %d) = %v, %v; want %v", conv, seq, got, err, want)
	}
}

// TestStoreDeliverySteps: the peer's KindDelivered and KindReceipt entries move its marks and the
// status of the user's messages they cover, each step reported once (delivered before read),
// by the batch that takes it, with the client_msg_id of a message this device queued; the
// user's own marks, and marks that do not move, report nothing; after a restart the statuses
// stand and nothing is reported again.
func TestStoreDeliverySteps(t *testing.T) {
	dir := t.TempDir()
	s := stOpen(t, dir)
	if err := s.SetUser("alice"); err != nil {
		t.Fatal(err)
	}
	const conv = "d:alice:bob"
	it, err := s.AddOutbox(OutboxItem{Kind: proto.KindMessage, Conv: conv, Peer: "bob", Body: []byte("one")})
	if err != nil {
		t.Fatal(err)
	}
	it.Status, it.Ack = StatusSent, &proto.Ack{MsgID: stID(conv, 1), Conv: conv, ConvSeq: 1}
	if err := s.UpdateOutbox(it); err != nil {
		t.Fatal(err)
	}

	a := stSync(t, s, 1, stMsg(1, conv, 1, "alice", "one"), stMsg(2, conv, 2, "bob", "two"), stMsg(3, conv, 3, "alice", "three"))
	if a.Entries != 3 || a.Moves != nil || a.Steps != nil {
		t.Fatalf("messages only: %+v", a)
	}
	stStatus(t, s, conv, 1, StatusSent)

	// bob's devices stored the conversation up to 1.
	a = stSync(t, s, 1, stMark(4, conv, 4, "bob", 1, false))
	wantMoves := []PeerMove{{Conv: conv, User: "bob", State: StatusDelivered, UpTo: 1}}
	wantSteps := []StatusStep{{Conv: conv, ConvSeq: 1, MsgID: stID(conv, 1), ClientMsgID: it.ClientMsgID, Status: StatusDelivered}}
	if !reflect.DeepEqual(a.Moves, wantMoves) || !reflect.DeepEqual(a.Steps, wantSteps) {
		t.Fatalf("delivered up to 1: moves %+v, steps %+v", a.Moves, a.Steps)
	}
	stStatus(t, s, conv, 1, StatusDelivered)
	stStatus(t, s, conv, 3, StatusSent)

	// alice's own receipt and delivery, and a mark of bob's that does not move: nothing.
	a = stSync(t, s, 1, stMark(5, conv, 5, "alice", 4, true), stMark(6, conv, 6, "alice", 5, false), stMark(7, conv, 7, "bob", 1, false))
	if a.Moves != nil || a.Steps != nil {
		t.Fatalf("own marks and a mark that stays: %+v", a)
	}
	stStatus(t, s, conv, 3, StatusSent)

	// bob reads up to 3: his receipt moves his delivered mark too; message 1 is read, message 3
	// delivered and read (a message 3 sent from another device: no client_msg_id).
	a = stSync(t, s, 1, stMark(8, conv, 8, "bob", 3, true))
	wantMoves = []PeerMove{{Conv: conv, User: "bob", State: StatusDelivered, UpTo: 3}, {Conv: conv, User: "bob", State: StatusRead, UpTo: 3}}
	wantSteps = []StatusStep{
		{Conv: conv, ConvSeq: 1, MsgID: stID(conv, 1), ClientMsgID: it.ClientMsgID, Status: StatusRead},
		{Conv: conv, ConvSeq: 3, MsgID: stID(conv, 3), Status: StatusDelivered},
		{Conv: conv, ConvSeq: 3, MsgID: stID(conv, 3), Status: StatusRead},
	}
	if !reflect.DeepEqual(a.Moves, wantMoves) || !reflect.DeepEqual(a.Steps, wantSteps) {
		t.Fatalf("read up to 3: moves %+v, steps %+v", a.Moves, a.Steps)
	}

	// An older delivery comes late: never backwards.
	a = stSync(t, s, 1, stMark(9, conv, 9, "bob", 2, false))
	if a.Moves != nil || a.Steps != nil {
		t.Fatalf("an older mark: %+v", a)
	}

	s = stReopen(t, s, dir)
	stStatus(t, s, conv, 1, StatusRead)
	stStatus(t, s, conv, 3, StatusRead)
	stStatus(t, s, conv, 10, StatusSent)
	a = stSync(t, s, 1, stMark(10, conv, 10, "bob", 3, true), stMsg(11, conv, 11, "alice", "four"))
	if a.Moves != nil || a.Steps != nil {
		t.Fatalf("after a restart, the same read mark again: %+v", a)
	}
	var statuses []Status
	for _, m := range stMessages(t, s, conv) {
		statuses = append(statuses, m.Status)
	}
	if want := []Status{StatusRead, 0, StatusRead, StatusSent}; !reflect.DeepEqual(statuses, want) {
		t.Fatalf("Messages' statuses %v, want %v (bob's message none)", statuses, want)
	}
	peers, all, err := s.PeerMarks(conv)
	if err != nil || !reflect.DeepEqual(peers, []PeerMark{{User: "bob", Delivered: 3, Read: 3}}) || all != (PeerMark{Delivered: 3, Read: 3}) {
		t.Fatalf("PeerMarks = %+v, %+v, %v", peers, all, err)
	}
}

// TestStoreGroupDelivery: in a group a message is delivered (read) as soon as one other member's
// mark covers it; a message and the mark covering it may come in one batch; a later member's
// lower mark moves that member's mark only.
func TestStoreGroupDelivery(t *testing.T) {
	s := stOpen(t, t.TempDir())
	if err := s.SetUser("alice"); err != nil {
		t.Fatal(err)
	}
	const conv = "team"
	a := stSync(t, s, 1, stMsg(1, conv, 1, "alice", "hi all"), stMsg(2, conv, 2, "alice", "anyone?"), stMark(3, conv, 3, "carol", 2, false))
	if len(a.Steps) != 2 || a.Steps[0].ConvSeq != 1 || a.Steps[1].ConvSeq != 2 || a.Steps[1].Status != StatusDelivered {
		t.Fatalf("message and delivery in one batch: steps %+v", a.Steps)
	}
	a = stSync(t, s, 1, stMark(4, conv, 4, "dave", 1, true))
	want := []PeerMove{{Conv: conv, User: "dave", State: StatusDelivered, UpTo: 1}, {Conv: conv, User: "dave", State: StatusRead, UpTo: 1}}
	if !reflect.DeepEqual(a.Moves, want) || len(a.Steps) != 1 || a.Steps[0] != (StatusStep{Conv: conv, ConvSeq: 1, MsgID: stID(conv, 1), Status: StatusRead}) {
		t.Fatalf("dave reads 1: moves %+v, steps %+v", a.Moves, a.Steps)
	}
	stStatus(t, s, conv, 1, StatusRead)
	stStatus(t, s, conv, 2, StatusDelivered)
	peers, all, err := s.PeerMarks(conv)
	wantPeers := []PeerMark{{User: "carol", Delivered: 2}, {User: "dave", Delivered: 1, Read: 1}}
	if err != nil || !reflect.DeepEqual(peers, wantPeers) || all != (PeerMark{Delivered: 2, Read: 1}) {
		t.Fatalf("PeerMarks = %+v, %+v, %v", peers, all, err)
	}
}

// TestStoreDeliveryUnknownUser: a store that has never been told its user (no Welcome yet)
// takes every sender for another member: marks move and are reported, but no message is known
// to be the user's, so no step is.
func TestStoreDeliveryUnknownUser(t *testing.T) {
	s := stOpen(t, t.TempDir())
	a := stSync(t, s, 1, stMsg(1, "team", 1, "alice", "hi"), stMark(2, "team", 2, "bob", 1, false))
	if len(a.Moves) != 1 || a.Steps != nil {
		t.Fatalf("unknown user: %+v", a)
	}
	stStatus(t, s, "team", 1, StatusDelivered)
}

// TestStoreConvInfoPeerMarks: a rebase's ConvInfo moves a direct conversation's peer marks (and
// the peer's own marks, when the id names it), without reporting, and never back; history
// entries move marks without reporting too.
func TestStoreConvInfoPeerMarks(t *testing.T) {
	s := stOpen(t, t.TempDir())
	if err := s.SetUser("alice"); err != nil {
		t.Fatal(err)
	}
	conv := proto.DirectConv("alice", "b:ob")
	if err := s.ApplyConvInfo("alice", proto.ConvInfo{Conv: conv, Kind: proto.ConvDirect, Head: 9, PeerDelivered: 7, PeerRead: 4}); err != nil {
		t.Fatal(err)
	}
	stStatus(t, s, conv, 4, StatusRead)
	stStatus(t, s, conv, 7, StatusDelivered)
	stStatus(t, s, conv, 8, StatusSent)
	if err := s.ApplyConvInfo("alice", proto.ConvInfo{Conv: conv, Kind: proto.ConvDirect, Head: 9, PeerDelivered: 2, PeerRead: 1}); err != nil {
		t.Fatal(err)
	}
	peers, all, err := s.PeerMarks(conv)
	if err != nil || !reflect.DeepEqual(peers, []PeerMark{{User: "b:ob", Delivered: 7, Read: 4}}) || all != (PeerMark{Delivered: 7, Read: 4}) {
		t.Fatalf("PeerMarks = %+v, %+v, %v", peers, all, err)
	}

	// A hashed id does not name the peer: the conversation's peer marks only.
	hashed := proto.DirectConv("alice", strings.Repeat("x", proto.MaxIDLen))
	if err := s.ApplyConvInfo("alice", proto.ConvInfo{Conv: hashed, Kind: proto.ConvDirect, Head: 3, PeerDelivered: 3}); err != nil {
		t.Fatal(err)
	}
	peers, all, err = s.PeerMarks(hashed)
	if err != nil || peers != nil || all != (PeerMark{Delivered: 3}) {
		t.Fatalf("hashed id: PeerMarks = %+v, %+v, %v", peers, all, err)
	}

	// History (a rebase's) moves marks silently.
	if _, err := s.ApplyHistory([]proto.Entry{stMark(0, "team", 5, "carol", 5, true)}); err != nil {
		t.Fatal(err)
	}
	stStatus(t, s, "team", 5, StatusRead)
}

func TestDirectPeer(t *testing.T) {
	for _, c := range []struct{ conv, user, want string }{
		{proto.DirectConv("alice", "bob"), "alice", "bob"},
		{proto.DirectConv("alice", "bob"), "bob", "alice"},
		{proto.DirectConv("a:b", "c%d"), "c%d", "a:b"},
		{proto.DirectConv("a:b", "c%3Ad"), "a:b", "c%3Ad"},
		{proto.DirectConv("alice", "bob"), "carol", ""},
		{"team", "alice", ""},
	} {
		if got := directPeer(c.conv, c.user); got != c.want {
			t.Errorf("directPeer(%q, %q) = %q, want %q", c.conv, c.user, got, c.want)
		}
	}
}

// TestStorePeerMarksBeforeUpgrade: a store written before the SDK kept peer marks has the other
// members' read marks only; they count (read implies delivered), so the statuses stand and the
// next mark reports only the steps it takes.
func TestStorePeerMarksBeforeUpgrade(t *testing.T) {
	s := stOpen(t, t.TempDir())
	if err := s.SetUser("alice"); err != nil {
		t.Fatal(err)
	}
	const conv = "d:alice:bob"
	stSync(t, s, 1, stMsg(1, conv, 1, "alice", "one"), stMsg(2, conv, 2, "alice", "two"), stMark(3, conv, 3, "bob", 1, true),
		stMark(4, conv, 4, "alice", 3, true))
	db, err := s.write() // as an older SDK left it: no peer marks, no delivered marks
	if err != nil {
		t.Fatal(err)
	}
	err = errors.Join(db.Delete(sk.peerMarks(conv), nil), db.Delete(sk.delivered(conv, "bob"), nil), db.Delete(sk.delivered(conv, "alice"), nil))
	s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	stStatus(t, s, conv, 1, StatusRead)
	stStatus(t, s, conv, 2, StatusSent)
	a := stSync(t, s, 1, stMark(5, conv, 5, "bob", 2, false))
	if len(a.Steps) != 1 || a.Steps[0].ConvSeq != 2 || a.Steps[0].Status != StatusDelivered {
		t.Fatalf("after the upgrade: steps %+v, want message 2 delivered only", a.Steps)
	}
}
