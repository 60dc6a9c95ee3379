package client

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestSDKOpensOffline: an app whose node cannot be reached (a UDP relay in front of a real
// server, losing every packet) opens its client from the local store at once: what an earlier
// run stored is readable, the user is known, sends queue in the outbox, and the online-only
// queries say ErrOffline without waiting. OfflineEvent says so; once the node is reachable the
// client connects by itself (ConnectedEvent) and sends what was queued, in order.
func TestSDKOpensOffline(t *testing.T) {
	srv := syncdtest.Start(t, func(c *syncd.Config) { c.Shards = 2 })
	relay, err := testkit.NewUDPRelay(srv.Addr().String(), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(relay.Close)
	conv := proto.DirectConv("alice", "bob")
	tokA, err := srv.MintToken("alice", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	alice := prototest.Connect(t, srv.Addr().String(), srv.Fingerprint(), tokA, "alice", "phone")
	alice.Ack(&proto.Send{ID: alice.ID(), Conv: conv, ClientMsgID: "hi", Body: []byte("hi"), Peer: "bob"})
	token, err := srv.MintToken("bob", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Addr: relay.Addr(), Token: token, Device: "phone", Fingerprint: srv.Fingerprint(), StoreDir: t.TempDir(),
		Logger: syncdtest.Logger(t), RequestTimeout: time.Second}

	// An earlier run of the app, online, stored alice's message.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	earlier, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if e := nextEvent[SyncedEvent](t, earlier, 10*time.Second); e.Head != 1 {
		t.Fatalf("the earlier run synced up to %d, want 1", e.Head)
	}
	if err := earlier.Close(); err != nil {
		t.Fatal(err)
	}

	relay.SetDown(true) // the node is unreachable from now on
	began := time.Now()
	bob, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer bob.Close()
	if took := time.Since(began); took > time.Second {
		t.Fatalf("Open took %v with the node unreachable: it must not wait for a connection", took)
	}
	if bob.Connected() || bob.User() != "bob" {
		t.Fatalf("offline client: Connected %v, User %q; want false and bob (stored by the earlier run)", bob.Connected(), bob.User())
	}
	if msgs, err := bob.Messages(conv); err != nil || len(msgs) != 1 || string(msgs[0].Body) != "hi" {
		t.Fatalf("offline Messages: %+v, %v; want alice's hi", msgs, err)
	}
	if convs, err := bob.LocalConversations(); err != nil || !slices.Equal(convs, []string{conv}) {
		t.Fatalf("offline LocalConversations: %q, %v", convs, err)
	}
	qctx, qcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer qcancel()
	asked := time.Now()
	_, histErr := bob.History(qctx, conv, 0, 10)
	_, _, listErr := bob.Conversations(qctx, "", 10)
	_, membersErr := bob.FetchMembers(qctx, conv)
	if !errors.Is(histErr, ErrOffline) || !errors.Is(listErr, ErrOffline) || !errors.Is(membersErr, ErrOffline) {
		t.Fatalf("online-only queries offline: %v / %v / %v; want ErrOffline", histErr, listErr, membersErr)
	}
	if took := time.Since(asked); took > 100*time.Millisecond {
		t.Fatalf("the online-only queries took %v offline: they must answer at once", took)
	}
	var queued []string
	for _, body := range []string{"one", "two", "three"} {
		id, err := bob.Send(conv, "alice", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		queued = append(queued, id)
	}
	out, err := bob.Outbox()
	if err != nil || len(out) != 3 {
		t.Fatalf("outbox: %+v, %v", out, err)
	}
	for i, q := range out {
		if q.ClientMsgID != queued[i] || q.Status != StatusSending {
			t.Fatalf("outbox item %d: %+v, want %s sending", i, q, queued[i])
		}
	}
	if off := nextEvent[OfflineEvent](t, bob, 10*time.Second); off.Err == nil {
		t.Fatal("OfflineEvent without the reason")
	}

	relay.SetDown(false) // the node appears
	if c := nextEvent[ConnectedEvent](t, bob, 20*time.Second); c.Addr != relay.Addr() {
		t.Fatalf("connected to %s, want %s", c.Addr, relay.Addr())
	}
	var last proto.Position
	for i := range queued {
		st := nextEvent[StatusEvent](t, bob, 10*time.Second)
		if st.ClientMsgID != queued[i] || st.Status != StatusSent || st.Ack.ConvSeq <= last {
			t.Fatalf("status %d: %+v; want %s sent after conv_seq %d", i, st, queued[i], last)
		}
		last = st.Ack.ConvSeq
	}
	want := []string{"hi", "one", "two", "three"}
	testkit.WaitTrue(t, 10*time.Second, "bob's store to hold what it sent", func() bool {
		msgs, _ := bob.Messages(conv)
		var got []string
		for _, m := range msgs {
			got = append(got, string(m.Body))
		}
		return slices.Equal(got, want)
	})
	if _, err := bob.History(qctx, conv, 0, 10); err != nil {
		t.Fatalf("History once connected: %v", err)
	}
}
