package client

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
)

// awaitEvents reads c's events until done says it has seen what it waits for, failing the test
// after timeout. done gets every event, in order.
func awaitEvents(t *testing.T, c *Client, timeout time.Duration, what string, done func(Event) bool) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-c.Events():
			if !ok {
				t.Fatalf("events closed while waiting for %s", what)
			}
			if done(ev) {
				return
			}
		case <-deadline:
			t.Fatalf("no %s within %v", what, timeout)
		}
	}
}

// TestSDKDeliveryStatusDirect: alice's message to bob goes sent → delivered (bob's device stored
// it: the server's delivered entry reaches alice's log) → read (bob's receipt), each step
// reported once with the client_msg_id Send returned, with bob's marks as DeliveryEvents;
// StatusOf, Lookup and Messages agree, and after a restart the statuses stand and no step is
// reported again.
func TestSDKDeliveryStatusDirect(t *testing.T) {
	srv := syncdtest.Start(t, func(c *syncd.Config) { c.Shards = 2 })
	conv := proto.DirectConv("alice", "bob")
	token, err := srv.MintToken("alice", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Addr: srv.Addr().String(), Token: token, Device: "phone", Fingerprint: srv.Fingerprint(),
		StoreDir: t.TempDir(), Logger: syncdtest.Logger(t)}
	alice := dialWith(t, cfg)
	bob := dialTo(t, srv, srv.Addr().String(), srv.Fingerprint(), "bob", "phone")
	nextEvent[SyncedEvent](t, alice, 10*time.Second)

	cmid, err := alice.Send(conv, "bob", []byte("hi bob"))
	if err != nil {
		t.Fatal(err)
	}
	var ack *proto.Ack
	var steps []Status
	var moves []DeliveryEvent
	track := func(ev Event) {
		switch e := ev.(type) {
		case StatusEvent:
			if e.ClientMsgID != cmid {
				t.Fatalf("status event of another message: %+v", e)
			}
			if e.Status == StatusSent {
				ack = e.Ack
			} else if ack == nil || e.Conv != conv || e.ConvSeq != ack.ConvSeq || e.MsgID != ack.MsgID {
				t.Fatalf("step %+v of the message acked %+v", e, ack)
			}
			steps = append(steps, e.Status)
		case DeliveryEvent:
			if e.Conv != conv || e.User != "bob" {
				t.Fatalf("delivery event %+v: want bob's in %s", e, conv)
			}
			moves = append(moves, e)
		}
	}
	awaitEvents(t, alice, 15*time.Second, "the delivered step", func(ev Event) bool {
		track(ev)
		return slices.Contains(steps, StatusDelivered)
	})
	if !slices.Equal(steps, []Status{StatusSent, StatusDelivered}) {
		t.Fatalf("steps %v, want sent then delivered", steps)
	}
	if len(moves) == 0 || moves[0].State != StatusDelivered || moves[0].UpTo < ack.ConvSeq {
		t.Fatalf("delivery events %+v: want bob's delivered mark at %d or beyond", moves, ack.ConvSeq)
	}
	if st, err := alice.StatusOf(conv, ack.ConvSeq); err != nil || st != StatusDelivered {
		t.Fatalf("StatusOf = %v, %v; want delivered", st, err)
	}
	if q, ok, err := alice.Lookup(cmid); err != nil || !ok || q.Status != StatusDelivered {
		t.Fatalf("Lookup = %+v, %v, %v; want delivered", q, ok, err)
	}

	if _, err := bob.MarkRead(conv, ack.ConvSeq); err != nil {
		t.Fatal(err)
	}
	awaitEvents(t, alice, 15*time.Second, "the read step", func(ev Event) bool {
		track(ev)
		return slices.Contains(steps, StatusRead)
	})
	if !slices.Equal(steps, []Status{StatusSent, StatusDelivered, StatusRead}) {
		t.Fatalf("steps %v, want sent, delivered, read", steps)
	}
	if last := moves[len(moves)-1]; last.State != StatusRead || last.UpTo != ack.ConvSeq {
		t.Fatalf("last delivery event %+v: want bob's read mark at %d", last, ack.ConvSeq)
	}
	marks, err := alice.PeerMarks(conv)
	if err != nil || len(marks) != 1 || marks[0].User != "bob" || marks[0].Read != ack.ConvSeq || marks[0].Delivered < ack.ConvSeq {
		t.Fatalf("PeerMarks = %+v, %v", marks, err)
	}

	// A restart: the statuses stand, and no step comes again.
	if err := alice.Close(); err != nil {
		t.Fatal(err)
	}
	alice = dialWith(t, cfg)
	if st, err := alice.StatusOf(conv, ack.ConvSeq); err != nil || st != StatusRead {
		t.Fatalf("after a restart, StatusOf = %v, %v; want read", st, err)
	}
	msgs, err := alice.Messages(conv)
	if err != nil || len(msgs) != 1 || msgs[0].Status != StatusRead {
		t.Fatalf("after a restart, Messages = %+v, %v; want the message read", msgs, err)
	}
	awaitEvents(t, alice, 10*time.Second, "SyncedEvent after the restart", func(ev Event) bool {
		switch e := ev.(type) {
		case StatusEvent:
			t.Fatalf("after a restart: %+v reported again", e)
		case DeliveryEvent:
			t.Fatalf("after a restart: %+v reported again", e)
		}
		_, synced := ev.(SyncedEvent)
		return synced
	})
}

