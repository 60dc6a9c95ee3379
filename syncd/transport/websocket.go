package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
)

// The WebSocket mapping (PROTOCOL §2.4): every binary message is one record, a stream id, a
// kind and a payload; the records carry what QUIC's frames carry — a stream's bytes, its FIN,
// RESET_STREAM, STOP_SENDING — and per-stream credit, which QUIC's flow control gives for free:
// without it one stream whose reader stops would either stall every stream of the connection
// (TCP has one window) or make the server buffer without bound.

// Record kinds.
const (
	recData   byte = 0
	recFin    byte = 1
	recReset  byte = 2
	recStop   byte = 3
	recCredit byte = 4
)

const (
	// wsWindow is a stream's credit, each way, before any CREDIT record.
	wsWindow = 256 << 10
	// wsMaxPayload is the largest DATA payload.
	wsMaxPayload = 64 << 10
	// wsHeader is a record's stream id and kind.
	wsHeader = 5
	// wsPingEvery and wsPongWait: a WebSocket silent for their sum (30 s) is dead, as a QUIC
	// connection past its idle timeout.
	wsPingEvery = 10 * time.Second
	wsPongWait  = 20 * time.Second
	// wsControlTimeout bounds writing a record other than DATA (their writers cannot wait on a
	// stream's deadline) and the close handshake.
	wsControlTimeout = 5 * time.Second
	// wsMaxReason is the most a close frame's reason holds.
	wsMaxReason = 123
)

// errMalformedRecord is a record that breaks §2.4: the connection is closed with malformed (1).
var errMalformedRecord = errors.New("malformed websocket record")

// codeMalformed is proto.CodeMalformed, which the transport layer spells as a number so as not
// to depend on the codes of the layer above.
const codeMalformed = 1

// wsConn is one WebSocket carrying a session's streams.
type wsConn struct {
	ws         *websocket.Conn
	sendMsg    func(ctx context.Context, b []byte) error // writes one binary message (ws.Write; the fuzz test's discards)
	remote     net.Addr
	maxStreams int
	refuse     func(Stream) // answers a stream beyond maxStreams (Error too_many_streams) and ends it

	ctx    context.Context // ends when the connection closes
	cancel context.CancelCauseFunc
	accept chan *wsStream // streams opened and not yet accepted; never more than maxStreams

	client bool // this side opens the streams (DialWebSocket); else it accepts them

	mu          sync.Mutex
	streams     map[uint32]*wsStream // open streams by id
	highest     uint32               // the highest stream id the client used (opened, on the client)
	closeStatus websocket.StatusCode // set by the first CloseWithError
	closeReason string
}

// newWSConn serves ws as a Conn; the caller runs serve.
func newWSConn(ws *websocket.Conn, remote net.Addr, maxStreams int, refuse func(Stream)) *wsConn {
	if ws != nil { // nil only in the fuzz test, which feeds dispatch directly
		ws.SetReadLimit(wsHeader + wsMaxPayload)
	}
	c := &wsConn{ws: ws, remote: remote, maxStreams: maxStreams, refuse: refuse,
		sendMsg: func(ctx context.Context, b []byte) error { return ws.Write(ctx, websocket.MessageBinary, b) },
		accept:  make(chan *wsStream, maxStreams), streams: map[uint32]*wsStream{}}
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	return c
}

// serve reads records until the connection ends, keeping it alive with pings, then closes the
// WebSocket with the status CloseWithError set (a normal close if none) and returns once
// nothing of the connection runs.
func (c *wsConn) serve() {
	read := make(chan struct{})
	go func() {
		defer close(read)
		c.cancel(closedConn(c.readLoop()))
	}()
	tick := time.NewTicker(wsPingEvery)
	defer tick.Stop()
	for c.ctx.Err() == nil {
		select {
		case <-c.ctx.Done():
		case <-tick.C:
			// Not under c.ctx: the library closes a WebSocket whose operation is cancelled, which
			// would lose the close status CloseWithError set.
			ctx, cancel := context.WithTimeout(context.Background(), wsPongWait)
			err := c.ws.Ping(ctx)
			cancel()
			if err != nil && c.ctx.Err() == nil {
				c.CloseWithError(0, "no pong within the idle timeout")
			}
		}
	}
	c.mu.Lock()
	status, reason := c.closeStatus, c.closeReason
	c.mu.Unlock()
	if status == 0 {
		status = websocket.StatusNormalClosure
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		c.ws.Close(status, reason) // waits up to 5 s for the client's close
	}()
	select {
	case <-closed:
	case <-time.After(wsControlTimeout):
		c.ws.CloseNow()
		<-closed
	}
	<-read
}

