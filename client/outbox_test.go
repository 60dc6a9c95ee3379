package client

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
)

// TestOutboxConversationsGoOnWithoutEachOther (PROTOCOL §8.3, 7): a message to one conversation
// that waits for its retry — a proxy turns the server's Acks of that conversation into
// unavailable, as a node that cannot reach the conversation's shard answers — holds back that
// conversation's later message, but not another conversation's messages, which are sent at once.
// Once the first conversation's answers come through, its messages are acked in the order they
// were queued.
func TestOutboxConversationsGoOnWithoutEachOther(t *testing.T) {
	srv := syncdtest.Start(t, func(c *syncd.Config) { c.Shards = 2 })
	held, free := proto.DirectConv("alice", "bob"), proto.DirectConv("alice", "carol")
	var hold atomic.Bool
	hold.Store(true)
	proxy := prototest.NewProxy(t, srv.Addr().String(), srv.Fingerprint(), func(f proto.Frame) proto.Frame {
		if a, ok := f.(*proto.Ack); ok && a.Conv == held && hold.Load() {
			return &proto.Error{ID: a.ID, Code: proto.CodeUnavailable, Message: "test: the shard has no leader"}
		}
		return f
	})
	token, err := srv.MintToken("alice", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	alice := dialWith(t, Config{Addr: proxy.Addr(), Token: token, Device: "phone", Fingerprint: proxy.Fingerprint(),
		// The held message's first retry comes after 5-7.5 s: long after the other
		// conversation's messages, unless they wait for it.
		Retry: []time.Duration{5 * time.Second, 100 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}})
	send := func(conv, peer, body string) string {
		t.Helper()
		id, err := alice.Send(conv, peer, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	h1 := send(held, "bob", "h1")
	f1 := send(free, "carol", "f1")
	h2 := send(held, "bob", "h2")
	f2 := send(free, "carol", "f2")

	acks := map[string]*proto.Ack{}
	for len(acks) < 2 {
		st := nextEvent[StatusEvent](t, alice, 4*time.Second)
		if st.Status != StatusSent || (st.ClientMsgID != f1 && st.ClientMsgID != f2) {
			t.Fatalf("%+v while the held conversation waits; want f1 and f2 sent", st)
		}
		acks[st.ClientMsgID] = st.Ack
	}
	if acks[f2].ConvSeq <= acks[f1].ConvSeq {
		t.Fatalf("f2 at conv_seq %d, f1 at %d: not in queue order", acks[f2].ConvSeq, acks[f1].ConvSeq)
	}
	q1, _, _ := alice.Lookup(h1)
	q2, _, _ := alice.Lookup(h2)
	if q1.Status != StatusSending || q1.Attempts != 1 || q2.Status != StatusSending || q2.Attempts != 0 {
		t.Fatalf("held conversation: h1 %v after %d attempts, h2 %v after %d; want h1 waiting for its retry "+
			"after one, h2 not sent before it", q1.Status, q1.Attempts, q2.Status, q2.Attempts)
	}

	hold.Store(false)
	for _, want := range []string{h1, h2} {
		st := nextEvent[StatusEvent](t, alice, 15*time.Second)
		if st.ClientMsgID != want || st.Status != StatusSent {
			t.Fatalf("%+v; want %s sent (h1 before h2)", st, want)
		}
		acks[want] = st.Ack
	}
	if acks[h2].ConvSeq <= acks[h1].ConvSeq {
		t.Fatalf("h2 at conv_seq %d, h1 at %d: not in queue order", acks[h2].ConvSeq, acks[h1].ConvSeq)
	}
}
