package storetest_test

import (
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/syncd-dev/syncd/client/internal/store"
	"github.com/syncd-dev/syncd/client/internal/store/storetest"
	"github.com/syncd-dev/syncd/proto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDamage: what Damage changes is what the store then reads — the entries of sub-log 0 and of
// another one, and the message view — so the helper damages the keys the store uses.
func TestDamage(t *testing.T) {
	dir := t.TempDir()
	s, err := store.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	msg := func(seq, convSeq proto.Position, conv, body string) proto.Entry {
		return proto.Entry{Seq: seq, Kind: proto.KindMessage, MsgID: proto.MsgID("1." + body + ".0"), Conv: conv,
			ConvSeq: convSeq, Sender: "alice", Body: []byte(body)}
	}
	if _, err := s.ApplyBatch(0, 7, []proto.Entry{msg(1, 1, "c", "a"), msg(2, 2, "c", "b"), msg(3, 3, "c", "c")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ApplyBatch(3, 9, []proto.Entry{msg(1, 1, "d", "x")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	d := storetest.Open(t, dir)
	d.SetEntryBody(0, 1, []byte("A"))
	d.DeleteEntry(0, 2)
	d.SetEntryBody(3, 1, []byte("X"))
	d.SetMessageBody("c", 3, []byte("C"))
	d.Close()

	s, err = store.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	entries, _, err := s.Entries(0, 1, 3)
	if err != nil || len(entries) != 2 || string(entries[0].Body) != "A" || entries[1].Seq != 3 || string(entries[1].Body) != "c" {
		t.Fatalf("sub-log 0 after the damage: %+v, %v; want 1 changed, 2 gone, 3 as it was", entries, err)
	}
	if entries, _, err := s.Entries(3, 1, 1); err != nil || len(entries) != 1 || string(entries[0].Body) != "X" {
		t.Fatalf("sub-log 3 after the damage: %+v, %v", entries, err)
	}
	msgs, err := s.Messages("c")
	var bodies []string
	for _, m := range msgs {
		bodies = append(bodies, string(m.Body))
	}
	if err != nil || !slices.Equal(bodies, []string{"a", "b", "C"}) {
		t.Fatalf("the view after the damage: %q, %v; want only c changed", bodies, err)
	}
}
