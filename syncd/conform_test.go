package syncd

import (
	"context"
	"errors"
	"io"
	"math"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// Tests that the server serves docs/PROTOCOL.md as written, through real QUIC with the raw
// client (proto/prototest): each case of issue #10's "the protocol is not served as written"
// that concerns request and sync streams.

// next reads the next frame of a stream, failing the test after prototest.Timeout.
func next(t *testing.T, st *quic.Stream, r *proto.Reader) proto.Frame {
	t.Helper()
	st.SetReadDeadline(time.Now().Add(prototest.Timeout))
	f, err := r.Next()
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return f
}

// wantError reads the next frame of a stream, skipping heartbeats, and checks it is an Error
// with code.
func wantError(t *testing.T, st *quic.Stream, r *proto.Reader, code proto.Code) *proto.Error {
	t.Helper()
	for deadline := time.Now().Add(prototest.Timeout); ; {
		if time.Now().After(deadline) {
			t.Fatalf("only heartbeats for %v, want an Error with code %v", prototest.Timeout, code)
		}
		f := next(t, st, r)
		if _, ok := f.(*proto.Heartbeat); ok {
			continue
		}
		e, ok := f.(*proto.Error)
		if !ok || e.Code != code || e.ID != 0 {
			t.Fatalf("got %#v, want an Error with id 0 and code %v", f, code)
		}
		return e
	}
}

// wantEnd reads a stream to its end (skipping heartbeats) and checks it ends cleanly (FIN), not
// with a reset that could have discarded the frames before.
func wantEnd(t *testing.T, st *quic.Stream, r *proto.Reader) {
	t.Helper()
	deadline := time.Now().Add(prototest.Timeout)
	for {
		st.SetReadDeadline(deadline)
		f, err := r.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("want the end of the stream, got %v", err)
		}
		if _, ok := f.(*proto.Heartbeat); !ok {
			t.Fatalf("want the end of the stream, got %#v", f)
		}
	}
}

// wantStopSending checks the server stopped reading st with code: the client's writes fail with
// a stream error of that code (once the STOP_SENDING frame has arrived).
func wantStopSending(t *testing.T, st *quic.Stream, code proto.Code) {
	t.Helper()
	var serr *quic.StreamError
	testkit.WaitTrue(t, prototest.Timeout, "the server's STOP_SENDING", func() bool {
		err := proto.WriteFrame(st, &proto.HeadCheck{ID: 999})
		return errors.As(err, &serr)
	})
	if !serr.Remote || serr.ErrorCode != quic.StreamErrorCode(code) {
		t.Fatalf("writes fail with %v, want the server's code %d", serr, code)
	}
}

// sendToBob posts a message from c's user to bob, so both logs get an entry.
func sendToBob(t *testing.T, c *prototest.Conn, user, cmid string) *proto.Ack {
	t.Helper()
	return c.Ack(&proto.Send{ID: c.ID(), Conv: proto.DirectConv(user, "bob"), ClientMsgID: cmid, Body: []byte(cmid), Peer: "bob"})
}

// TestSecondSyncStreamSupersedes: a device has one sync stream. A new one — on another
// connection of the device, or on the same connection — supersedes the old one, which gets
// Error{superseded} and then its end; the new one is served. Another device of the same user is
// not affected.
func TestSecondSyncStreamSupersedes(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.Limits.HeartbeatMs = 200 })
	first := connect(t, ts, "alice", "phone")
	tablet := connect(t, ts, "alice", "tablet")
	first.StartSync(0, 0)
	tablet.StartSync(0, 0)
	if _, ok := next(t, first.Sync, first.SyncR).(*proto.Heartbeat); !ok {
		t.Fatal("the first sync stream is not live")
	}

	second := connect(t, ts, "alice", "phone") // another connection of the same device
	second.StartSync(0, 0)
	wantError(t, first.Sync, first.SyncR, proto.CodeSuperseded)
	wantEnd(t, first.Sync, first.SyncR)
	wantStopSending(t, first.Sync, proto.CodeSuperseded)
	sendToBob(t, first, "alice", "m1") // the superseded connection still serves requests
	if got := second.Entries(0, 1); got[0].Seq != 1 {
		t.Fatalf("the new stream: %+v", got)
	}
	if got := tablet.Entries(0, 1); got[0].Seq != 1 {
		t.Fatalf("another device: %+v", got)
	}

	// On the same connection: the older stream of the two goes.
	old, oldR := second.Sync, second.SyncR
	second.StartSync(second.Epoch, 1)
	wantError(t, old, oldR, proto.CodeSuperseded)
	wantEnd(t, old, oldR)
	sendToBob(t, second, "alice", "m2")
	if got := second.Entries(1, 1); got[0].Seq != 2 {
		t.Fatalf("the newest stream: %+v", got)
	}
	if got := tablet.Entries(1, 1); got[0].Seq != 2 {
		t.Fatalf("another device after the second supersession: %+v", got)
	}
}

