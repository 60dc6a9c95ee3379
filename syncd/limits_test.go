package syncd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/test/testkit"
)

// A device over its send rate gets RateLimited with a retry-after, and is served again later.
func TestServerRateLimitsADevice(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.SendRate = 5; c.SendBurst = 3 })
	alice := connect(t, ts, "alice", "phone")
	send := func(i int) proto.Frame {
		return alice.Do(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: fmt.Sprint("m", i), Body: []byte("x"), Peer: "bob"})
	}
	for i := range 3 {
		if _, ok := send(i).(*proto.Ack); !ok {
			t.Fatalf("send %d within the burst was refused", i)
		}
	}
	e, ok := send(3).(*proto.Error)
	if !ok || e.Code != proto.CodeRateLimited || e.RetryAfterMs == 0 {
		t.Fatalf("send over the rate: %#v, want rate_limited with a retry-after", e)
	}
	time.Sleep(e.RetryAfter()) // the server said when; a real client adds jitter
	if _, ok := send(3).(*proto.Ack); !ok {
		t.Fatal("send after the retry-after was refused")
	}
}

// Beyond MaxInFlight, requests are refused at once with Overloaded and a retry-after instead of
// queueing into timeouts; every request is either acked or refused, and the acked ones are
// contiguous in the conversation.
func TestServerShedsLoadWithRetryAfter(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.MaxInFlight = 1; c.SendBurst = 1000 })
	alice := connect(t, ts, "alice", "phone")
	alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "first", Body: []byte("x"), Peer: "bob"})
	const n = 40
	for i := range n { // pipelined: all written before any answer is read
		f := &proto.Send{ID: uint64(1000 + i), Conv: "d:alice:bob", ClientMsgID: fmt.Sprint("p", i), Body: []byte("x")}
		if err := proto.WriteFrame(alice.Req, f); err != nil {
			t.Fatal(err)
		}
	}
	acked, shed := map[proto.Position]bool{}, 0
	for range n {
		alice.Req.SetReadDeadline(time.Now().Add(10 * time.Second))
		f, err := alice.ReqR.Next()
		if err != nil {
			t.Fatal(err)
		}
		switch f := f.(type) {
		case *proto.Ack:
			acked[f.ConvSeq] = true
		case *proto.Error:
			if f.Code != proto.CodeOverloaded || f.RetryAfterMs == 0 {
				t.Fatalf("refusal: %#v, want overloaded with a retry-after", f)
			}
			shed++
		}
	}
	if shed == 0 || len(acked) == 0 || len(acked)+shed != n {
		t.Fatalf("%d acked, %d shed of %d", len(acked), shed, n)
	}
	for seq := proto.Position(2); seq < proto.Position(2+len(acked)); seq++ {
		if !acked[seq] {
			t.Fatalf("acked conv_seqs are not contiguous from 2: %v", acked)
		}
	}
}

// Connections beyond MaxConnections, and handshakes beyond MaxHandshakes, are closed with a code
// the client can back off on.
func TestServerAdmission(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.MaxConnections = 2; c.MaxHandshakes = 1 })
	token, _ := ts.MintToken("alice", "phone", time.Hour)
	// probe dials until hello gets something other than a welcome (a welcome can come first
	// while the server has not yet seen the connection that is meant to fill the slots) or
	// other than `transient` (the server may not have released an earlier probe yet).
	probe := func(transient proto.Code) proto.Frame {
		var f proto.Frame
		testkit.Wait(t, 5*time.Second, fmt.Sprintf("a hello answered with neither a welcome nor code %v", transient), func() (bool, string) {
			conn := dialRaw(t, ts)
			f = hello(t, conn, token, "phone")
			e, refused := f.(*proto.Error)
			_, welcome := f.(*proto.Welcome)
			if !welcome && !(refused && e.Code == transient) {
				return true, ""
			}
			conn.CloseWithError(0, "")
			return false, fmt.Sprintf("%#v", f)
		})
		return f
	}

	stalled := dialRaw(t, ts) // holds the only handshake slot: its first stream never says hello
	st, err := stalled.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st.Write([]byte{0}) // a partial frame makes the stream visible to the server
	if e, ok := probe(proto.CodeTooManyConnections).(*proto.Error); !ok || e.Code != proto.CodeOverloaded {
		t.Fatalf("handshake beyond MaxHandshakes: %#v", e)
	}
	stalled.CloseWithError(0, "")
	testkit.WaitTrue(t, 5*time.Second, "the closed connections to be released", func() bool {
		return ts.conns.Load() == 0
	})

	connect(t, ts, "alice", "phone")
	connect(t, ts, "alice", "phone")
	if e, ok := probe(proto.CodeOverloaded).(*proto.Error); !ok || e.Code != proto.CodeTooManyConnections {
		t.Fatalf("connection beyond MaxConnections: %#v", e)
	}
}
