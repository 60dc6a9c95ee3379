package syncd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// Admission and the handshake through real QUIC (issue #10: 260 connections that never sent
// Hello, opened in 0.6 s, made every login fail for 10 s; refusals carried their retry-after as
// prose only; a Hello in a version-2 frame closed with code 1; a stream opened before Welcome
// was served).

// metric returns the value of the sample named (with its labels) in ts's /metrics, or "" if it
// has none.
func metric(t *testing.T, ts *testServer, sample string) string {
	t.Helper()
	for _, line := range strings.Split(scrape(t, "http://"+ts.AdminAddr().String()+"/metrics"), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			return v
		}
	}
	return ""
}

// silent opens n connections from src that never say Hello, and returns the ones the server
// kept open (their handshakes are pending) and the errors it closed the others with.
func silent(t *testing.T, ts *testServer, src *prototest.Source, n int) (open []*quic.Conn, refused []*proto.Error) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			conn, err := src.Dial(ts.Addr().String(), ts.Fingerprint())
			if err == nil {
				// Refused at once, or kept until the Hello deadline: a short wait tells them apart.
				select {
				case <-conn.Context().Done():
					err = context.Cause(conn.Context())
				case <-time.After(500 * time.Millisecond):
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				open = append(open, conn)
			} else if e := prototest.ClosedWith(err); e != nil {
				refused = append(refused, e)
			} else {
				t.Errorf("dial: %v", err)
			}
		})
	}
	wg.Wait()
	return open, refused
}

// TestHandshakesPerSource: 260 silent connections from one address get at most
// max_handshakes_per_source handshakes; the others are closed at once with overloaded and a
// machine-readable retry-after; a device from another address logs in meanwhile, at once.
func TestHandshakesPerSource(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.HelloTimeout = 20 * time.Second })
	const perSource = 16 // the default
	open, refused := silent(t, ts, prototest.NewSource(t, "127.0.0.2"), 260)
	if len(open) != perSource || len(refused) != 260-perSource {
		t.Fatalf("%d connections kept, %d refused; want %d kept", len(open), len(refused), perSource)
	}
	for _, e := range refused {
		if e.Code != proto.CodeOverloaded || e.RetryAfterMs != 1000 || !strings.Contains(e.Message, "from your address") {
			t.Fatalf("refusal %+v, want overloaded with retry_after_ms 1000 saying why", e)
		}
	}
	began := time.Now()
	alice := connect(t, ts, "alice", "phone") // from 127.0.0.1
	stillServed(t, alice)
	if d := time.Since(began); d > 2*time.Second {
		t.Errorf("a login from another address took %v", d)
	}
	if got := metric(t, ts, `syncd_handshake_refused_total{reason="source"}`); got != fmt.Sprint(260-perSource) {
		t.Errorf("refused by source: %q", got)
	}
	for _, c := range open {
		if c.Context().Err() != nil {
			t.Fatalf("a pending handshake was closed: %v", context.Cause(c.Context()))
		}
	}
}

// TestAddressValidationUnderLoad: while half of max_handshakes is taken, a new connection first
// proves its address with a QUIC Retry (counted), and is then served; below half, none is asked.
func TestAddressValidationUnderLoad(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.MaxHandshakes, c.MaxHandshakesPerSource, c.HelloTimeout = 8, 3, 20*time.Second })
	connect(t, ts, "bob", "phone")
	if got := metric(t, ts, "syncd_handshake_address_validated_total"); got != "0" {
		t.Fatalf("validated without load: %q", got)
	}
	for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		if open, _ := silent(t, ts, prototest.NewSource(t, ip), 3); len(open) != 3 {
			t.Fatalf("%s: %d handshakes pending, want 3", ip, len(open))
		}
	}
	before := metric(t, ts, "syncd_handshake_address_validated_total") // the last silent ones may have had a Retry
	alice := connect(t, ts, "alice", "phone")                          // 6 of 8 pending: Retry first
	stillServed(t, alice)
	var n, m int
	fmt.Sscan(before, &n)
	fmt.Sscan(metric(t, ts, "syncd_handshake_address_validated_total"), &m)
	if m != n+1 {
		t.Fatalf("validated under load: %d after %d, want one more", m, n)
	}
	// A third source fills the gate: beyond it, connections are refused with a retry-after.
	_, refused := silent(t, ts, prototest.NewSource(t, "127.0.0.4"), 3)
	if len(refused) != 1 || refused[0].Code != proto.CodeOverloaded || refused[0].RetryAfterMs == 0 {
		t.Fatalf("refused beyond the gate: %+v", refused)
	}
	if got := metric(t, ts, `syncd_handshake_refused_total{reason="busy"}`); got != "1" {
		t.Errorf("refused busy: %q", got)
	}
}

// TestHelloDeadline: a connection that opens no stream, or sends only part of a Hello, is closed
// with timeout once the Hello deadline passes.
func TestHelloDeadline(t *testing.T) {
	const deadline = 300 * time.Millisecond
	ts := startServer(t, func(c *Config) { c.HelloTimeout = deadline })
	partial := dialRaw(t, ts)
	st, err := partial.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st.Write([]byte{0, 0, 0, 40, 1, byte(proto.TypeHello), 0x84})
	for name, conn := range map[string]*quic.Conn{"no stream": dialRaw(t, ts), "part of a hello": partial} {
		began := time.Now()
		e := prototest.Closed(t, conn)
		if e.Code != proto.CodeTimeout || !strings.Contains(e.Message, "no hello") || time.Since(began) > deadline+2*time.Second {
			t.Errorf("%s: closed with %+v after %v, want timeout after about %v", name, e, time.Since(began), deadline)
		}
	}
	if got := metric(t, ts, `syncd_handshake_refused_total{reason="hello_timeout"}`); got != "2" {
		t.Errorf("hello timeouts counted: %q", got)
	}
	stillServed(t, connect(t, ts, "alice", "phone"))
}