// TestSyncStreamAnswersUpstreamFrames: what a client sends on its sync stream after SyncStart is
// answered as PROTOCOL §3 and §6 say. Malformed and unknown frames and bad cursor acks (zero,
// another epoch, beyond what the stream sent) get their Error and the stream goes on — a bad
// cursor ack is not stored; a request or a second SyncStart gets unexpected_frame and resets the
// stream: the Error, then its end, and the server reads nothing more.
func TestSyncStreamAnswersUpstreamFrames(t *testing.T) {
	ts := startServer(t, nil)
	alice := connect(t, ts, "alice", "phone")
	for _, m := range []string{"ma", "mb", "mc"} {
		sendToBob(t, alice, "alice", m)
	}
	c := connect(t, ts, "bob", "laptop")
	c.StartSync(0, 0)
	c.Entries(0, 3)
	epoch := c.Epoch
	for _, tc := range []struct {
		name  string
		frame []byte // raw, for frames an encoder would not make
		ack   *proto.CursorAck
		code  proto.Code
	}{
		{name: "malformed body", frame: []byte{0, 0, 0, 3, 1, byte(proto.TypeCursorAck), 0xc1}, code: proto.CodeMalformed},
		{name: "shorter than its header", frame: []byte{0, 0, 0, 1, 1}, code: proto.CodeMalformed},
		{name: "unknown type", frame: []byte{0, 0, 0, 3, 1, 99, 0x80}, code: proto.CodeUnknownFrame},
		{name: "zero cursor ack", ack: &proto.CursorAck{}, code: proto.CodeInvalidArgument},
		{name: "cursor ack without position", ack: &proto.CursorAck{Epoch: epoch}, code: proto.CodeInvalidArgument},
		{name: "cursor ack beyond what was sent", ack: &proto.CursorAck{Epoch: epoch, Pos: 4}, code: proto.CodeInvalidArgument},
		{name: "cursor ack of another epoch", ack: &proto.CursorAck{Epoch: epoch + 1, Pos: 2}, code: proto.CodeInvalidArgument},
	} {
		var err error
		if tc.ack != nil {
			err = proto.WriteFrame(c.Sync, tc.ack)
		} else {
			_, err = c.Sync.Write(tc.frame)
		}
		if err != nil {
			t.Fatal(err)
		}
		if e := wantError(t, c.Sync, c.SyncR, tc.code); e.Message == "" {
			t.Errorf("%s: an error without a message", tc.name)
		}
	}
	// The stream went on: a good ack is stored, the refused ones were not, and entries flow.
	if err := proto.WriteFrame(c.Sync, &proto.CursorAck{Epoch: epoch, Pos: 3}); err != nil {
		t.Fatal(err)
	}
	state, _ := ts.Node().State(ts.slots.UserShard("bob"))
	testkit.WaitTrue(t, 5*time.Second, "the laptop's cursor to be stored", func() bool {
		cs, err := state.Cursors("bob")
		return err == nil && len(cs) == 1 && cs[0].Cursor == log.Cursor{Epoch: log.Epoch(epoch), Pos: 3}
	})
	sendToBob(t, alice, "alice", "md")
	if got := c.Entries(3, 1); got[0].Seq != 4 {
		t.Fatalf("after the bad frames: %+v", got)
	}

	// A request on a sync stream resets it; so does a second SyncStart on it.
	for _, bad := range []proto.Frame{&proto.HeadCheck{ID: 1}, &proto.SyncStart{Epoch: epoch, Pos: 4}} {
		c.StartSync(epoch, 4)
		if _, ok := next(t, c.Sync, c.SyncR).(*proto.Heartbeat); !ok {
			t.Fatal("want the heartbeat of a caught-up stream")
		}
		if err := proto.WriteFrame(c.Sync, bad); err != nil {
			t.Fatal(err)
		}
		wantError(t, c.Sync, c.SyncR, proto.CodeUnexpectedFrame)
		wantEnd(t, c.Sync, c.SyncR)
		wantStopSending(t, c.Sync, proto.CodeUnexpectedFrame)
	}
	if h, ok := c.Do(&proto.HeadCheck{ID: c.ID()}).(*proto.Head); !ok || h.Head != 4 {
		t.Fatalf("the connection after the resets: %#v", h)
	}
}

