package client

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
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

	wmu    sync.Mutex // serializes writes on req
	req    *quic.Stream
	mu     sync.Mutex
	nextID uint64
	wait   map[uint64]chan proto.Frame
	dead   chan struct{} // closed when the request stream's reader stops
	err    error         // why; set before dead is closed
}

// dial connects to the node at addr, says hello and starts the request stream's reader.
func dial(ctx context.Context, cfg *Config, addr string) (*conn, error) {
	q, err := quic.DialAddr(ctx, addr, cfg.tlsConfig(), &quic.Config{KeepAlivePeriod: cfg.KeepAlive})
	if err != nil {
		return nil, fmt.Errorf("client: connect to %s: %w", addr, err)
	}
	c := &conn{addr: addr, q: q, wait: map[uint64]chan proto.Frame{}, dead: make(chan struct{})}
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
		c.welcome = f
		return nil
	case *proto.Error:
		return f
	}
	return fmt.Errorf("client: unexpected answer to hello: %v", f.FrameType())
}

func (c *conn) readAnswers() {
	r := proto.NewReader(c.req, proto.DefaultMaxFrame)
	var err error
	for {
		var f proto.Frame
		f, err = r.Next()
		if errors.Is(err, proto.ErrUnknownType) || errors.Is(err, proto.ErrMalformed) {
			continue
		}
		if err != nil {
			break
		}
		var id uint64                           // 0 for a frame that answers no request: nobody waits for it
		if resp, ok := f.(proto.Response); ok { // an Error is a Response too
			id = resp.RequestID()
		}
		c.mu.Lock()
		ch := c.wait[id]
		delete(c.wait, id)
		c.mu.Unlock()
		if ch != nil {
			ch <- f
		}
	}
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
	close(c.dead)
}

// do sends a request and waits for its answer, the connection's end, or ctx.
func (c *conn) do(ctx context.Context, build func(id uint64) proto.Frame) (proto.Frame, error) {
	ch := make(chan proto.Frame, 1)
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	c.wait[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.wait, id)
		c.mu.Unlock()
	}()
	c.wmu.Lock()
	err := proto.WriteFrame(c.req, build(id))
	c.wmu.Unlock()
	if err != nil {
		return nil, err
	}
	select {
	case f := <-ch:
		return f, nil
	case <-c.dead:
		return nil, fmt.Errorf("client: connection lost: %w", c.err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
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
	t := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{proto.ALPN}}
	if cfg.Fingerprint != "" {
		want := strings.ToLower(strings.ReplaceAll(cfg.Fingerprint, ":", ""))
		t.InsecureSkipVerify = true // replaced by the pin below
		t.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return errors.New("client: server sent no certificate")
			}
			sum := sha256.Sum256(raw[0])
			if hex.EncodeToString(sum[:]) != want {
				return errors.New("client: server certificate does not match the pinned fingerprint")
			}
			return nil
		}
	}
	return t
}
