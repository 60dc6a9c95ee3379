package log

import (
	"errors"
	"testing"
)

// TestRenewEpochs: a restored shard's logs, user and conversation, get a new epoch greater than
// both the one given and their old one; their entries and positions stay; a reader of the old
// epoch is told to continue if its cursor is within what the restore kept (the restore fence),
// else to resync; a cursor ack of the old epoch is refused, one of the new is taken.
func TestRenewEpochs(t *testing.T) {
	s := newMemShard(t, testShardID)
	const conv = "d:a:b"
	appendOK(t, s, Stamp{Index: 1, Time: 100}, Append{Conv: conv, Sender: "a", ClientMsgID: "1", Kind: KindMessage, Body: []byte("x"), Members: []string{"a", "b"}})
	mustApply(t, s, Stamp{Index: 2, Time: 101}, func(tx *Tx) error {
		_, err := tx.Deliver(Stamp{Index: 2, Time: 101}, outboxBatch(t, s, 0, 1))
		return err
	})
	before, entries := readAll(t, s, "b", false)
	convBefore, _ := readAll(t, s, conv, true)
	if len(entries) != 1 || before.Epoch == 0 {
		t.Fatalf("before: %+v, %d entries", before, len(entries))
	}
	n, err := s.RenewEpochs(50) // below the old epochs: each must still move forward
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 { // a's and b's logs and the conversation's
		t.Errorf("renewed %d logs, want 3", n)
	}
	after, again := readAll(t, s, "b", false)
	convAfter, _ := readAll(t, s, conv, true)
	if after.Epoch <= before.Epoch || convAfter.Epoch <= convBefore.Epoch {
		t.Errorf("epochs did not move forward: user %d → %d, conversation %d → %d", before.Epoch, after.Epoch, convBefore.Epoch, convAfter.Epoch)
	}
	if after.First != before.First || after.Head != before.Head || len(again) != 1 || again[0].MsgID != entries[0].MsgID {
		t.Errorf("entries changed: %+v %v, was %+v %v", after, again, before, entries)
	}
	if _, err := apply(t, s, Stamp{Index: 3, Time: 102}, func(tx *Tx) error {
		return tx.SetCursor(Stamp{Index: 3, Time: 102}, "b", "phone", Cursor{Epoch: before.Epoch, Pos: 1})
	}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a cursor of the old epoch: %v, want ErrInvalid", err)
	}
	mustApply(t, s, Stamp{Index: 4, Time: 103}, func(tx *Tx) error {
		return tx.SetCursor(Stamp{Index: 4, Time: 103}, "b", "phone", Cursor{Epoch: after.Epoch, Pos: 1})
	})
	// The restore fence: a cursor of the old epoch at or below the kept head holds in the new one
	// (the reader is told to continue), one past it does not.
	for _, c := range []struct {
		pos       Position
		continues bool
	}{{0, true}, {1, true}, {2, false}, {1 << 40, false}} {
		rd, err := s.ReadUser("b", before.Epoch, c.pos+1, Limit{})
		if err != nil || rd.Status != ReadEpochChanged || rd.Info.Epoch != after.Epoch || rd.Info.Continues != c.continues {
			t.Errorf("read from the old epoch's %d: %+v %v; want epoch changed to %d, continues %v", c.pos, rd, err, after.Epoch, c.continues)
		}
	}
	// Entries appended after the restore are of the new epoch: the fence stays where it was.
	appendOK(t, s, Stamp{Index: 5, Time: 104}, Append{Conv: conv, Sender: "a", ClientMsgID: "2", Kind: KindMessage, Body: []byte("y"), Members: []string{"a", "b"}})
	if rd, err := s.ReadConv(conv, convBefore.Epoch, 3, Limit{}); err != nil || rd.Status != ReadEpochChanged || rd.Info.Continues {
		t.Errorf("the conversation read past the fence: %+v %v; want epoch changed, not continuing", rd, err)
	}
	if rd, err := s.ReadConv(conv, convBefore.Epoch, 2, Limit{}); err != nil || rd.Status != ReadEpochChanged || !rd.Info.Continues {
		t.Errorf("the conversation read at the fence: %+v %v; want epoch changed, continuing", rd, err)
	}
	if n, err := s.RenewEpochs(Epoch(after.Epoch) + 1000); err != nil || n != 3 {
		t.Fatalf("second renewal: %d, %v", n, err)
	}
	if again, _ := readAll(t, s, "b", false); again.Epoch != after.Epoch+1000 {
		t.Errorf("epoch %d, want the one given, %d", again.Epoch, after.Epoch+1000)
	}
}

// TestRaiseOutbox: after a restore the next outbox record goes past the highest mark any
// destination holds, so that none takes it for one it applied before; a floor below the head
// changes nothing.
func TestRaiseOutbox(t *testing.T) {
	s := newMemShard(t, testShardID)
	appendOK(t, s, Stamp{Index: 1, Time: 100}, Append{Conv: "d:a:b", Sender: "a", ClientMsgID: "1", Kind: KindMessage, Body: []byte("x"), Members: []string{"a", "b"}})
	if err := s.RaiseOutbox(0); err != nil {
		t.Fatal(err)
	}
	if info, _ := s.Outbox(); info.Head != 1 {
		t.Fatalf("a floor below the head moved it: %+v", info)
	}
	if err := s.RaiseOutbox(40); err != nil {
		t.Fatal(err)
	}
	appendOK(t, s, Stamp{Index: 2, Time: 101}, Append{Conv: "d:a:b", Sender: "a", ClientMsgID: "2", Kind: KindMessage, Body: []byte("y"), Members: []string{"a", "b"}})
	items, err := s.ReadOutbox(1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || items[0].Pos != 1 || items[1].Pos != 41 {
		t.Fatalf("outbox after raising it to 40: %d items, positions %v", len(items), func() (p []uint64) {
			for _, it := range items {
				p = append(p, it.Pos)
			}
			return p
		}())
	}
	// A destination past the gap applies the new record: a batch (1, 41] holds it alone.
	mustApply(t, s, Stamp{Index: 3, Time: 102}, func(tx *Tx) error {
		_, err := tx.Deliver(Stamp{Index: 3, Time: 102}, outboxBatch(t, s, 0, 41))
		return err
	})
	if _, got := readAll(t, s, "b", false); len(got) != 2 {
		t.Errorf("b's log holds %d entries, want 2", len(got))
	}
}