// TestRequestStreamResetOnUnexpectedFrame: a known frame that does not belong on a request stream
// gets unexpected_frame and resets the stream (PROTOCOL §3): the request received before it is
// still answered, the one after it is never read, the stream ends, and the connection serves a
// new request stream.
func TestRequestStreamResetOnUnexpectedFrame(t *testing.T) {
	ts := startServer(t, nil)
	c := connect(t, ts, "alice", "phone")
	for _, bad := range []proto.Frame{&proto.CursorAck{Epoch: 1, Pos: 1}, &proto.Hello{Token: "x", Device: "phone", ProtoVersion: 1},
		&proto.Ack{ID: 1}, &proto.SyncStart{}} {
		st, err := c.QUIC.OpenStreamSync(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		r := proto.NewReader(st, c.MaxFrame())
		var frames []byte
		for _, f := range []proto.Frame{&proto.HeadCheck{ID: 1}, bad, &proto.HeadCheck{ID: 2}} {
			if frames, err = proto.AppendFrame(frames, f); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.Write(frames); err != nil { // in one write: the server has them all at once
			t.Fatal(err)
		}
		var head, unexpected int
		for {
			st.SetReadDeadline(time.Now().Add(prototest.Timeout))
			f, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("after %v: %v", bad.FrameType(), err)
			}
			switch f := f.(type) {
			case *proto.Head:
				if f.ID != 1 {
					t.Fatalf("after %v: the request after it was answered: %#v", bad.FrameType(), f)
				}
				head++
			case *proto.Error:
				if f.Code != proto.CodeUnexpectedFrame || f.ID != 0 {
					t.Fatalf("after %v: %#v", bad.FrameType(), f)
				}
				unexpected++
			default:
				t.Fatalf("after %v: %#v", bad.FrameType(), f)
			}
		}
		if head != 1 || unexpected != 1 {
			t.Fatalf("after %v: %d answers and %d errors, want 1 and 1", bad.FrameType(), head, unexpected)
		}
		wantStopSending(t, st, proto.CodeUnexpectedFrame)
	}
	if _, ok := c.Do(&proto.HeadCheck{ID: c.ID()}).(*proto.Head); !ok {
		t.Fatal("the first request stream stopped working")
	}
}

// TestFrameVersionClosesConnection: a frame of another version on a request or a sync stream
// closes the connection with unsupported_version as its QUIC code (PROTOCOL §3, §7); other
// connections of the same user go on.
func TestFrameVersionClosesConnection(t *testing.T) {
	ts := startServer(t, nil)
	other := connect(t, ts, "alice", "laptop")
	for _, onSync := range []bool{false, true} {
		c := connect(t, ts, "alice", "phone")
		st := c.Req
		if onSync {
			c.StartSync(0, 0)
			next(t, c.Sync, c.SyncR) // live
			st = c.Sync
		}
		if _, err := st.Write([]byte{0, 0, 0, 3, 2, byte(proto.TypeHeadCheck), 0x80}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-c.QUIC.Context().Done():
		case <-time.After(prototest.Timeout):
			t.Fatalf("sync stream %v: the connection is still open", onSync)
		}
		var closed *quic.ApplicationError
		if err := context.Cause(c.QUIC.Context()); !errors.As(err, &closed) || !closed.Remote ||
			closed.ErrorCode != quic.ApplicationErrorCode(proto.CodeUnsupportedVersion) {
			t.Fatalf("sync stream %v: closed with %v, want the server's code %d", onSync, err, proto.CodeUnsupportedVersion)
		}
	}
	if _, ok := other.Do(&proto.HeadCheck{ID: other.ID()}).(*proto.Head); !ok {
		t.Fatal("another connection of the user stopped working")
	}
}

// TestSyncStartAtLastPosition: a cursor at 2⁶⁴−1 under the log's epoch is beyond the head, which
// is not an error: the stream answers heartbeats (PROTOCOL §6, SyncStart). Under another epoch it
// is EpochChanged, as at any position.
func TestSyncStartAtLastPosition(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.Limits.HeartbeatMs = 100 })
	alice, c := connect(t, ts, "alice", "phone"), connect(t, ts, "bob", "phone")
	sendToBob(t, alice, "alice", "m1")
	c.StartSync(0, 0)
	c.Entries(0, 1)
	c.StartSync(c.Epoch, math.MaxUint64)
	for i := range 2 {
		if hb, ok := next(t, c.Sync, c.SyncR).(*proto.Heartbeat); !ok || hb.Head != 1 || hb.Epoch != c.Epoch {
			t.Fatalf("frame %d: %#v, want a heartbeat at head 1", i, hb)
		}
	}
	c.StartSync(c.Epoch+1, math.MaxUint64)
	if ec, ok := next(t, c.Sync, c.SyncR).(*proto.EpochChanged); !ok || ec.Epoch != c.Epoch || ec.Head != 1 {
		t.Fatalf("another epoch: %#v", ec)
	}
	wantEnd(t, c.Sync, c.SyncR)
}

