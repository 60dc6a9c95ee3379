package conformance

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/syncd/transport"
)

// The relay stands between a client and the kit's server. It terminates the client's connection
// (any transport), opens one of its own to the server over raw QUIC, and carries every stream
// both ways frame by frame: client frames byte for byte (so the server judges them, malformed
// ones included), server frames through the run's scenario, which may drop, change, add or
// slow them. It records what the client does — its cursor acks, sync restarts, connections,
// tokens — for the verdict.

// relayConn is one client connection of a run.
type relayConn struct {
	r         *run
	n         int // 1 for the run's first connection
	down      transport.Conn
	up        *quic.Conn
	opened    time.Time
	blackhole bool         // the scenario made the "node" stop answering: nothing passes either way
	control   *relayStream // the control stream, where the relay may write an Error of its own
}

// relayStream is one stream of a relayed connection.
type relayStream struct {
	c    *relayConn
	role string // "control", "request" or "sync", from the client's first frame
	down transport.Stream
	up   *quic.Stream

	// Of a sync stream: the contiguous log the relay has delivered since its SyncStart.
	start  *proto.SyncStart
	epoch  proto.Epoch
	contig proto.Position
	broken bool // a batch that did not follow was delivered: nothing after it counts
	// forged: the scenario moved the after of the batch being delivered (source_after) from
	// realAfter: the source's log the stream delivered is broken from it on.
	forged    bool
	realAfter proto.Position
	// sources is the same for each source of the stream (large groups), by conversation.
	sources map[string]*sourceAccount

	silent bool          // drop every server frame from now on
	pace   time.Duration // deliver each server frame in pieces over this long

	writeMu sync.Mutex // whole frames to the client: the relay's own may come between the server's
}

// Stream roles.
const (
	roleControl = "control"
	roleRequest = "request"
	roleSync    = "sync"
)

// handshakeTimeout bounds how long a client may take to open its control stream and say Hello.
const handshakeTimeout = 10 * time.Second

// serveConn relays one client connection until either side closes it or the kit stops.
func (k *Kit) serveConn(ctx context.Context, down transport.Conn) {
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	ctl, err := down.AcceptStream(hctx)
	cancel()
	if err != nil {
		down.CloseWithError(uint64(proto.CodeTimeout), "conformance kit: no control stream")
		return
	}
	ctl.SetReadDeadline(time.Now().Add(handshakeTimeout))
	raw, f, err := readRaw(ctl)
	ctl.SetReadDeadline(time.Time{})
	hello, ok := f.(*proto.Hello)
	if err != nil || !ok {
		down.CloseWithError(uint64(proto.CodeUnexpectedFrame), "conformance kit: the first frame must be Hello")
		return
	}
	r := k.runOf(hello.Token)
	if r == nil {
		down.CloseWithError(uint64(proto.CodeUnauthenticated),
			"conformance kit: not a token of a run; start one with POST /v1/runs and use the token it returns")
		return
	}
	srv := r.upstream()
	if srv == nil {
		down.CloseWithError(uint64(proto.CodeUnavailable), "conformance kit: the run's cluster is being restored from a backup; try again shortly")
		return
	}
	c := r.addConn(down)
	// Every goroutine of the connection is waited for: the kit leaves none behind when it closes.
	var streams sync.WaitGroup
	defer streams.Wait()
	up, err := quic.DialAddr(ctx, srv.Addr().String(), proto.PinnedTLSConfig(srv.Fingerprint()),
		&quic.Config{MaxIdleTimeout: 30 * time.Second, KeepAlivePeriod: 5 * time.Second})
	if err != nil {
		down.CloseWithError(uint64(proto.CodeUnavailable), "conformance kit: its server is unreachable: "+err.Error())
		return
	}
	c.up = up
	defer up.CloseWithError(0, "client gone")
	defer down.CloseWithError(0, "")
	streams.Go(func() { // a connection the server closes is closed towards the client alike
		select {
		case <-up.Context().Done():
			var ae *quic.ApplicationError
			if errors.As(context.Cause(up.Context()), &ae) && ae.Remote {
				r.connClosed(c, ae.ErrorCode)
				down.CloseWithError(uint64(ae.ErrorCode), ae.ErrorMessage)
			}
		case <-down.Context().Done():
			up.CloseWithError(0, "client gone")
		}
	})
	uctl, err := up.OpenStreamSync(ctx)
	if err != nil {
		return
	}
	st := &relayStream{c: c, role: roleControl, down: ctl, up: uctl}
	c.control = st
	r.observeClient(st, hello)
	if _, err := uctl.Write(raw); err != nil {
		return
	}
	streams.Go(st.toServer)
	streams.Go(st.toClient)
	for {
		ds, err := down.AcceptStream(ctx)
		if err != nil {
			return
		}
		us, err := up.OpenStreamSync(ctx)
		if err != nil {
			ds.CancelRead(0)
			ds.CancelWrite(0)
			return
		}
		st := &relayStream{c: c, role: roleRequest, down: ds, up: us}
		streams.Go(st.toServer)
		streams.Go(st.toClient)
	}
}

// toServer carries the client's frames to the server unchanged, recording them.
func (st *relayStream) toServer() {
	for {
		raw, f, err := readRaw(st.down)
		if err != nil {
			var se *transport.StreamError
			switch {
			case errors.Is(err, io.EOF):
				st.up.Close()
			case errors.As(err, &se):
				st.up.CancelWrite(quic.StreamErrorCode(se.Code))
			default:
				st.up.CancelWrite(0)
			}
			return
		}
		if !st.c.r.observeClient(st, f) {
			continue
		}
		if _, err := st.up.Write(raw); err != nil {
			st.down.CancelRead(0)
			return
		}
	}
}

