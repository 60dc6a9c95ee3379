package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/syncd-dev/syncd/proto"
)

// conn is one authenticated QUIC connection: the control stream (kept open: closing it would end
// the session) whose answers to Refresh a reader goroutine hands over, one pipelined request
// stream whose answers a reader goroutine hands to the waiting caller by request id, and the
// limits the server announced.
type conn struct {
	addr    string // the node it is connected to
	q       *quic.Conn
	welcome *proto.Welcome
	limits  proto.Limits // welcome's, with the protocol defaults filled in: what this connection allows

	control  *quic.Stream
	cmu      sync.Mutex       // serializes writes on control (Refresh, Report); never held with wmu
	answers  chan proto.Frame // Refreshed and Error frames read from control; capacity 1
	ctlEnded chan struct{}    // closed when control's reader stops

	closedWith atomic.Pointer[proto.Error] // what the server closed the connection with, once req's reader saw it

	wmu  sync.Mutex // serializes writes on req
	req  *quic.Stream
	pend proto.Pending // requests waiting for their answer; failed when req's reader stops
}

// dial connects to the node at addr with the token in hand (a fresh one from TokenSource when it
// is needed), says hello and starts the readers of the control and request streams.
func (cl *Client) dial(ctx context.Context, addr string) (*conn, error) {
	cfg := &cl.cfg
	token, err := cl.tokens.get(ctx, cfg)
	if err != nil {
		return nil, err
	}
	q, err := quic.DialAddr(ctx, addr, cl.tlsConfig(addr), &quic.Config{KeepAlivePeriod: cfg.KeepAlive})
	if err != nil {
		return nil, fmt.Errorf("client: connect to %s: %w", addr, err)
	}
	c := &conn{addr: addr, q: q, answers: make(chan proto.Frame, 1), ctlEnded: make(chan struct{})}
	if err := c.hello(ctx, cfg, token); err != nil {
		q.CloseWithError(0, "")
		cl.tokens.refusedIf(err)
		return nil, err
	}
	cl.tokens.welcomed(token, c.welcome.TokenExpires)
	go c.readControl()
	if c.req, err = q.OpenStreamSync(ctx); err != nil {
		q.CloseWithError(0, "")
		return nil, closeError(err)
	}
	go c.readAnswers()
	return c, nil
}

func (c *conn) hello(ctx context.Context, cfg *Config, token string) error {
	st, err := c.q.OpenStreamSync(ctx)
	if err != nil {
		return closeError(err)
	}
	if dl, ok := ctx.Deadline(); ok {
		st.SetReadDeadline(dl)
	}
	h := &proto.Hello{Token: token, Device: cfg.Device, ClientVersion: "syncd-go/0.1", ProtoVersion: proto.ProtoVersion}
	if err := proto.WriteFrame(st, h); err != nil {
		return closeError(err)
	}
	f, err := proto.NewReader(st, proto.DefaultMaxFrame).Next()
	if err != nil {
		if e := closeError(err); e != err { // refused: the close carries the error (PROTOCOL §2)
			return e
		}
		return fmt.Errorf("client: hello: %w", err)
	}
	st.SetReadDeadline(time.Time{})
	switch f := f.(type) {
	case *proto.Welcome:
		c.welcome, c.limits, c.control = f, f.Limits.WithDefaults(), st
		return nil
	case *proto.Error:
		return f
	}
	return fmt.Errorf("client: unexpected answer to hello: %v", f.FrameType())
}

// closeError returns the *proto.Error a connection close by the server stands for (its code, and
// the retry-after and message of its reason phrase: proto.ErrorFromClose) when err reports one,
// else err.
func closeError(err error) error {
	var closed *quic.ApplicationError
	if errors.As(err, &closed) && closed.Remote && closed.ErrorCode != 0 {
		return proto.ErrorFromClose(uint64(closed.ErrorCode), closed.ErrorMessage)
	}
	return err
}

