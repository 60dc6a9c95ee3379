// Package prototest is a raw client of the syncd protocol (docs/PROTOCOL.md) for tests. It speaks
// frames directly over real QUIC, so a test sends exactly the frames it wants and sees exactly
// what the server answers; the Go SDK (client) is the higher-level client apps use. Its Proxy
// relays a real server's frames to a client and can change them, for fault injection in client
// tests. It imports only proto, quic-go and test/testkit: the server's tests and the tests of
// other packages share it.
package prototest

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/syncd-dev/syncd/proto"
)

// Timeout bounds every wait of this package for the server: a dial, an answer, a batch.
const Timeout = 10 * time.Second

// Dial opens a QUIC connection to addr pinning the certificate fingerprint, closed when the test
// ends. It fails the test if the connection cannot be made.
func Dial(t testing.TB, addr, fingerprint string) *quic.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	conn, err := quic.DialAddr(ctx, addr, proto.PinnedTLSConfig(fingerprint), &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseWithError(0, "") })
	return conn
}

// Source is a client's UDP socket on a loopback address of the test's choosing (127.0.0.2,
// say), so that a test can show what a server does with many connections from one source and
// one from another. Its connections and socket are closed when the test ends.
type Source struct {
	t  testing.TB
	tr *quic.Transport
}

// NewSource binds a UDP socket on ip (any free port).
func NewSource(t testing.TB, ip string) *Source {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	t.Cleanup(func() {
		tr.Close()
		udp.Close() // a Transport leaves a socket it was given open
	})
	return &Source{t: t, tr: tr}
}

// Dial opens a QUIC connection from the source to addr, pinning the certificate fingerprint;
// the QUIC handshake completes (a Retry the server asks for included) before it returns.
func (s *Source) Dial(addr, fingerprint string) (*quic.Conn, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	conn, err := s.tr.Dial(ctx, ua, proto.PinnedTLSConfig(fingerprint), &quic.Config{})
	if err == nil {
		s.t.Cleanup(func() { conn.CloseWithError(0, "") })
	}
	return conn, err
}

// Hello opens the control stream of conn, sends Hello with token and device, and returns the
// server's first answer: a Welcome, or the Error the server refused with (also when the server
// closed the connection with the error's code before the frame arrived).
func Hello(t testing.TB, conn *quic.Conn, token, device string) proto.Frame {
	t.Helper()
	_, f := Handshake(t, conn, token, device)
	return f
}

// Handshake is Hello returning the control stream as well, which the session needs open for
// as long as it lasts (closing it ends the session).
func Handshake(t testing.TB, conn *quic.Conn, token, device string) (*quic.Stream, proto.Frame) {
	t.Helper()
	var f proto.Frame
	st, err := conn.OpenStreamSync(context.Background())
	if err == nil {
		err = proto.WriteFrame(st, &proto.Hello{Token: token, Device: device, ClientVersion: "prototest/1", ProtoVersion: proto.ProtoVersion})
	}
	if err == nil {
		st.SetReadDeadline(time.Now().Add(Timeout))
		f, err = proto.NewReader(st, proto.DefaultMaxFrame).Next()
	}
	if e := ClosedWith(err); e != nil {
		// The server closed the connection with the error's code (it may do so before the
		// error frame arrives, even before the hello is written): as good as the frame.
		return st, e
	}
	if err != nil {
		t.Fatalf("hello: %v", err)
	}
	return st, f
}

// Closed waits for conn to be closed by the server and returns the error the close stands for
// (ClosedWith); it fails the test if conn is still open after Timeout or ended another way.
func Closed(t testing.TB, conn *quic.Conn) *proto.Error {
	t.Helper()
	select {
	case <-conn.Context().Done():
	case <-time.After(Timeout):
		t.Fatalf("the connection is still open after %v", Timeout)
	}
	e := ClosedWith(context.Cause(conn.Context()))
	if e == nil {
		t.Fatalf("the connection ended with %v, not a close by the server", context.Cause(conn.Context()))
	}
	return e
}

// ClosedWith returns the error a connection close reported in err stands for (the code, the
// retry-after and the message of proto.ErrorFromClose), or nil if err is not a close by the
// server.
func ClosedWith(err error) *proto.Error {
	var closed *quic.ApplicationError
	if errors.As(err, &closed) && closed.Remote {
		return proto.ErrorFromClose(uint64(closed.ErrorCode), closed.ErrorMessage)
	}
	return nil
}

// Conn is an authenticated connection with one request stream, used sequentially, and at most
// one sync stream. It is not safe for concurrent use. Its fields are there for tests that write
// or read frames themselves. Its readers accept frames up to the max_frame the Welcome
// announced, as the protocol requires of a client: a longer frame from the server fails the
// read with proto.ErrFrameTooLarge.
type Conn struct {
	T       testing.TB
	QUIC    *quic.Conn
	Welcome *proto.Welcome // the server's answer to Hello
	Control *quic.Stream   // the control stream, open for the session's life
	Req     *quic.Stream   // the request stream
	ReqR    *proto.Reader  // reads Req
	Sync    *quic.Stream   // the sync stream, once StartSync opened it
	SyncR   *proto.Reader  // reads Sync
	Epoch   proto.Epoch    // of the last batch Entries received
	next    uint64
}

