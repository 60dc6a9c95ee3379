// Package transport carries the protocol's streams over the three ways a client reaches a node
// (PROTOCOL §2): raw QUIC with ALPN syncd/1, WebTransport over HTTP/3 on the same UDP socket
// (§2.3), and a WebSocket that multiplexes the streams in its messages (§2.4). Each yields a
// Conn whose Streams behave as QUIC's do — FIN, resets and STOP_SENDING with a code, deadlines,
// a connection close with a code and a reason — so the session code serves one interface and
// never knows which transport it has.
package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Kind names a transport, as metrics and logs label connections.
type Kind string

// The transports.
const (
	QUIC         Kind = "quic"
	WebTransport Kind = "webtransport"
	WebSocket    Kind = "websocket"
)

// Conn is one client connection: the unit of a protocol session.
type Conn interface {
	// AcceptStream returns the next stream the client opened.
	AcceptStream(ctx context.Context) (Stream, error)
	// CloseWithError closes the connection with an application error code and a reason phrase
	// (PROTOCOL §2: the reason carries the Error whole); streams fail from then on.
	CloseWithError(code uint64, reason string)
	// Context ends when the connection is closed, by either side.
	Context() context.Context
	// RemoteAddr is the client's address (the source of admission's per-source limits).
	RemoteAddr() net.Addr
	// Kind says which transport carries the connection.
	Kind() Kind
}

// Stream is one bidirectional stream the client opened.
type Stream interface {
	io.Reader
	io.Writer
	// Close ends the server's side normally (FIN); reading goes on.
	Close() error
	// CancelRead stops reading with code (STOP_SENDING): the client's writes fail with it.
	CancelRead(code uint64)
	// CancelWrite abandons the server's side with code (RESET_STREAM).
	CancelWrite(code uint64)
	// SetReadDeadline and SetWriteDeadline bound Read and Write: past the deadline they fail
	// with an error that is os.ErrDeadlineExceeded. The zero time means none.
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
	// ID names the stream in messages.
	ID() int64
}

// StreamError is the error of a Read or Write on a stream reset or stopped with Code: by the
// client (Remote) or by this side.
type StreamError struct {
	Code   uint64
	Remote bool
}

func (e *StreamError) Error() string {
	if e.Remote {
		return fmt.Sprintf("stream reset by the client with code %d", e.Code)
	}
	return fmt.Sprintf("stream reset with code %d", e.Code)
}

// ErrConnClosed is (wrapped in) the error of a stream operation or AcceptStream on a connection
// that is closed, by either side or by its idle timeout.
var ErrConnClosed = errors.New("connection closed")

// PeerReset reports whether err says the client reset its side of a stream.
func PeerReset(err error) bool {
	var se *StreamError
	return errors.As(err, &se) && se.Remote
}

// connClosedError wraps the transport's own error of a closed connection so that it is
// ErrConnClosed and still says what happened.
type connClosedError struct{ err error }

func (e connClosedError) Error() string   { return e.err.Error() }
func (e connClosedError) Unwrap() []error { return []error{ErrConnClosed, e.err} }
func closedConn(err error) error          { return connClosedError{err} }