// readControl hands the server's answers to Refresh to keepToken, until the control stream ends
// (with the connection). Other frames are of no use to the SDK: an Error before a close comes
// again in the close itself, and invalid_argument answers a Report the server refused (never a
// Refresh, PROTOCOL §6), which the SDK does not resend, so it must not pass for a refused Refresh.
func (c *conn) readControl() {
	defer close(c.ctlEnded)
	r := proto.NewReader(c.control, int(c.limits.MaxFrame))
	for {
		f, err := r.Next()
		if errors.Is(err, proto.ErrUnknownType) || errors.Is(err, proto.ErrMalformed) {
			continue
		}
		if err != nil {
			return
		}
		if e, ok := f.(*proto.Error); ok && e.Code == proto.CodeInvalidArgument {
			continue
		}
		select {
		case c.answers <- f:
		default: // nobody asked (an Error before a close): drop it
		}
	}
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
			if pe, ok := closeError(err).(*proto.Error); ok {
				// Not wrapped: a lost connection is no answer to the requests in flight (an
				// outbox item must not fail with token_expired), but serve reports it.
				c.closedWith.Store(pe)
				c.pend.Fail(fmt.Errorf("client: connection lost: %v", pe))
				return
			}
			c.pend.Fail(fmt.Errorf("client: connection lost: %w", err))
			return
		}
		c.pend.Deliver(f) // an *proto.Error is a Response too; id 0 or unknown ids are dropped
	}
}

// writeControl writes f on the control stream, within timeout: Refresh and Report share it.
func (c *conn) writeControl(f proto.Frame, timeout time.Duration) error {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	c.control.SetWriteDeadline(time.Now().Add(timeout))
	return proto.WriteFrameWithin(c.control, f, int(c.limits.MaxFrame))
}

// report sends r on the control stream (PROTOCOL §6, Report), to a server of revision 4 or later
// (an earlier one would answer unknown_frame): no answer comes to an accepted one, and the
// server drops reports beyond a few a minute, so the caller sends one per incident.
func (c *conn) report(r *proto.Report, timeout time.Duration) error {
	if c.welcome.ProtoVersion < digestRevision {
		return nil
	}
	return c.writeControl(r, timeout)
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

// resumed reports whether the connection's TLS handshake resumed an earlier session.
func (c *conn) resumed() bool { return c.q.ConnectionState().TLS.DidResume }

// tlsConfig returns the TLS configuration of a connection to the node at addr: it pins the server
// certificate's SHA-256 fingerprint when one is configured, else verifies the chain normally
// (production certificates), or is Config.TLS. Its session cache is the Client's, so a reconnect
// to a node resumes the last session with it (PROTOCOL §2 allows it: a shorter handshake, without
// the certificate; no 0-RTT data is sent) — unless Config.TLS brings a cache of its own, which is
// kept.
//
// A resumed handshake skips VerifyPeerCertificate, where the pin is checked; that is safe because
// the cache is this Client's alone and every ticket in it came from a handshake that passed this
// same pin (proto.PinnedTLSConfig).
func (cl *Client) tlsConfig(addr string) *tls.Config {
	cfg := &cl.cfg
	var t *tls.Config
	switch {
	case cfg.TLS != nil:
		t = cfg.TLS.Clone()
		t.NextProtos = []string{proto.ALPN}
	case cfg.Fingerprint != "":
		t = proto.PinnedTLSConfig(cfg.Fingerprint)
	default:
		t = &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{proto.ALPN}}
	}
	if t.ClientSessionCache == nil {
		t.ClientSessionCache = nodeSessions{addr: addr, cache: cl.sessions}
	}
	return t
}

// nodeSessions is the Client's TLS session cache as seen by a connection to the node at addr:
// crypto/tls keys sessions by server name, which quic-go sets to the IP address when dialing one,
// so the nodes of a cluster on one host (different ports) would take each other's tickets, which
// only the node that issued one can use. Prefixing the key with the address keeps one session
// per node.
type nodeSessions struct {
	addr  string
	cache tls.ClientSessionCache
}

// Get implements tls.ClientSessionCache.
func (n nodeSessions) Get(key string) (*tls.ClientSessionState, bool) {
	return n.cache.Get(n.addr + "|" + key)
}

// Put implements tls.ClientSessionCache.
func (n nodeSessions) Put(key string, cs *tls.ClientSessionState) {
	n.cache.Put(n.addr+"|"+key, cs)
}