// readLoop dispatches records until the WebSocket fails or a record breaks the protocol (then
// the connection is closed with malformed); it returns why it stopped.
func (c *wsConn) readLoop() error {
	for {
		typ, b, err := c.ws.Read(context.Background()) // ends with the close handshake (serve)
		if err != nil {
			return err
		}
		if err := c.dispatch(typ, b); err != nil {
			c.CloseWithError(codeMalformed, err.Error())
			return err
		}
	}
}

// dispatch applies one record.
func (c *wsConn) dispatch(typ websocket.MessageType, b []byte) error {
	if typ != websocket.MessageBinary {
		return fmt.Errorf("%w: a text message (every message is a binary record)", errMalformedRecord)
	}
	if len(b) < wsHeader {
		return fmt.Errorf("%w: %d bytes, shorter than a record's header", errMalformedRecord, len(b))
	}
	id, kind, payload := binary.BigEndian.Uint32(b), b[4], b[wsHeader:]
	if id == 0 {
		return fmt.Errorf("%w: stream id 0", errMalformedRecord)
	}
	switch kind {
	case recData:
		if len(payload) == 0 {
			return fmt.Errorf("%w: empty DATA on stream %d", errMalformedRecord, id)
		}
	case recFin:
		if len(payload) != 0 {
			return fmt.Errorf("%w: FIN with a payload on stream %d", errMalformedRecord, id)
		}
	case recReset, recStop, recCredit:
		if len(payload) != 4 {
			return fmt.Errorf("%w: kind %d with %d payload bytes on stream %d (want 4)", errMalformedRecord, kind, len(payload), id)
		}
	default:
		return fmt.Errorf("%w: unknown kind %d on stream %d", errMalformedRecord, kind, id)
	}
	if c.client {
		c.mu.Lock()
		st := c.streams[id]
		c.mu.Unlock()
		if st == nil {
			if id > c.highest {
				return fmt.Errorf("%w: the server used stream %d, which the client did not open", errMalformedRecord, id)
			}
			return nil
		}
		return st.receive(kind, payload)
	}
	st, refused, err := c.stream(id)
	if err != nil {
		return err
	}
	if refused != nil {
		c.refuse(refused)
		return nil
	}
	if st == nil {
		return nil // a late record of a stream that has ended
	}
	return st.receive(kind, payload)
}

// stream returns the open stream id, opening it if the client uses the next id: nil for an id at
// or below the highest used that is not open, an error for one past the next. A new stream
// beyond maxStreams is returned as refused instead, never registered.
func (c *wsConn) stream(id uint32) (st, refused *wsStream, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.streams[id]; st != nil {
		return st, nil, nil
	}
	if id <= c.highest {
		return nil, nil, nil
	}
	if id != c.highest+1 {
		// A skipped id would later look like a stream that ended, its records ignored: a client
		// that numbers streams as it opens them but writes them out of order loses requests
		// silently. Refused at once instead.
		return nil, nil, fmt.Errorf("%w: stream %d opened after stream %d (a new stream's id is the next one)", errMalformedRecord, id, c.highest)
	}
	c.highest = id
	st = newWSStream(c, id)
	if len(c.streams) >= c.maxStreams {
		return nil, st, nil
	}
	select {
	case c.accept <- st:
	default: // streams released before they were accepted still wait in the queue
		return nil, st, nil
	}
	c.streams[id] = st
	return st, nil, nil
}

// release forgets a stream both sides have ended: it no longer counts against maxStreams, and
// its late records are ignored.
func (c *wsConn) release(id uint32) {
	c.mu.Lock()
	delete(c.streams, id)
	c.mu.Unlock()
}

