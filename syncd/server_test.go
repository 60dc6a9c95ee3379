package syncd

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/syncd/auth"
	"github.com/syncd-dev/syncd/test/testkit"
)

// Tests of the server through its real path: QUIC on loopback, TLS with a pinned self-signed
// certificate, real shards and fan-out.

type testServer struct {
	*Server
	cancel context.CancelFunc
	done   chan error
}

func startServer(t *testing.T, tweak func(*Config)) *testServer {
	t.Helper()
	cfg := Config{
		Dir: t.TempDir(), ListenAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", Shards: 4,
		Logger: slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelError})),
	}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitTrue(t, 10*time.Second, "the server to be ready", func() bool { return srv.Ready() == nil })
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{Server: srv, cancel: cancel, done: make(chan error, 1)}
	go func() { ts.done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ts.done; err != nil {
			t.Errorf("server shutdown: %v", err)
		}
	})
	return ts
}

// dialRaw opens a QUIC connection to ts, pinning its certificate.
func dialRaw(t *testing.T, ts *testServer) *quic.Conn {
	t.Helper()
	return prototest.Dial(t, ts.Addr().String(), ts.Fingerprint())
}

// hello says Hello on conn and returns the server's first answer (prototest.Hello).
func hello(t *testing.T, conn *quic.Conn, token, device string) proto.Frame {
	t.Helper()
	return prototest.Hello(t, conn, token, device)
}

// connect authenticates uid's device on ts with a fresh token and opens a request stream.
func connect(t *testing.T, ts *testServer, uid, device string) *prototest.Conn {
	t.Helper()
	return prototest.Connect(t, ts.Addr().String(), ts.Fingerprint(), mustToken(t, ts, uid, device), uid, device)
}

