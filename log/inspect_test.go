// Tests of the operator lookups (LookupMsg, FindInUserLog, FindInOutbox, ConvMembers) on a real
// Pebble database on disk.
package log

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// inspectShard opens a shard on disk and appends, at indexes 1..5: a group g of alice, bob and
// carol; a message of alice (m1) and one of bob (m2); carol's receipt up to m2; alice's recall of
// m1. It returns the shard and the msg ids in that order.
func inspectShard(t *testing.T) (*Shard, []MsgID) {
	t.Helper()
	db, s := openDiskShard(t, t.TempDir(), testShardID)
	t.Cleanup(func() { db.Close() })
	reqs := []Append{
		{Conv: "g", Sender: "alice", ClientMsgID: "c", Kind: KindGroupCreate, Members: []string{"bob", "carol"}},
		{Conv: "g", Sender: "alice", ClientMsgID: "m1", Kind: KindMessage, Body: []byte("one")},
		{Conv: "g", Sender: "bob", ClientMsgID: "m2", Kind: KindMessage, Body: []byte("two")},
		{Conv: "g", Sender: "carol", ClientMsgID: "r", Kind: KindReceipt, ReadUpTo: 3},
		{Conv: "g", Sender: "alice", ClientMsgID: "x", Kind: KindRecall},
	}
	var ids []MsgID
	for i, req := range reqs {
		if req.Kind == KindRecall {
			req.Target = ids[1]
		}
		res := appendOK(t, s, Stamp{Index: uint64(i + 1), Time: int64(i+1) * 1e9}, req)
		ids = append(ids, res.MsgID)
	}
	return s, ids
}

func TestLookupMsg(t *testing.T) {
	s, ids := inspectShard(t)
	for _, tc := range []struct {
		id       MsgID
		seq      Position
		recalled bool
	}{
		{ids[1], 2, true}, // m1, recalled
		{ids[2], 3, false},
		{ids[4], 5, false}, // the recall is an entry of its own
	} {
		conv, seq, recalled, ok, err := s.LookupMsg(tc.id)
		if err != nil || !ok || conv != "g" || seq != tc.seq || recalled != tc.recalled {
			t.Errorf("LookupMsg(%s) = %q, %d, recalled %v, ok %v, %v; want g, %d, recalled %v",
				tc.id, conv, seq, recalled, ok, err, tc.seq, tc.recalled)
		}
	}
	for _, id := range []MsgID{{Shard: testShardID, Index: 99}, {Shard: testShardID + 1, Index: 2}, {Shard: testShardID, Index: 2, Sub: 1}} {
		if _, _, _, ok, err := s.LookupMsg(id); ok || err != nil {
			t.Errorf("LookupMsg(%s) of a message never assigned: ok %v, %v", id, ok, err)
		}
	}
}

func TestFindInUserLog(t *testing.T) {
	s, ids := inspectShard(t)
	find := func(uid string, id MsgID, limit int) (Position, bool, int) {
		t.Helper()
		pos, found, scanned, err := s.FindInUserLog(uid, id, limit)
		if err != nil {
			t.Fatalf("FindInUserLog(%s, %s): %v", uid, id, err)
		}
		return pos, found, scanned
	}
	// No log yet: nothing to scan.
	if pos, found, scanned := find("bob", ids[1], 100); found || pos != 0 || scanned != 0 {
		t.Fatalf("before delivery: pos %d found %v scanned %d", pos, found, scanned)
	}
	// Deliver the group creation and both messages: bob's log is create, m1, m2.
	mustApply(t, s, Stamp{Index: 6, Time: 6e9}, func(tx *Tx) error {
		_, err := tx.Deliver(Stamp{Index: 6, Time: 6e9}, outboxBatch(t, s, 0, 3))
		return err
	})
	if pos, found, scanned := find("bob", ids[1], 100); !found || pos != 2 || scanned != 2 {
		t.Errorf("m1 in bob's log: pos %d found %v scanned %d; want 2, true, 2 (from the head back)", pos, found, scanned)
	}
	// The recall is not delivered yet: the whole log is read, and it is not there.
	if pos, found, scanned := find("bob", ids[4], 100); found || pos != 0 || scanned != 3 {
		t.Errorf("undelivered recall: pos %d found %v scanned %d; want not found after 3", pos, found, scanned)
	}
	// The rest arrives. alice's log ends with the recall, whose Target is m1: only m1's own entry
	// matches.
	mustApply(t, s, Stamp{Index: 7, Time: 7e9}, func(tx *Tx) error {
		_, err := tx.Deliver(Stamp{Index: 7, Time: 7e9}, outboxBatch(t, s, 3, 5))
		return err
	})
	_, alice := readAll(t, s, "alice", false)
	if len(alice) != 5 || alice[4].Kind != KindRecall || alice[4].Target != ids[1] {
		t.Fatalf("alice's log: %v", alice)
	}
	if pos, found, scanned := find("alice", ids[1], 100); !found || pos != 2 || scanned != 4 {
		t.Errorf("m1 in alice's log: pos %d found %v scanned %d; want 2, true, 4", pos, found, scanned)
	}
	if pos, found, _ := find("alice", ids[4], 100); !found || pos != 5 {
		t.Errorf("the recall in alice's log: pos %d found %v; want 5", pos, found)
	}
	// The limit bounds the scan: m1 is 4 entries back.
	if pos, found, scanned := find("alice", ids[1], 3); found || pos != 0 || scanned != 3 {
		t.Errorf("limit 3: pos %d found %v scanned %d; want not found after 3", pos, found, scanned)
	}
	// A trimmed entry is not found, and only retained entries are read.
	mustApply(t, s, Stamp{Index: 8, Time: 8e9}, func(tx *Tx) error {
		_, err := tx.TrimUser(Stamp{Index: 8, Time: 8e9}, "alice", Retention{MaxCount: 2})
		return err
	})
	if pos, found, scanned := find("alice", ids[1], 100); found || pos != 0 || scanned != 2 {
		t.Errorf("after trimming to 2 entries: pos %d found %v scanned %d; want not found after 2", pos, found, scanned)
	}
	if _, _, _, err := s.FindInUserLog("", ids[1], 10); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty user id: %v, want ErrInvalid", err)
	}
}