func (c *wsConn) AcceptStream(ctx context.Context) (Stream, error) {
	select {
	case st := <-c.accept:
		return st, nil
	case <-c.ctx.Done():
		return nil, context.Cause(c.ctx)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *wsConn) CloseWithError(code uint64, reason string) {
	c.mu.Lock()
	if c.closeStatus == 0 && c.ctx.Err() == nil {
		c.closeStatus = websocket.StatusNormalClosure
		if code != 0 {
			c.closeStatus = websocket.StatusCode(4000 + min(code, 999))
		}
		c.closeReason = truncateUTF8(reason, wsMaxReason)
	}
	c.mu.Unlock()
	c.cancel(closedConn(fmt.Errorf("connection closed by the server (code %d): %s", code, reason)))
}

func (c *wsConn) Context() context.Context { return c.ctx }
func (c *wsConn) RemoteAddr() net.Addr     { return c.remote }
func (c *wsConn) Kind() Kind               { return WebSocket }

// writeRecord writes one record by the deadline dl. A write cut off by its deadline closes the
// WebSocket (the library cannot leave half a message on it): the client stopped reading its
// socket, so every stream of the connection is stuck anyway. The write's context is not c.ctx,
// whose end would close the WebSocket before serve could send the close status.
func (c *wsConn) writeRecord(dl time.Time, id uint32, kind byte, payload []byte) error {
	if c.ctx.Err() != nil {
		return context.Cause(c.ctx)
	}
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if !dl.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, dl)
	}
	defer cancel()
	b := make([]byte, wsHeader+len(payload))
	binary.BigEndian.PutUint32(b, id)
	b[4] = kind
	copy(b[wsHeader:], payload)
	if err := c.sendMsg(ctx, b); err != nil {
		if ctx.Err() != nil && c.ctx.Err() == nil {
			return os.ErrDeadlineExceeded
		}
		if c.ctx.Err() != nil {
			return context.Cause(c.ctx)
		}
		return closedConn(err)
	}
	return nil
}