// TestServerMessagesReceiptsRecalls: two users, a direct conversation created by the first send,
// a resend, a receipt and a recall, pushed live to both users' sync streams across shards.
func TestServerMessagesReceiptsRecalls(t *testing.T) {
	ts := startServer(t, nil)
	alice := connect(t, ts, "alice", "phone")
	bob := connect(t, ts, "bob", "laptop")
	alice.StartSync(0, 0)
	bob.StartSync(0, 0)

	send := &proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "m1", Body: []byte("hi bob"), Peer: "bob"}
	a1 := alice.Ack(send)
	if a1.ConvSeq != 1 || a1.Duplicate || !a1.MsgID.Valid() {
		t.Fatalf("first send: %+v", a1)
	}
	send.ID = alice.ID()
	if again := alice.Ack(send); !again.Duplicate || again.MsgID != a1.MsgID || again.ConvSeq != 1 {
		t.Fatalf("resend: %+v, want the original ack", again)
	}
	for _, c := range []*prototest.Conn{alice, bob} {
		got := c.Entries(0, 1)
		if got[0].MsgID != a1.MsgID || string(got[0].Body) != "hi bob" || got[0].Sender != "alice" || got[0].Kind != proto.KindMessage {
			t.Fatalf("pushed entry: %+v", got[0])
		}
	}
	read := bob.Ack(&proto.MarkRead{ID: bob.ID(), Conv: "d:alice:bob", ClientMsgID: "r1", UpTo: 1})
	recall := alice.Ack(&proto.Recall{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "x1", Target: a1.MsgID})
	for _, c := range []*prototest.Conn{alice, bob} {
		got := c.Entries(1, 2)
		if got[0].Kind != proto.KindReceipt || got[0].MsgID != read.MsgID || got[0].UpTo != 1 ||
			got[1].Kind != proto.KindRecall || got[1].Target != a1.MsgID || got[1].MsgID != recall.MsgID {
			t.Fatalf("receipt and recall: %+v", got)
		}
	}
	if h, ok := bob.Do(&proto.HeadCheck{ID: bob.ID()}).(*proto.Head); !ok || h.Head != 3 {
		t.Fatalf("head check: %#v", h)
	}
	// A sync resumed from a cursor starts exactly after it.
	carol := connect(t, ts, "bob", "tablet")
	carol.StartSync(0, 0)
	all := carol.Entries(0, 3)
	carol.Sync.CancelRead(0)
	if len(all) != 3 {
		t.Fatalf("tablet got %d entries", len(all))
	}
	carol.StartSync(carol.Epoch, 2)
	if got := carol.Entries(2, 1); got[0].MsgID != recall.MsgID {
		t.Fatalf("resume from 2: %+v", got[0])
	}
	// A cursor ack is stored (coalesced) as the device's delivery status.
	if err := proto.WriteFrame(carol.Sync, &proto.CursorAck{Epoch: carol.Epoch, Pos: 3}); err != nil {
		t.Fatal(err)
	}
	state, _ := ts.Node().State(ts.slots.UserShard("bob"))
	testkit.WaitTrue(t, 5*time.Second, "the tablet's cursor to be stored", func() bool {
		cs, err := state.Cursors("bob")
		return err == nil && len(cs) == 1 && cs[0].Device == "tablet" && cs[0].Cursor.Pos == 3
	})
	// The traffic shows in the metrics operators scrape.
	metrics := scrape(t, "http://"+ts.AdminAddr().String()+"/metrics")
	for _, want := range []string{`syncd_send_ack_seconds_count{result="ok"} 3`, `syncd_send_ack_seconds_count{result="duplicate"} 1`, "syncd_delivery_seconds_count"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// scrape returns the body of /metrics at url.
func scrape(t *testing.T, url string) string {
	t.Helper()
	_, body := testkit.HTTP(t, http.MethodGet, url)
	return body
}

// TestServerRefusesBadInput: each bad input gets its code and the server keeps serving.
func TestServerRefusesBadInput(t *testing.T) {
	const recallWindow = 2 * time.Second
	ts := startServer(t, func(c *Config) { c.RecallWindow = recallWindow })
	conn := dialRaw(t, ts)
	if e, ok := hello(t, conn, "v1.bad.token", "phone").(*proto.Error); !ok || e.Code != proto.CodeUnauthenticated {
		t.Fatalf("bad token: %#v", e)
	}
	expired, err := ts.keys.Mint(auth.TokenClaims{User: "eve", Device: "phone", Issued: time.Now().Add(-2 * time.Hour), Expires: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := hello(t, dialRaw(t, ts), expired, "phone").(*proto.Error); !ok || e.Code != proto.CodeTokenExpired {
		t.Fatalf("expired token: %#v", e)
	}
	other, _ := ts.MintToken("eve", "phone", time.Hour)
	if e, ok := hello(t, dialRaw(t, ts), other, "laptop").(*proto.Error); !ok || e.Code != proto.CodeForbidden {
		t.Fatalf("token of another device: %#v", e)
	}

	alice := connect(t, ts, "alice", "phone")
	mallory := connect(t, ts, "mallory", "phone")
	a := alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "m1", Body: []byte("hi"), Peer: "bob"})
	mallory.WantCode(&proto.Send{ID: mallory.ID(), Conv: "d:alice:bob", ClientMsgID: "m1", Body: []byte("hi")}, proto.CodeNotMember)
	alice.WantCode(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "m1", Body: []byte("other"), Peer: "bob"}, proto.CodeConflict)
	alice.WantCode(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "m2", Body: make([]byte, proto.MaxBody+1)}, proto.CodeTooLarge)
	alice.WantCode(&proto.Send{ID: alice.ID(), Conv: "nope", ClientMsgID: "m3", Body: []byte("x")}, proto.CodeNoConversation)
	mallory.WantCode(&proto.Recall{ID: mallory.ID(), Conv: "d:alice:bob", ClientMsgID: "r", Target: a.MsgID}, proto.CodeNotMember)
	bob := connect(t, ts, "bob", "laptop")
	bob.WantCode(&proto.Recall{ID: bob.ID(), Conv: "d:alice:bob", ClientMsgID: "r", Target: a.MsgID}, proto.CodeNotSender)
	time.Sleep(time.Until(time.Unix(0, a.Time).Add(recallWindow + 10*time.Millisecond)))
	alice.WantCode(&proto.Recall{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "r", Target: a.MsgID}, proto.CodeRecallWindow)

	// Garbage on a request stream: an error for that frame, and the stream goes on.
	alice.Req.Write([]byte{0, 0, 0, 3, 1, 99, 0x80}) // version 1, unknown type 99, empty map
	alice.Req.SetReadDeadline(time.Now().Add(5 * time.Second))
	if f, err := alice.ReqR.Next(); err != nil || f.(*proto.Error).Code != proto.CodeUnknownFrame {
		t.Fatalf("unknown frame: %#v %v", f, err)
	}
	alice.Req.Write([]byte{0, 0, 0, 3, 1, byte(proto.TypeSend), 0xc1}) // reserved msgpack byte
	if f, err := alice.ReqR.Next(); err != nil || f.(*proto.Error).Code != proto.CodeMalformed {
		t.Fatalf("malformed frame: %#v %v", f, err)
	}
	if got := alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "m4", Body: []byte("still here")}); got.ConvSeq != 2 {
		t.Fatalf("after bad frames: %+v", got)
	}

	// A frame cut short by the end of its stream, and a frame declaring more than the limit:
	// each stream gets its error and ends; the connection and the server go on.
	for _, tc := range []struct {
		name  string
		bytes []byte
		code  proto.Code
	}{
		{"truncated frame", []byte{0, 0, 0, 40, 1, byte(proto.TypeSend), 0x85}, proto.CodeMalformed},
		{"oversized frame", []byte{0x7f, 0xff, 0xff, 0xff, 1, byte(proto.TypeSend)}, proto.CodeFrameTooLarge},
	} {
		st, err := alice.QUIC.OpenStreamSync(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		st.Write(tc.bytes)
		st.Close() // end of our side: the server sees the frame end early (or not care)
		st.SetReadDeadline(time.Now().Add(5 * time.Second))
		f, err := proto.NewReader(st, proto.DefaultMaxFrame).Next()
		if e, ok := f.(*proto.Error); err != nil || !ok || e.Code != tc.code {
			t.Fatalf("%s: got %#v, %v; want error %v", tc.name, f, err, tc.code)
		}
	}
	if got := alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "m5", Body: []byte("and still")}); got.ConvSeq != 3 {
		t.Fatalf("after bad streams: %+v", got)
	}
}