func TestFindInOutbox(t *testing.T) {
	db, s := openDiskShard(t, t.TempDir(), testShardID)
	t.Cleanup(func() { db.Close() })
	// Messages at even Raft indexes only, so odd indexes are ids this shard never assigned and
	// the search must tell a miss between two records from a hit.
	var ids []MsgID
	for i := range 37 {
		idx := uint64(2 * (i + 1))
		req := Append{Conv: "d:alice:bob", Sender: "alice", ClientMsgID: fmt.Sprint("m", i), Kind: KindMessage, Body: []byte("x")}
		if i == 0 {
			req.Members = []string{"alice", "bob"}
		}
		ids = append(ids, appendOK(t, s, Stamp{Index: idx, Time: int64(idx)}, req).MsgID)
	}
	check := func(first int) {
		t.Helper()
		for i, id := range ids {
			it, ok, err := s.FindInOutbox(id)
			if err != nil {
				t.Fatalf("FindInOutbox(%s): %v", id, err)
			}
			if i < first {
				if ok {
					t.Errorf("%s was trimmed from the outbox, found at %d", id, it.Pos)
				}
				continue
			}
			if !ok || it.Pos != uint64(i+1) || it.Entry.MsgID != id || !slices.Equal(it.Recipients, []string{"alice", "bob"}) {
				t.Errorf("FindInOutbox(%s) = %+v, %v; want position %d", id, it, ok, i+1)
			}
			for _, miss := range []MsgID{{Shard: id.Shard, Index: id.Index - 1}, {Shard: id.Shard, Index: id.Index, Sub: 1}} {
				if it, ok, err := s.FindInOutbox(miss); ok || err != nil {
					t.Errorf("FindInOutbox(%s), never assigned: %+v, %v, %v", miss, it, ok, err)
				}
			}
		}
		if _, ok, err := s.FindInOutbox(MsgID{Shard: testShardID, Index: 1000}); ok || err != nil {
			t.Errorf("past the head: %v, %v", ok, err)
		}
	}
	check(0)
	mustApply(t, s, Stamp{Index: 100, Time: 100}, func(tx *Tx) error { return tx.TrimOutbox(10) })
	check(10)
	mustApply(t, s, Stamp{Index: 101, Time: 101}, func(tx *Tx) error { return tx.TrimOutbox(37) })
	check(37)
}

func TestConvMembers(t *testing.T) {
	s, _ := inspectShard(t)
	appendOK(t, s, Stamp{Index: 6, Time: 6e9}, Append{Conv: "g", Sender: "alice", ClientMsgID: "rm", Kind: KindMemberRemove, Members: []string{"bob"}})
	appendOK(t, s, Stamp{Index: 7, Time: 7e9}, Append{Conv: "d:bob:dave", Sender: "bob", ClientMsgID: "hi", Kind: KindMessage, Body: []byte("x"), Members: []string{"dave", "bob"}})
	for _, tc := range []struct {
		conv    string
		kind    ConvKind
		members []string
	}{
		{"g", ConvGroup, []string{"alice", "carol"}}, // bob left: no longer a member, whoever asks
		{"d:bob:dave", ConvDirect, []string{"bob", "dave"}},
	} {
		kind, members, err := s.ConvMembers(tc.conv)
		if err != nil || kind != tc.kind || !slices.Equal(members, tc.members) {
			t.Errorf("ConvMembers(%s) = %v, %v, %v; want %v, %v", tc.conv, kind, members, err, tc.kind, tc.members)
		}
	}
	if _, _, err := s.ConvMembers("nope"); !errors.Is(err, ErrNoConversation) {
		t.Errorf("unknown conversation: %v, want ErrNoConversation", err)
	}
}