// writeCode writes a record whose payload is a code or a credit.
func (c *wsConn) writeCode(id uint32, kind byte, v uint32) error {
	return c.writeRecord(time.Now().Add(wsControlTimeout), id, kind, binary.BigEndian.AppendUint32(nil, v))
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// wsStream is one stream of a wsConn.
type wsStream struct {
	c  *wsConn
	id uint32

	readSig, writeSig chan struct{} // wake a waiting Read or Write (capacity 1)
	sendMu            sync.Mutex    // orders this stream's records: no DATA after its FIN or RESET

	mu sync.Mutex
	// The client's side.
	buf       []byte       // received, not yet read
	window    int64        // DATA bytes the client may still send
	ungranted int          // bytes read since the last CREDIT
	finRecv   bool         // the client's FIN
	resetRecv *StreamError // the client's RESET
	stopped   *StreamError // our STOP: reads fail, the client's DATA is dropped
	readDL    time.Time
	// Our side.
	credit   int64        // DATA bytes we may still send
	sendDone bool         // our FIN or RESET was decided
	sendErr  *StreamError // the client's STOP, or our own RESET: writes fail with it
	writeDL  time.Time
	released bool
}

func newWSStream(c *wsConn, id uint32) *wsStream {
	return &wsStream{c: c, id: id, readSig: make(chan struct{}, 1), writeSig: make(chan struct{}, 1),
		window: wsWindow, credit: wsWindow}
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// receive applies a record of the client's for this stream.
func (st *wsStream) receive(kind byte, payload []byte) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch kind {
	case recData:
		if st.finRecv || st.resetRecv != nil {
			return fmt.Errorf("%w: DATA after the end of stream %d", errMalformedRecord, st.id)
		}
		st.window -= int64(len(payload))
		if st.window < 0 {
			return fmt.Errorf("%w: DATA beyond the credit of stream %d", errMalformedRecord, st.id)
		}
		if st.stopped == nil {
			st.buf = append(st.buf, payload...)
		}
		wake(st.readSig)
	case recFin:
		if st.finRecv || st.resetRecv != nil {
			return fmt.Errorf("%w: FIN after the end of stream %d", errMalformedRecord, st.id)
		}
		st.finRecv = true
		wake(st.readSig)
	case recReset:
		if st.resetRecv == nil {
			st.resetRecv = &StreamError{Code: uint64(binary.BigEndian.Uint32(payload)), Remote: true}
			st.buf = nil
		}
		wake(st.readSig)
	case recStop:
		if !st.sendDone {
			code := binary.BigEndian.Uint32(payload)
			st.sendErr = &StreamError{Code: uint64(code), Remote: true}
			go st.endSend(recReset, code) // answered as QUIC does; not on the reader's time
		}
		wake(st.writeSig)
	case recCredit:
		if st.credit += int64(binary.BigEndian.Uint32(payload)); st.credit > 1<<62 {
			return fmt.Errorf("%w: credit beyond 2^62 on stream %d", errMalformedRecord, st.id)
		}
		wake(st.writeSig)
	}
	st.releaseLocked()
	return nil
}

// releaseLocked releases the stream once both sides have ended.
//
// REQUIRES: st.mu
func (st *wsStream) releaseLocked() {
	if !st.released && st.sendDone && (st.finRecv || st.resetRecv != nil || st.stopped != nil) {
		st.released = true
		st.c.release(st.id)
	}
}

func (st *wsStream) Read(p []byte) (int, error) {
	for {
		st.mu.Lock()
		if st.resetRecv != nil {
			st.mu.Unlock()
			return 0, st.resetRecv
		}
		if st.stopped != nil {
			st.mu.Unlock()
			return 0, st.stopped
		}
		if len(st.buf) > 0 {
			n := copy(p, st.buf)
			st.buf = st.buf[n:]
			st.ungranted += n
			grant := 0
			if st.ungranted >= wsWindow/2 {
				grant, st.ungranted = st.ungranted, 0
				st.window += int64(grant)
			}
			st.mu.Unlock()
			if grant > 0 {
				st.c.writeCode(st.id, recCredit, uint32(grant))
			}
			return n, nil
		}
		if st.finRecv {
			st.mu.Unlock()
			return 0, io.EOF
		}
		dl := st.readDL
		st.mu.Unlock()
		if err := st.wait(st.readSig, dl); err != nil {
			return 0, err
		}
	}
}

// wait waits for sig, the deadline dl (zero: none) or the connection's end.
func (st *wsStream) wait(sig chan struct{}, dl time.Time) error {
	var expired <-chan time.Time
	if !dl.IsZero() {
		d := time.Until(dl)
		if d <= 0 {
			return os.ErrDeadlineExceeded
		}
		t := time.NewTimer(d)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-sig:
		return nil
	case <-expired:
		return os.ErrDeadlineExceeded
	case <-st.c.ctx.Done():
		return context.Cause(st.c.ctx)
	}
}

func (st *wsStream) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		st.mu.Lock()
		if err := st.sendErrLocked(); err != nil {
			st.mu.Unlock()
			return n, err
		}
		if st.credit == 0 {
			dl := st.writeDL
			st.mu.Unlock()
			if err := st.wait(st.writeSig, dl); err != nil {
				return n, err
			}
			continue
		}
		k := int(min(int64(len(p)-n), st.credit, wsMaxPayload))
		st.credit -= int64(k)
		dl := st.writeDL
		st.mu.Unlock()
		if err := st.writeData(p[n:n+k], dl); err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

// sendErrLocked is why a write must fail: the stream's end, or the connection's.
//
// REQUIRES: st.mu
func (st *wsStream) sendErrLocked() error {
	switch {
	case st.sendErr != nil:
		return st.sendErr
	case st.sendDone:
		return errors.New("write on a stream whose side is closed")
	case st.c.ctx.Err() != nil:
		return context.Cause(st.c.ctx)
	}
	return nil
}

// writeData writes one DATA record unless the stream's side ended meanwhile.
func (st *wsStream) writeData(b []byte, dl time.Time) error {
	st.sendMu.Lock()
	defer st.sendMu.Unlock()
	st.mu.Lock()
	err := st.sendErrLocked()
	st.mu.Unlock()
	if err != nil {
		return err
	}
	return st.c.writeRecord(dl, st.id, recData, b)
}

// endSend ends our side with a FIN or a RESET of code, once.
func (st *wsStream) endSend(kind byte, code uint32) {
	st.sendMu.Lock()
	defer st.sendMu.Unlock()
	st.mu.Lock()
	if st.sendDone {
		st.mu.Unlock()
		return
	}
	st.sendDone = true
	if kind == recReset && st.sendErr == nil {
		st.sendErr = &StreamError{Code: uint64(code)}
	}
	st.releaseLocked()
	st.mu.Unlock()
	wake(st.writeSig)
	if kind == recFin {
		st.c.writeRecord(time.Now().Add(wsControlTimeout), st.id, recFin, nil)
		return
	}
	st.c.writeCode(st.id, recReset, code)
}

func (st *wsStream) Close() error {
	st.endSend(recFin, 0)
	return nil
}

func (st *wsStream) CancelWrite(code uint64) { st.endSend(recReset, uint32(code)) }

func (st *wsStream) CancelRead(code uint64) {
	st.mu.Lock()
	if st.stopped != nil || st.finRecv || st.resetRecv != nil {
		st.mu.Unlock()
		return
	}
	st.stopped = &StreamError{Code: code}
	st.buf = nil
	st.releaseLocked()
	st.mu.Unlock()
	wake(st.readSig)
	st.c.writeCode(st.id, recStop, uint32(code))
}

func (st *wsStream) SetReadDeadline(t time.Time) error {
	st.mu.Lock()
	st.readDL = t
	st.mu.Unlock()
	wake(st.readSig)
	return nil
}

func (st *wsStream) SetWriteDeadline(t time.Time) error {
	st.mu.Lock()
	st.writeDL = t
	st.mu.Unlock()
	wake(st.writeSig)
	return nil
}

func (st *wsStream) ID() int64 { return int64(st.id) }
