package store

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/syncd-dev/syncd/proto"
)

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

	a, err := s.AddOutbox(OutboxItem{Kind: proto.KindMessage, Conv: "d:alice:bob", Peer: "bob", Body: []byte("hi")})
	if err != nil {
		t.Fatal(err)
	}
	if a.Seq != 1 || len(a.ClientMsgID) != 32 || a.Status != StatusSending || a.Created == 0 {
		t.Fatalf("first item = %+v: want seq 1, 32-hex cmid, sending, created", a)
	}
	b, err := s.AddOutbox(OutboxItem{Kind: proto.KindReceipt, Conv: "d:alice:bob", UpTo: 3, ClientMsgID: "my-cmid"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.AddOutbox(OutboxItem{Kind: proto.KindGroupCreate, Conv: "g:1", Members: []string{"bob", "carol"}})
	if err != nil {
		t.Fatal(err)
	}
	if b.Seq != 2 || b.ClientMsgID != "my-cmid" || c.Seq != 3 || c.ClientMsgID == a.ClientMsgID {
		t.Fatalf("items: %+v / %+v / %+v", a, b, c)
	}
	if _, err := s.AddOutbox(OutboxItem{Kind: proto.KindMessage, Conv: "x", ClientMsgID: "my-cmid"}); err == nil {
		t.Fatal("addOutbox with a cmid already used: no error")
	}
	if _, err := s.AddOutbox(OutboxItem{Kind: proto.KindMessage, Conv: "x", ClientMsgID: "bad cmid"}); err == nil {
		t.Fatal("addOutbox with an invalid cmid: no error")
	}

	// b is sent, c fails, a is retried.
	b.Status = StatusSent
	b.Attempts = 1
	b.Ack = &proto.Ack{ID: 7, MsgID: "1.5.0", Conv: "d:alice:bob", ConvSeq: 5, Time: 42, Epoch: 1}
	if err := s.UpdateOutbox(b); err != nil {
		t.Fatal(err)
	}
	c.Status, c.LastError, c.Attempts = StatusFailed, "not_member", 1
	if err := s.UpdateOutbox(c); err != nil {
		t.Fatal(err)
	}
	a.Attempts, a.NextAttempt, a.LastError = 2, 123456789, "timeout"
	if err := s.UpdateOutbox(a); err != nil {
		t.Fatal(err)
	}

	// Bad updates change nothing.
	bad := a
	bad.ClientMsgID = "other"
	if err := s.UpdateOutbox(bad); err == nil {
		t.Fatal("updateOutbox changing the cmid: no error")
	}
	if err := s.UpdateOutbox(OutboxItem{Seq: 99, ClientMsgID: "x", Status: StatusSent}); err == nil {
		t.Fatal("updateOutbox of a missing item: no error")
	}
	bad = a
	bad.Status = 0
	if err := s.UpdateOutbox(bad); err == nil {
		t.Fatal("updateOutbox with status 0: no error")
	}

	check := func(s *Store) {
		t.Helper()
		pending, err := s.PendingOutbox()
		if err != nil {
			t.Fatal(err)
		}
		if len(pending) != 1 || pending[0].Seq != 1 || pending[0].Attempts != 2 ||
			pending[0].NextAttempt != 123456789 || pending[0].LastError != "timeout" ||
			string(pending[0].Body) != "hi" || pending[0].Peer != "bob" {
			t.Fatalf("pending = %+v, want only item 1 with its retry state", pending)
		}
		all, err := s.ListOutbox()
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
		sent, ok, err := s.OutboxByCMID("my-cmid")
		if err != nil || !ok {
			t.Fatalf("outboxByCMID(my-cmid) = %v, %v", ok, err)
		}
		if sent.Ack == nil || sent.Ack.MsgID != "1.5.0" || sent.Ack.ConvSeq != 5 || sent.UpTo != 3 || sent.Kind != proto.KindReceipt {
			t.Fatalf("sent item = %+v (ack %+v)", sent, sent.Ack)
		}
		failed, ok, err := s.OutboxByCMID(c.ClientMsgID)
		if err != nil || !ok || failed.LastError != "not_member" || !slices.Equal(failed.Members, []string{"bob", "carol"}) {
			t.Fatalf("failed item = %+v, %v, %v", failed, ok, err)
		}
		if _, ok, err := s.OutboxByCMID("nope"); ok || err != nil {
			t.Fatalf("outboxByCMID(nope) = %v, %v", ok, err)
		}
	}
	check(s)

	// An app kill: everything is on disk, and the sequence goes on after the last item.
	s = stReopen(t, s, dir)
	check(s)
	d, err := s.AddOutbox(OutboxItem{Kind: proto.KindMessage, Conv: "d:alice:bob", Body: []byte("again")})
	if err != nil {
		t.Fatal(err)
	}
	if d.Seq != 4 {
		t.Fatalf("seq after reopen = %d, want 4", d.Seq)
	}
	// A user-initiated resend of the failed item: back to sending with the same cmid.
	c.Status = StatusSending
	if err := s.UpdateOutbox(c); err != nil {
		t.Fatal(err)
	}
	pending, err := s.PendingOutbox()
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
			it, err := s.AddOutbox(OutboxItem{Kind: proto.KindMessage, Conv: "c", Body: []byte{byte(i)}})
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