// TestHandshakeRefusesBadFirstFrames: before Welcome nothing is skipped — a Hello in a version-2
// frame closes the connection with unsupported_version, a malformed Hello with malformed, an
// unknown first frame with unknown_frame, a request with unexpected_frame. After Welcome a frame
// of version 2 on a request or a sync stream closes the connection too (not just the stream).
func TestHandshakeRefusesBadFirstFrames(t *testing.T) {
	ts := startServer(t, nil)
	token, _ := ts.MintToken("alice", "phone", time.Hour)
	hello, _ := proto.AppendFrame(nil, &proto.Hello{Token: token, Device: "phone", ProtoVersion: proto.ProtoVersion})
	v2 := append([]byte(nil), hello...)
	v2[4] = 2
	request, _ := proto.AppendFrame(nil, &proto.HeadCheck{ID: 1})
	for name, tc := range map[string]struct {
		frame []byte
		code  proto.Code
	}{
		"hello of frame version 2": {v2, proto.CodeUnsupportedVersion},
		"malformed hello":          {[]byte{0, 0, 0, 3, 1, byte(proto.TypeHello), 0xc1}, proto.CodeMalformed},
		"hello of the wrong shape": {[]byte{0, 0, 0, 4, 1, byte(proto.TypeHello), 0x91, 0x01}, proto.CodeMalformed},
		"unknown first frame":      {[]byte{0, 0, 0, 3, 1, 99, 0x80}, proto.CodeUnknownFrame},
		"a request first":          {request, proto.CodeUnexpectedFrame},
		"frame too large":          {[]byte{0x7f, 0xff, 0xff, 0xff, 1, byte(proto.TypeHello)}, proto.CodeFrameTooLarge},
	} {
		t.Run(name, func(t *testing.T) {
			conn := dialRaw(t, ts)
			st, err := conn.OpenStreamSync(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			st.Write(tc.frame)
			if e := prototest.Closed(t, conn); e.Code != tc.code {
				t.Fatalf("closed with %+v, want %v", e, tc.code)
			}
		})
	}
	alice := connect(t, ts, "alice", "phone")
	alice.Req.Write([]byte{0, 0, 0, 3, 2, byte(proto.TypeHeadCheck), 0x80})
	if e := prototest.Closed(t, alice.QUIC); e.Code != proto.CodeUnsupportedVersion {
		t.Fatalf("version 2 on a request stream: closed with %+v", e)
	}
	carol := connect(t, ts, "carol", "phone")
	carol.StartSync(0, 0)
	carol.Sync.Write([]byte{0, 0, 0, 3, 2, byte(proto.TypeCursorAck), 0x80})
	if e := prototest.Closed(t, carol.QUIC); e.Code != proto.CodeUnsupportedVersion {
		t.Fatalf("version 2 on a sync stream: closed with %+v", e)
	}
	stillServed(t, connect(t, ts, "bob", "phone"))
}

// TestStreamBeforeWelcomeNotServed: a request on a stream that reaches the server before it sent
// Welcome is answered unexpected_frame, not applied, and its stream ended; the session then goes
// on normally.
func TestStreamBeforeWelcomeNotServed(t *testing.T) {
	ts := startServer(t, nil)
	conn := dialRaw(t, ts)
	control, err := conn.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	early, err := conn.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The early stream's data opens the control stream too (QUIC opens lower ids implicitly),
	// before any Hello: the server has the control stream and no Welcome yet.
	send := &proto.Send{ID: 1, Conv: "d:alice:bob", ClientMsgID: "early", Body: []byte("too soon"), Peer: "bob"}
	if err := proto.WriteFrame(early, send); err != nil {
		t.Fatal(err)
	}
	early.SetReadDeadline(time.Now().Add(prototest.Timeout))
	f, err := proto.NewReader(early, proto.DefaultMaxFrame).Next()
	if e, ok := f.(*proto.Error); err != nil || !ok || e.Code != proto.CodeUnexpectedFrame {
		t.Fatalf("early stream: %#v, %v; want unexpected_frame", f, err)
	}
	testkit.WaitTrue(t, prototest.Timeout, "the server to stop the early stream's sending side", func() bool {
		_, err := early.Write([]byte{0})
		var se *quic.StreamError
		return err != nil && errors.As(err, &se) && se.ErrorCode == quic.StreamErrorCode(proto.CodeUnexpectedFrame)
	})

	token, _ := ts.MintToken("alice", "phone", time.Hour)
	if err := proto.WriteFrame(control, &proto.Hello{Token: token, Device: "phone", ProtoVersion: proto.ProtoVersion}); err != nil {
		t.Fatal(err)
	}
	control.SetReadDeadline(time.Now().Add(prototest.Timeout))
	if f, err := proto.NewReader(control, proto.DefaultMaxFrame).Next(); err != nil || f.FrameType() != proto.TypeWelcome {
		t.Fatalf("hello after the early stream: %#v, %v", f, err)
	}
	c := &prototest.Conn{T: t, QUIC: conn, Control: control}
	if c.Req, err = conn.OpenStreamSync(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.ReqR = proto.NewReader(c.Req, proto.DefaultMaxFrame)
	// The early Send was not applied: the conversation does not exist.
	c.WantCode(&proto.ConvState{ID: c.ID(), Conv: "d:alice:bob"}, proto.CodeNoConversation)
	if a := c.Ack(&proto.Send{ID: c.ID(), Conv: "d:alice:bob", ClientMsgID: "later", Body: []byte("now"), Peer: "bob"}); a.ConvSeq != 1 {
		t.Fatalf("send after welcome: %+v", a)
	}
}