// TestNoUnidirectionalStreams: the protocol has none, and a client cannot open one (each used to
// pin up to its receive window, 100 per connection); the connection works on.
func TestNoUnidirectionalStreams(t *testing.T) {
	ts := startServer(t, nil)
	c := connect(t, ts, "alice", "phone")
	var limit *quic.StreamLimitReachedError
	if _, err := c.QUIC.OpenUniStream(); !errors.As(err, &limit) {
		t.Fatalf("opening a unidirectional stream: %v, want the stream limit", err)
	}
	if _, ok := c.Do(&proto.HeadCheck{ID: c.ID()}).(*proto.Head); !ok {
		t.Fatal("the connection stopped working")
	}
}

// TestWelcomeAnnouncesStreamLimits: Welcome's limits carry max_streams, the send and query
// buckets and request_idle_ms, as the server enforces them; a client cannot open more streams
// than max_streams.
func TestWelcomeAnnouncesStreamLimits(t *testing.T) {
	ts := startServer(t, func(c *Config) {
		c.MaxStreamsPerConn, c.SendRate, c.SendBurst, c.QueryRate, c.QueryBurst, c.RequestIdle = 4, 7, 9, 11, 13, 90*time.Second
	})
	c := connect(t, ts, "alice", "phone")
	want := proto.Limits{MaxFrame: proto.DefaultMaxFrame, MaxBody: proto.MaxBody, MaxBatch: proto.DefaultMaxBatch,
		HeartbeatMs: proto.DefaultHeartbeatMs, SendRatePerS: 7, SendBurst: 9, QueryRatePerS: 11, QueryBurst: 13,
		MaxStreams: 4, RequestIdleMs: 90_000}
	if got := c.Welcome.Limits; got != want {
		t.Fatalf("limits %+v, want %+v", got, want)
	}
	// The control stream and the request stream are open: two more, and then no more.
	for i := range 3 {
		_, err := c.QUIC.OpenStream()
		var limit *quic.StreamLimitReachedError
		if i < 2 && err != nil || i == 2 && !errors.As(err, &limit) {
			t.Fatalf("stream %d of 4: %v", i+3, err)
		}
	}
}

