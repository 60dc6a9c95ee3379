package transport

import (
	"context"
	"errors"
	"net"

	"github.com/quic-go/quic-go"
)

// quicConn is a raw QUIC connection of ALPN syncd/1.
type quicConn struct{ c *quic.Conn }

// FromQUIC makes a QUIC connection of ALPN syncd/1 a Conn.
func FromQUIC(c *quic.Conn) Conn { return quicConn{c} }

func (q quicConn) AcceptStream(ctx context.Context) (Stream, error) {
	st, err := q.c.AcceptStream(ctx)
	if err != nil {
		return nil, quicError(err)
	}
	return quicStream{st}, nil
}

func (q quicConn) CloseWithError(code uint64, reason string) {
	q.c.CloseWithError(quic.ApplicationErrorCode(code), reason)
}

func (q quicConn) Context() context.Context { return q.c.Context() }
func (q quicConn) RemoteAddr() net.Addr     { return q.c.RemoteAddr() }
func (q quicConn) Kind() Kind               { return QUIC }

// quicStream is a QUIC stream with its errors translated.
type quicStream struct{ *quic.Stream }

func (s quicStream) Read(p []byte) (int, error) {
	n, err := s.Stream.Read(p)
	return n, quicError(err)
}

func (s quicStream) Write(p []byte) (int, error) {
	n, err := s.Stream.Write(p)
	return n, quicError(err)
}

func (s quicStream) CancelRead(code uint64)  { s.Stream.CancelRead(quic.StreamErrorCode(code)) }
func (s quicStream) CancelWrite(code uint64) { s.Stream.CancelWrite(quic.StreamErrorCode(code)) }
func (s quicStream) ID() int64               { return int64(s.StreamID()) }

// quicError translates quic-go's stream and connection errors (nil and io.EOF pass through).
func quicError(err error) error {
	if err == nil {
		return nil
	}
	var se *quic.StreamError
	if errors.As(err, &se) {
		return &StreamError{Code: uint64(se.ErrorCode), Remote: se.Remote}
	}
	var (
		app   *quic.ApplicationError
		idle  *quic.IdleTimeoutError
		trans *quic.TransportError
		reset *quic.StatelessResetError
	)
	if errors.As(err, &app) || errors.As(err, &idle) || errors.As(err, &trans) || errors.As(err, &reset) {
		return closedConn(err)
	}
	return err
}