// TestSDKDeliveryGroupCounts: in a group, alice's message is delivered as soon as one other
// member's device stored it and read once one member read it; Receipts counts the members who
// have it delivered and read, and Readers names them.
func TestSDKDeliveryGroupCounts(t *testing.T) {
	srv := syncdtest.Start(t, func(c *syncd.Config) { c.Shards = 2 })
	alice := dialTo(t, srv, srv.Addr().String(), srv.Fingerprint(), "alice", "phone")
	dialTo(t, srv, srv.Addr().String(), srv.Fingerprint(), "bob", "phone") // online: his device stores the message
	carol := dialTo(t, srv, srv.Addr().String(), srv.Fingerprint(), "carol", "phone")
	const conv = "team"
	if _, err := alice.CreateGroup(conv, []string{"bob", "carol"}); err != nil {
		t.Fatal(err)
	}
	if st := nextEvent[StatusEvent](t, alice, 10*time.Second); st.Status != StatusSent {
		t.Fatalf("create group: %+v", st)
	}
	cmid, err := alice.Send(conv, "", []byte("hi team"))
	if err != nil {
		t.Fatal(err)
	}
	var seq proto.Position
	awaitEvents(t, alice, 15*time.Second, "the delivered step", func(ev Event) bool {
		e, ok := ev.(StatusEvent)
		if ok && e.ClientMsgID == cmid && e.Status == StatusSent {
			seq = e.Ack.ConvSeq
		}
		return ok && e.ClientMsgID == cmid && e.Status == StatusDelivered
	})
	if _, err := carol.MarkRead(conv, seq); err != nil {
		t.Fatal(err)
	}
	awaitEvents(t, alice, 15*time.Second, "the read step", func(ev Event) bool {
		e, ok := ev.(StatusEvent)
		return ok && e.ClientMsgID == cmid && e.Status == StatusRead
	})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var counts []proto.ReceiptCount
	for { // bob's and carol's devices report on the server's schedule (250 ms)
		counts, err = alice.Receipts(ctx, conv, []proto.Position{seq})
		if err != nil {
			t.Fatal(err)
		}
		if len(counts) == 1 && counts[0].Delivered >= 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Receipts = %+v: bob's and carol's deliveries never counted", counts)
		case <-time.After(100 * time.Millisecond):
		}
	}
	// The sender is not left out of the counts: alice may count as delivered (her device
	// stored her message) but has not read it.
	if c := counts[0]; c.ConvSeq != seq || c.Members != 3 || c.Read != 1 {
		t.Fatalf("Receipts = %+v: want 3 members, read by carol only", c)
	}
	readers, _, more, err := alice.Readers(ctx, conv, seq, StatusRead, "", 0)
	if err != nil || !slices.Equal(readers, []string{"carol"}) || more {
		t.Fatalf("Readers(read) = %q, more %v, %v; want carol", readers, more, err)
	}
	delivered, _, _, err := alice.Readers(ctx, conv, seq, StatusDelivered, "", 0)
	if err != nil || !slices.Contains(delivered, "bob") || !slices.Contains(delivered, "carol") {
		t.Fatalf("Readers(delivered) = %q, %v; want bob and carol among them", delivered, err)
	}
	if _, _, _, err := alice.Readers(ctx, conv, seq, StatusSent, "", 0); err == nil {
		t.Fatal("Readers in state sent: no error")
	}
}
