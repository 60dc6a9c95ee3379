package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"

	"github.com/quic-go/quic-go"

	"github.com/syncd-dev/syncd/proto"
)

// conn is one authenticated QUIC connection: the control stream, one pipelined request stream
// whose answers a reader goroutine hands to the waiting caller by request id, and the limits the
// server announced.
type conn struct {
	addr    string // the node it is connected to
	q       *quic.Conn
	welcome *proto.Welcome
	limits  proto.Limits // welcome's, with the protocol defaults filled in: what this connection allows

	wmu  sync.Mutex // serializes writes on req
	req  *quic.Stream
	pend proto.Pending // requests waiting for their answer; failed when req's reader stops
}

// dial connects to the node at addr, says hello and starts the request stream's reader.
func dial(ctx context.Context, cfg *Config, addr string) (*conn, error) {
	q, err := quic.DialAddr(ctx, addr, cfg.tlsConfig(), &quic.Config{KeepAlivePeriod: cfg.KeepAlive})
	if err != nil {
		return nil, fmt.Errorf("client: connect to %s: %w", addr, err)
	}
	c := &conn{addr: addr, q: q}
	if err := c.hello(ctx, cfg); err != nil {
		q.CloseWithError(0, "")
		return nil, err
	}
	if c.req, err = q.OpenStreamSync(ctx); err != nil {
		q.CloseWithError(0, "")
		return nil, err
	}
	go c.readAnswers()
	return c, nil
}

func (c *conn) hello(ctx context.Context, cfg *Config) error {
	st, err := c.q.OpenStreamSync(ctx)
	if err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		st.SetReadDeadline(dl)
	}
	h := &proto.Hello{Token: cfg.Token, Device: cfg.Device, ClientVersion: "syncd-go/0.1", ProtoVersion: proto.ProtoVersion}
	if err := proto.WriteFrame(st, h); err != nil {
		return err
	}
	f, err := proto.NewReader(st, proto.DefaultMaxFrame).Next()
	var closed *quic.ApplicationError
	if errors.As(err, &closed) { // refused: the close code is the protocol error code
		return &proto.Error{Code: proto.Code(closed.ErrorCode), Message: closed.ErrorMessage}
	}
	if err != nil {
		return fmt.Errorf("client: hello: %w", err)
	}
	switch f := f.(type) {
	case *proto.Welcome:
		c.welcome, c.limits = f, f.Limits.WithDefaults()
		return nil
	case *proto.Error:
		return f
	}
	return fmt.Errorf("client: unexpected answer to hello: %v", f.FrameType())
}

// readAnswers hands every answer read from the request stream to the request waiting for it,
// until the stream fails; then it fails every waiter, now and later.
func (c *conn) readAnswers() {
	r := proto.NewReader(c.req, int(c.limits.MaxFrame))
	for {
		f, err := r.Next()
		if errors.Is(err, proto.ErrUnknownType) || errors.Is(err, proto.ErrMalformed) {
			continue
		}
		if err != nil {
			c.pend.Fail(fmt.Errorf("client: connection lost: %w", err))
			return
		}
		c.pend.Deliver(f) // an *proto.Error is a Response too; id 0 or unknown ids are dropped
	}
}

// dead is closed when the request stream's reader stops: the connection is no longer usable.
func (c *conn) dead() <-chan struct{} { return c.pend.Done() }

// do sends a request and waits for its answer, the connection's end, or ctx. A request whose
// frame would exceed the connection's max_frame is not sent (the server would have to reset the
// stream, and a resend would do the same): do returns an *proto.Error with CodeTooLarge.
func (c *conn) do(ctx context.Context, build func(id uint64) proto.Frame) (proto.Frame, error) {
	id, ch, err := c.pend.Add()
	if err != nil {
		return nil, err
	}
	c.wmu.Lock()
	err = proto.WriteFrameWithin(c.req, build(id), int(c.limits.MaxFrame))
	c.wmu.Unlock()
	if err != nil {
		c.pend.Forget(id)
		if errors.Is(err, proto.ErrFrameTooLarge) {
			return nil, proto.Errorf(proto.CodeTooLarge, "not sent: %v", err)
		}
		return nil, err
	}
	return c.pend.Wait(ctx, id, ch)
}

func (c *conn) close() { c.q.CloseWithError(0, "bye") }

// tlsConfig pins the server certificate's SHA-256 fingerprint when one is configured, else
// verifies the chain normally (production certificates).
func (cfg *Config) tlsConfig() *tls.Config {
	if cfg.TLS != nil {
		t := cfg.TLS.Clone()
		t.NextProtos = []string{proto.ALPN}
		return t
	}
	if cfg.Fingerprint != "" {
		return proto.PinnedTLSConfig(cfg.Fingerprint)
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{proto.ALPN}}
}