// Connect dials addr, says Hello as user's device with token, and opens a request stream. It
// fails the test unless the server welcomes user.
func Connect(t testing.TB, addr, fingerprint, token, user, device string) *Conn {
	t.Helper()
	conn := Dial(t, addr, fingerprint)
	control, f := Handshake(t, conn, token, device)
	w, ok := f.(*proto.Welcome)
	if !ok || w.User != user {
		t.Fatalf("expected a welcome for %s, got %#v", user, f)
	}
	c := &Conn{T: t, QUIC: conn, Welcome: w, Control: control}
	var err error
	if c.Req, err = conn.OpenStreamSync(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.ReqR = proto.NewReader(c.Req, c.MaxFrame())
	return c
}

// MaxFrame returns the connection's frame limit: the max_frame of its Welcome (the protocol's
// default without one).
func (c *Conn) MaxFrame() int {
	if c.Welcome == nil {
		return proto.DefaultMaxFrame
	}
	return int(c.Welcome.Limits.WithDefaults().MaxFrame)
}

// Do sends one request and returns its answer.
func (c *Conn) Do(f proto.Frame) proto.Frame {
	c.T.Helper()
	if err := proto.WriteFrame(c.Req, f); err != nil {
		c.T.Fatal(err)
	}
	c.Req.SetReadDeadline(time.Now().Add(Timeout))
	ans, err := c.ReqR.Next()
	if err != nil {
		c.T.Fatalf("answer to %v: %v", f.FrameType(), err)
	}
	return ans
}

// ID returns the next request id (1, 2, …).
func (c *Conn) ID() uint64 { c.next++; return c.next }

// Ack sends f and returns its Ack; any other answer fails the test.
func (c *Conn) Ack(f proto.Frame) *proto.Ack {
	c.T.Helper()
	ans := c.Do(f)
	a, ok := ans.(*proto.Ack)
	if !ok {
		c.T.Fatalf("%v: expected an ack, got %#v", f.FrameType(), ans)
	}
	return a
}

// WantCode sends f and checks it is answered with an Error of code.
func (c *Conn) WantCode(f proto.Frame, code proto.Code) {
	c.T.Helper()
	ans := c.Do(f)
	if e, ok := ans.(*proto.Error); !ok || e.Code != code {
		c.T.Fatalf("%v: got %#v, want error %v", f.FrameType(), ans, code)
	}
}

// StartSync opens the sync stream from the cursor (epoch, pos).
func (c *Conn) StartSync(epoch proto.Epoch, pos proto.Position) {
	c.T.Helper()
	c.StartSyncWith(&proto.SyncStart{Epoch: epoch, Pos: pos})
}

// StartSyncWith opens the sync stream with start (a vector cursor, a ceiling…).
func (c *Conn) StartSyncWith(start *proto.SyncStart) {
	c.T.Helper()
	st, err := c.QUIC.OpenStreamSync(context.Background())
	if err != nil {
		c.T.Fatal(err)
	}
	c.Sync, c.SyncR = st, proto.NewReader(st, c.MaxFrame())
	if err := proto.WriteFrame(st, start); err != nil {
		c.T.Fatal(err)
	}
}

// NextSync reads the next frame of the sync stream, failing the test if none comes in time.
func (c *Conn) NextSync() proto.Frame {
	c.T.Helper()
	c.Sync.SetReadDeadline(time.Now().Add(Timeout))
	f, err := c.SyncR.Next()
	if err != nil {
		c.T.Fatalf("sync: %v", err)
	}
	return f
}

// Entries reads the sync stream until it has n more entries, skipping heartbeats, and fails the
// test on a gap: the first entry must be at pos+1 and each next one right after it (G3).
func (c *Conn) Entries(pos proto.Position, n int) []proto.Entry {
	c.T.Helper()
	var out []proto.Entry
	for len(out) < n {
		c.Sync.SetReadDeadline(time.Now().Add(Timeout))
		f, err := c.SyncR.Next()
		if err != nil {
			c.T.Fatalf("sync: %v (have %d of %d entries)", err, len(out), n)
		}
		b, ok := f.(*proto.Batch)
		if !ok {
			continue // heartbeats
		}
		c.Epoch = b.Epoch
		for _, e := range b.Entries {
			if e.Seq != pos+1 {
				c.T.Fatalf("sync: entry at %d after %d: a gap", e.Seq, pos)
			}
			pos = e.Seq
			out = append(out, e)
		}
	}
	return out
}