// toClient carries the server's frames to the client through the scenario.
func (st *relayStream) toClient() {
	for {
		raw, f, err := readRaw(st.up)
		if err != nil {
			var se *quic.StreamError
			switch {
			case errors.Is(err, io.EOF):
				st.down.Close()
			case errors.As(err, &se):
				st.down.CancelWrite(uint64(se.ErrorCode))
			default:
				st.down.CancelWrite(0)
			}
			return
		}
		out, pace := st.c.r.fromServer(st, raw, f)
		for _, b := range out {
			if err := st.write(b, pace); err != nil {
				st.up.CancelRead(0)
				return
			}
		}
	}
}

// write writes one frame to the client.
func (st *relayStream) write(b []byte, pace time.Duration) error {
	st.writeMu.Lock()
	defer st.writeMu.Unlock()
	return writePaced(st.down, b, pace)
}

// closeWith closes the client's connection as a server refusing it does (syncd's closeConn): the
// Error on the control stream, then the connection close carrying it again (PROTOCOL §2).
func (c *relayConn) closeWith(e *proto.Error) {
	if c.control != nil {
		c.control.down.SetWriteDeadline(time.Now().Add(time.Second))
		c.control.write(encode(e), 0)
	}
	c.down.CloseWithError(uint64(e.Code), proto.CloseReason(e))
}

// writePaced writes b, in eight pieces spread over pace when pace is not zero.
func writePaced(w io.Writer, b []byte, pace time.Duration) error {
	if pace == 0 {
		_, err := w.Write(b)
		return err
	}
	const pieces = 8
	step := (len(b) + pieces - 1) / pieces
	for len(b) > 0 {
		n := min(step, len(b))
		if _, err := w.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
		if len(b) > 0 {
			time.Sleep(pace / pieces)
		}
	}
	return nil
}

// readRaw reads one frame whole: its bytes as they came, and its decoding (nil when the body
// does not decode, or is of a type or version the kit does not know: it is passed on anyway).
func readRaw(rd io.Reader) (raw []byte, f proto.Frame, err error) {
	var hdr [4]byte
	if _, err := io.ReadFull(rd, hdr[:]); err != nil {
		return nil, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > proto.MaxFrameLimit {
		return nil, nil, fmt.Errorf("%w: declared length %d", proto.ErrFrameTooLarge, n)
	}
	raw = make([]byte, 4+int(n))
	copy(raw, hdr[:])
	if _, err := io.ReadFull(rd, raw[4:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, nil, err
	}
	if n >= 2 && raw[4] == proto.FrameVersion {
		f, _ = proto.Decode(proto.Type(raw[5]), raw[6:])
	}
	return raw, f, nil
}

// encode returns the bytes of f, which the kit built itself.
func encode(f proto.Frame) []byte {
	b, err := proto.AppendFrame(nil, f)
	if err != nil {
		panic(fmt.Sprintf("conformance: encoding a %T the kit built: %v", f, err))
	}
	return b
}

// addConn registers a new client connection of the run.
func (r *run) addConn(down transport.Conn) *relayConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &relayConn{r: r, n: len(r.conns) + 1, down: down, opened: time.Now()}
	r.conns = append(r.conns, c)
	r.tracef("connection %d opened from %s", c.n, down.RemoteAddr())
	return c
}

// connClosed records the code the server closed c with.
func (r *run) connClosed(c *relayConn, code quic.ApplicationErrorCode) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tracef("connection %d closed by the server: %v", c.n, proto.Code(code))
	r.sc.closed(r, c, proto.Code(code))
}

// observeClient records a client frame (f is nil when it did not decode) and reports whether
// to pass it on.
func (r *run) observeClient(st *relayStream, f proto.Frame) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st.c.blackhole {
		return false
	}
	switch f := f.(type) {
	case *proto.SyncStart:
		if st.role == roleRequest && st.start == nil {
			st.role, st.start = roleSync, f
			st.epoch, st.contig = f.Epoch, f.Pos
			r.onSyncStart(st.c, f)
		}
	case *proto.CursorAck:
		if st.role == roleSync {
			r.onAck(st, f)
		}
	case *proto.Send:
		r.sent[f.ClientMsgID] = true
	}
	return r.sc.client(r, st, f)
}

// fromServer passes a server frame through the scenario and returns the bytes to write to the
// client, accounting what it delivers, and how slowly to write them.
func (r *run) fromServer(st *relayStream, raw []byte, f proto.Frame) ([][]byte, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st.c.blackhole || st.silent {
		return nil, 0
	}
	out := r.sc.server(r, st, f)
	if out == nil {
		out = []proto.Frame{f}
	} else {
		r.tracef("connection %d: the scenario turned a server %T into %d frames", st.c.n, f, len(out))
	}
	var bs [][]byte
	for _, g := range out {
		var b *proto.Batch
		switch g := g.(type) {
		case *rawBatch:
			bs, b = append(bs, g.f), g.b
		default:
			if g == f {
				bs = append(bs, raw) // unchanged: the server's own bytes
			} else {
				bs = append(bs, encode(g)) // scenarios return a new value for a changed frame
			}
			b, _ = g.(*proto.Batch)
		}
		if b != nil && st.role == roleSync {
			st.delivered(b)
		}
	}
	return bs, st.pace
}
