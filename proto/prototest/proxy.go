package prototest

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/quic-go/quic-go"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/test/testkit"
)

// Proxy is a protocol-aware relay for fault injection in client tests: it terminates each
// client's QUIC connection (with a certificate of its own, pinned by Fingerprint) and opens one
// of its own to a real server, relays every stream the client opens, and passes each frame the
// server sends through a rewrite function — so a test can make a real server look broken (a
// Welcome announcing a smaller max_frame than the server uses, a corrupted batch) where QUIC's
// encryption leaves a packet-level relay (testkit.UDPRelay) only loss and delay. Client frames go
// through unchanged, byte for byte. Frames of a type proto does not know are dropped.
//
// A connection the server closes is closed towards the client with the same code and reason.
// Safe for concurrent use; closed when the test ends.
type Proxy struct {
	ln          *quic.Listener
	fingerprint string
	target      string
	targetFP    string
	rewrite     func(proto.Frame) proto.Frame

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	accepts atomic.Int64
}

// NewProxy starts a proxy on a free loopback port to the server at addr, whose certificate has
// fingerprint. rewrite, if not nil, gets every frame the server sends and returns the frame the
// client gets instead (f itself to pass it on, nil to drop it); it may be called from several
// goroutines at once.
func NewProxy(t testing.TB, addr, fingerprint string, rewrite func(f proto.Frame) proto.Frame) *Proxy {
	t.Helper()
	cert, err := testkit.SelfSignedCert()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := quic.ListenAddr("127.0.0.1:0", &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{proto.ALPN},
		Certificates: []tls.Certificate{cert}}, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if rewrite == nil {
		rewrite = func(f proto.Frame) proto.Frame { return f }
	}
	p := &Proxy{ln: ln, fingerprint: proto.Fingerprint(cert.Certificate[0]), target: addr, targetFP: fingerprint, rewrite: rewrite}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Go(p.acceptLoop)
	t.Cleanup(p.Close)
	return p
}

// Addr returns the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Fingerprint returns the fingerprint of the proxy's certificate, for clients to pin.
func (p *Proxy) Fingerprint() string { return p.fingerprint }

// Accepted returns how many client connections the proxy has accepted so far.
func (p *Proxy) Accepted() int { return int(p.accepts.Load()) }

// Close closes every connection and the listener, and waits for the proxy's goroutines.
func (p *Proxy) Close() {
	p.cancel()
	p.ln.Close()
	p.wg.Wait()
}

func (p *Proxy) acceptLoop() {
	for {
		down, err := p.ln.Accept(p.ctx)
		if err != nil {
			return
		}
		p.accepts.Add(1)
		p.wg.Go(func() { p.serve(down) })
	}
}

// serve relays one client connection until either side closes it or the proxy closes.
func (p *Proxy) serve(down *quic.Conn) {
	up, err := quic.DialAddr(p.ctx, p.target, proto.PinnedTLSConfig(p.targetFP), &quic.Config{})
	if err != nil {
		down.CloseWithError(quic.ApplicationErrorCode(proto.CodeUnavailable), "proxy: "+err.Error())
		return
	}
	ctx, cancel := context.WithCancel(p.ctx)
	defer cancel()
	var streams sync.WaitGroup
	defer streams.Wait()
	defer up.CloseWithError(0, "proxy: client gone")
	defer down.CloseWithError(0, "proxy: closing")
	streams.Go(func() { // a connection the server closes is closed towards the client alike
		select {
		case <-up.Context().Done():
			var ae *quic.ApplicationError
			if errors.As(context.Cause(up.Context()), &ae) && ae.Remote {
				down.CloseWithError(ae.ErrorCode, ae.ErrorMessage)
			}
			cancel()
		case <-ctx.Done():
		}
	})
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
		streams.Go(func() { // client → server, unchanged
			if _, err := io.Copy(us, ds); err != nil {
				us.CancelWrite(0)
				return
			}
			us.Close()
		})
		streams.Go(func() { p.relayFrames(ds, us) })
	}
}

// relayFrames copies the server's frames from us to the client's stream ds through rewrite.
func (p *Proxy) relayFrames(ds, us *quic.Stream) {
	r := proto.NewReader(us, proto.MaxFrameLimit)
	for {
		f, err := r.Next()
		if errors.Is(err, proto.ErrUnknownType) || errors.Is(err, proto.ErrMalformed) {
			continue
		}
		if errors.Is(err, io.EOF) {
			ds.Close()
			return
		}
		if err != nil {
			ds.CancelWrite(0)
			us.CancelRead(0)
			return
		}
		if f = p.rewrite(f); f == nil {
			continue
		}
		if err := proto.WriteFrame(ds, f); err != nil {
			us.CancelRead(0)
			return
		}
	}
}