// TestIdleRequestStreamClosed: a request stream without a frame from the client for
// request_idle_ms is closed by the server — cleanly, after answering what it received — as is a
// stream whose first frame never completes; a stream in use stays open, and the connection
// serves a new stream.
func TestIdleRequestStreamClosed(t *testing.T) {
	const idle = 400 * time.Millisecond
	ts := startServer(t, func(c *Config) { c.RequestIdle = idle })
	c := connect(t, ts, "alice", "phone")
	if c.Welcome.Limits.RequestIdleMs != uint32(idle.Milliseconds()) {
		t.Fatalf("request_idle_ms %d", c.Welcome.Limits.RequestIdleMs)
	}
	// In use, with less than idle between frames: stays open.
	began := time.Now()
	for time.Since(began) < 3*idle {
		if _, ok := c.Do(&proto.HeadCheck{ID: c.ID()}).(*proto.Head); !ok {
			t.Fatal("a busy stream was not served")
		}
		time.Sleep(idle / 4)
	}
	// Idle: ends cleanly, and the server stops reading it.
	began = time.Now()
	wantEnd(t, c.Req, c.ReqR)
	if took := time.Since(began); took < idle/2 {
		t.Fatalf("closed after %v, before request_idle_ms", took)
	}
	wantStopSending(t, c.Req, 0)

	// A stream whose first frame stalls halfway is closed too.
	st, err := c.QUIC.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write([]byte{0, 0, 0, 9, 1}); err != nil {
		t.Fatal(err)
	}
	wantEnd(t, st, proto.NewReader(st, c.MaxFrame()))

	// The connection is fine: a new request stream is served.
	if c.Req, err = c.QUIC.OpenStreamSync(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.ReqR = proto.NewReader(c.Req, c.MaxFrame())
	if _, ok := c.Do(&proto.HeadCheck{ID: c.ID()}).(*proto.Head); !ok {
		t.Fatal("a new request stream was not served")
	}
}

// TestTruncatedLogFirstPosition: HeadCheck reports the first retained position, and a new
// device (SyncStart{0, 0}) on a log whose start was trimmed gets TooOld with it — never a silent
// start at the first retained entry (G3) — then syncs from the head it rebased to.
func TestTruncatedLogFirstPosition(t *testing.T) {
	ts := startServer(t, func(c *Config) {
		c.Retention, c.RetentionInterval = log.Retention{MaxCount: 2}, 50*time.Millisecond
		c.QueryRate = 1000 // the test polls HeadCheck
	})
	alice, c := connect(t, ts, "alice", "phone"), connect(t, ts, "bob", "phone")
	if h, ok := c.Do(&proto.HeadCheck{ID: c.ID()}).(*proto.Head); !ok || h.Epoch != 0 || h.First != 1 || h.Head != 0 {
		t.Fatalf("head of a log not created yet: %#v", h)
	}
	for _, m := range []string{"m1", "m2", "m3", "m4", "m5"} {
		sendToBob(t, alice, "alice", m)
	}
	var h *proto.Head
	testkit.WaitTrue(t, 10*time.Second, "retention to trim bob's log to 2 entries", func() bool {
		h, _ = c.Do(&proto.HeadCheck{ID: c.ID()}).(*proto.Head)
		return h != nil && h.Head == 5 && h.First == 4
	})
	c.StartSync(0, 0)
	tooOld, ok := next(t, c.Sync, c.SyncR).(*proto.TooOld)
	if !ok || tooOld.First != 4 || tooOld.Head != 5 || tooOld.Epoch != h.Epoch {
		t.Fatalf("SyncStart{0,0} on a trimmed log: %#v, want TooOld{first 4, head 5}", tooOld)
	}
	wantEnd(t, c.Sync, c.SyncR)
	c.StartSync(tooOld.Epoch, tooOld.Head)
	if hb, ok := next(t, c.Sync, c.SyncR).(*proto.Heartbeat); !ok || hb.Head != 5 {
		t.Fatalf("after the rebase: %#v", hb)
	}
}