// An idle sync stream gets a heartbeat with the head right away and then once per interval, so a
// device can prove it has missed nothing; a pushed batch is not followed by a heartbeat at once.
func TestServerHeartbeats(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.Limits.HeartbeatMs = 200 })
	alice := connect(t, ts, "alice", "phone")
	bob := connect(t, ts, "bob", "phone")
	bob.StartSync(0, 0)
	next := func() proto.Frame {
		t.Helper()
		bob.Sync.SetReadDeadline(time.Now().Add(5 * time.Second))
		f, err := bob.SyncR.Next()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	for i := range 2 {
		if hb, ok := next().(*proto.Heartbeat); !ok || hb.Head != 0 {
			t.Fatalf("idle frame %d: %#v, want a heartbeat at head 0", i, hb)
		}
	}
	alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "m", Body: []byte("x"), Peer: "bob"})
	for {
		f := next()
		if b, ok := f.(*proto.Batch); ok {
			if len(b.Entries) != 1 || b.Head != 1 {
				t.Fatalf("batch: %#v", b)
			}
			break
		}
	}
	sent := time.Now()
	hb, ok := next().(*proto.Heartbeat)
	if !ok || hb.Head != 1 {
		t.Fatalf("after the batch: %#v, want a heartbeat at head 1", hb)
	}
	if time.Since(sent) < 100*time.Millisecond {
		t.Fatal("a heartbeat followed the batch at once")
	}
}
