package test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	quicgo "github.com/quic-go/quic-go"
	"github.com/quic-go/webtransport-go"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/ident"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/auth"
	"github.com/syncd-dev/syncd/syncd/transport"
	"github.com/syncd-dev/syncd/test/testkit"
)

// The browser transports (PROTOCOL §2.3, §2.4) driven from Go through the real libraries a
// browser's peer would meet: webtransport-go's client and a WebSocket, against a real server.
// The TypeScript SDK's tests do the same from real browsers (client/js).

// webStream is what the test needs of a stream, on either transport.
type webStream interface {
	io.ReadWriteCloser
	SetReadDeadline(time.Time) error
}

// webSession is a protocol session over a browser transport, driven frame by frame.
type webSession struct {
	t       *testing.T
	open    func() (webStream, error)
	welcome *proto.Welcome
	req     webStream
	reqR    *proto.Reader
	sync    webStream
	syncR   *proto.Reader
	next    uint64
}

// hello opens the control stream and says Hello; it returns the answer, or nil if the
// connection closed first (an Error before a close is best effort, PROTOCOL §2).
func (s *webSession) hello(token, device string) proto.Frame {
	s.t.Helper()
	ctl, err := s.open()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := proto.WriteFrame(ctl, &proto.Hello{ProtoVersion: proto.ProtoVersion, Token: token, Device: device}); err != nil {
		s.t.Fatal(err)
	}
	ctl.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := proto.NewReader(ctl, proto.DefaultMaxFrame).Next()
	if errors.Is(err, transport.ErrConnClosed) || errors.As(err, new(*webtransport.SessionError)) {
		return nil
	}
	if err != nil {
		s.t.Fatalf("hello: %v", err)
	}
	if w, ok := f.(*proto.Welcome); ok {
		s.welcome = w
	}
	return f
}

// do sends a request on the session's request stream and returns its answer.
func (s *webSession) do(f proto.Frame) proto.Frame {
	s.t.Helper()
	if s.req == nil {
		var err error
		if s.req, err = s.open(); err != nil {
			s.t.Fatal(err)
		}
		s.reqR = proto.NewReader(s.req, proto.DefaultMaxFrame)
	}
	if err := proto.WriteFrame(s.req, f); err != nil {
		s.t.Fatal(err)
	}
	s.req.SetReadDeadline(time.Now().Add(10 * time.Second))
	ans, err := s.reqR.Next()
	if err != nil {
		s.t.Fatalf("answer to %v: %v", f.FrameType(), err)
	}
	return ans
}

func (s *webSession) send(conv, to, body string) *proto.Ack {
	s.t.Helper()
	s.next++
	ans := s.do(&proto.Send{ID: s.next, ClientMsgID: fmt.Sprintf("web-%d-%d", time.Now().UnixNano(), s.next), Conv: conv, Peer: to, Body: []byte(body)})
	a, ok := ans.(*proto.Ack)
	if !ok {
		s.t.Fatalf("send: got %#v, want an ack", ans)
	}
	return a
}

// syncFrom opens the sync stream from (0, 0) and returns the entries until it has n.
func (s *webSession) entries(n int) []proto.Entry {
	s.t.Helper()
	if s.sync == nil {
		var err error
		if s.sync, err = s.open(); err != nil {
			s.t.Fatal(err)
		}
		s.syncR = proto.NewReader(s.sync, proto.DefaultMaxFrame)
		if err := proto.WriteFrame(s.sync, &proto.SyncStart{}); err != nil {
			s.t.Fatal(err)
		}
	}
	var out []proto.Entry
	for len(out) < n {
		s.sync.SetReadDeadline(time.Now().Add(10 * time.Second))
		f, err := s.syncR.Next()
		if err != nil {
			s.t.Fatalf("sync: %v (have %d of %d entries)", err, len(out), n)
		}
		if b, ok := f.(*proto.Batch); ok {
			for _, e := range b.Entries {
				if want := proto.Position(len(out) + 1); e.Seq != want {
					s.t.Fatalf("sync: entry at %d, want %d (G3)", e.Seq, want)
				}
				out = append(out, e)
			}
		}
	}
	return out
}

// dialWebTransport opens a WebTransport session to srv as a page of origin would, pinning the
// node's published browser certificates.
func dialWebTransport(t *testing.T, srv *syncd.Server, origin string) (*http.Response, *webtransport.Session, error) {
	t.Helper()
	wt, _ := srv.WebAddrs()
	pins := map[string]bool{}
	for _, c := range srv.BrowserCerts() {
		pins[c.SHA256] = true
	}
	d := &webtransport.Transport{
		TLSClientConfig: &tls.Config{NextProtos: []string{"h3"}, InsecureSkipVerify: true, // the pin below is the check, as serverCertificateHashes
			VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
				if !pins[proto.Fingerprint(raw[0])] {
					return errors.New("certificate not pinned")
				}
				return nil
			}},
		QUICConfig: &quicgo.Config{EnableDatagrams: true, EnableStreamResetPartialDelivery: true},
	}
	t.Cleanup(func() { d.Close() })
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rsp, sess, err := d.Dial(ctx, "https://"+wt+transport.Path, h)
	if sess != nil {
		t.Cleanup(func() { sess.CloseWithError(0, "") })
	}
	return rsp, sess, err
}

func wtSession(t *testing.T, sess *webtransport.Session) *webSession {
	return &webSession{t: t, open: func() (webStream, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return sess.OpenStreamSync(ctx)
	}}
}

func dialWebSocket(t *testing.T, srv *syncd.Server, origin string) (*transport.WSClient, error) {
	t.Helper()
	_, ws := srv.WebAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := transport.DialWebSocket(ctx, "ws://"+ws+transport.Path, origin, nil)
	if c != nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func wsSession(t *testing.T, c *transport.WSClient) *webSession {
	return &webSession{t: t, open: func() (webStream, error) { return c.OpenStream() }}
}

// TestBrowserTransportsCarryTheProtocol: a device over WebTransport and one over WebSocket
// exchange messages with a Go SDK device over syncd/1, each in order and once; pages of a
// foreign origin are refused; sessions are counted by transport.
func TestBrowserTransportsCarryTheProtocol(t *testing.T) {
	srv := startServer(t)
	const page = "http://localhost:8080"
	mint := func(u, d string) string {
		tok, err := srv.MintToken(u, d, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	_, sess, err := dialWebTransport(t, srv, page)
	if err != nil {
		t.Fatalf("webtransport: %v", err)
	}
	alice := wtSession(t, sess)
	if f := alice.hello(mint("alice", "browser"), "browser"); alice.welcome == nil {
		t.Fatalf("webtransport hello: %#v", f)
	}
	wsc, err := dialWebSocket(t, srv, page)
	if err != nil {
		t.Fatalf("websocket: %v", err)
	}
	carol := wsSession(t, wsc)
	if f := carol.hello(mint("carol", "browser"), "browser"); carol.welcome == nil {
		t.Fatalf("websocket hello: %#v", f)
	}
	bob := dialDevice(t, srv, "bob", "phone", t.TempDir())
	t.Cleanup(func() { bob.Close() })

	ab, cb := ident.DirectConv("alice", "bob"), ident.DirectConv("carol", "bob")
	alice.send(ab, "bob", "hi bob, from a browser (webtransport)")
	carol.send(cb, "bob", "hi bob, from a browser (websocket)")
	waitBodies(t, ab, []string{"hi bob, from a browser (webtransport)"}, bob)
	waitBodies(t, cb, []string{"hi bob, from a browser (websocket)"}, bob)
	if _, err := bob.Send(ab, "alice", []byte("hi alice")); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Send(cb, "carol", []byte("hi carol")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		who  string
		s    *webSession
		want []string
	}{{"alice", alice, []string{"hi bob, from a browser (webtransport)", "hi alice"}},
		{"carol", carol, []string{"hi bob, from a browser (websocket)", "hi carol"}}} {
		var got []string
		for _, e := range c.s.entries(2) {
			got = append(got, string(e.Body))
		}
		if strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("%s's log: %q, want %q", c.who, got, c.want)
		}
	}

	// A page of another site is refused before any session exists, on both transports.
	if rsp, _, err := dialWebTransport(t, srv, "https://evil.example"); err == nil || rsp == nil || rsp.StatusCode != http.StatusForbidden {
		t.Errorf("webtransport from a foreign origin: %v (%v), want 403", err, rsp)
	}
	var status *transport.HTTPStatusError
	if _, err := dialWebSocket(t, srv, "https://evil.example"); !errors.As(err, &status) || status.Status != http.StatusForbidden {
		t.Errorf("websocket from a foreign origin: %v, want 403", err)
	}
	_, metrics := testkit.HTTP(t, http.MethodGet, "http://"+srv.AdminAddr().String()+"/metrics")
	for _, m := range []string{`syncd_sessions_total{transport="webtransport"} 1`, `syncd_sessions_total{transport="websocket"} 1`,
		`syncd_web_refused_total{reason="origin"} 2`} {
		if !strings.Contains(metrics, m) {
			t.Errorf("metrics lack %s", m)
		}
	}
}

// TestBrowserTransportsCloseWithTheError: a refused Hello closes the session with the error's
// code and the reason phrase of PROTOCOL §2 — as a WebTransport session close, and as a WebSocket
// close status 4000 + code.
func TestBrowserTransportsCloseWithTheError(t *testing.T) {
	srv := startServer(t)
	_, sess, err := dialWebTransport(t, srv, "")
	if err != nil {
		t.Fatal(err)
	}
	wtSession(t, sess).hello("v1.bogus.token", "browser")
	select {
	case <-sess.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the session is still open after a refused hello")
	}
	var se *webtransport.SessionError
	_, err = sess.AcceptStream(context.Background()) // fails with the session's close
	if !errors.As(err, &se) || se.ErrorCode != webtransport.SessionErrorCode(proto.CodeUnauthenticated) {
		t.Errorf("webtransport session closed with %v, want code %d", err, proto.CodeUnauthenticated)
	}

	wsc, err := dialWebSocket(t, srv, "")
	if err != nil {
		t.Fatal(err)
	}
	wsSession(t, wsc).hello("v1.bogus.token", "browser")
	select {
	case <-wsc.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the websocket is still open after a refused hello")
	}
	code, reason, ok := wsc.CloseError()
	if !ok || code != uint64(proto.CodeUnauthenticated) || reason == "" {
		t.Errorf("websocket closed with code %d %q (%v), want %d and a reason", code, reason, ok, proto.CodeUnauthenticated)
	}
}

// TestWebSocketStreamLimit: over WebSocket, where nothing below the protocol limits the streams,
// a stream beyond max_streams is answered too_many_streams and ended, and the others go on.
func TestWebSocketStreamLimit(t *testing.T) {
	srv := startServerWith(t, func(c *syncd.Config) { c.MaxStreamsPerConn = 3 })
	wsc, err := dialWebSocket(t, srv, "")
	if err != nil {
		t.Fatal(err)
	}
	s := wsSession(t, wsc)
	tok, _ := srv.MintToken("dave", "browser", time.Hour)
	if s.hello(tok, "browser"); s.welcome == nil || s.welcome.Limits.MaxStreams != 3 {
		t.Fatalf("welcome %+v, want max_streams 3", s.welcome)
	}
	s.send(ident.DirectConv("dave", "erin"), "erin", "one") // stream 2
	third, _ := wsc.OpenStream()
	proto.WriteFrame(third, &proto.HeadCheck{ID: 1})
	fourth, _ := wsc.OpenStream()
	proto.WriteFrame(fourth, &proto.HeadCheck{ID: 1})
	fourth.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := proto.NewReader(fourth, proto.DefaultMaxFrame).Next()
	if e, ok := f.(*proto.Error); err != nil || !ok || e.Code != proto.CodeTooManyStreams {
		t.Fatalf("the stream beyond max_streams: %#v %v, want too_many_streams", f, err)
	}
	if _, err := io.ReadAll(fourth); err != nil {
		t.Errorf("the refused stream did not end cleanly: %v", err)
	}
	third.SetReadDeadline(time.Now().Add(10 * time.Second))
	if f, err := proto.NewReader(third, proto.DefaultMaxFrame).Next(); err != nil {
		t.Errorf("the third stream: %v", err)
	} else if _, ok := f.(*proto.Head); !ok {
		t.Errorf("the third stream answered %#v, want head", f)
	}
	s.send(ident.DirectConv("dave", "erin"), "erin", "two")
}

// TestBrowserCertificates: a node on its self-signed default publishes the short-lived
// certificates pages pin (GET /v1/webtransport/certs, admin token) and serves the first of them;
// a node with a certificate of its own (cert_file) serves that one to browsers and publishes none.
func TestBrowserCertificates(t *testing.T) {
	srv := startServer(t)
	url := "http://" + srv.AdminAddr().String() + "/v1/webtransport/certs"
	if code, _ := testkit.HTTP(t, http.MethodGet, url); code != http.StatusUnauthorized {
		t.Errorf("the certificates without the admin token: HTTP %d, want 401", code)
	}
	got, code := testkit.GetJSON[adminapi.BrowserCerts](t, url, testkit.Bearer(srv.AdminToken()))
	if code != http.StatusOK || len(got.Certs) != 1 || got.Certs[0].SHA256 != srv.BrowserCerts()[0].SHA256 {
		t.Fatalf("GET certs: HTTP %d %+v, want the node's one certificate", code, got)
	}
	if v := got.Certs[0].NotAfter.Sub(got.Certs[0].NotBefore); v > 14*24*time.Hour {
		t.Errorf("a browser certificate valid %v: browsers pin none valid over 14 days", v)
	}
	if _, _, err := dialWebTransport(t, srv, ""); err != nil {
		t.Errorf("pinning the published hash: %v", err)
	}

	// A certificate of the operator's: served to browsers, nothing published to pin.
	dir := t.TempDir()
	_, fp, err := auth.SelfSignedCert(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	own := startServerWith(t, func(c *syncd.Config) {
		c.CertFile, c.KeyFile = filepath.Join(dir, auth.TLSCertFile), filepath.Join(dir, auth.TLSKeyFile)
	})
	if certs := own.BrowserCerts(); len(certs) != 0 {
		t.Errorf("a node with cert_file publishes browser certificates %+v", certs)
	}
	wt, _ := own.WebAddrs()
	d := &webtransport.Transport{
		TLSClientConfig: &tls.Config{NextProtos: []string{"h3"}, InsecureSkipVerify: true,
			VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
				if proto.Fingerprint(raw[0]) != fp {
					return errors.New("not the operator's certificate")
				}
				return nil
			}},
		QUICConfig: &quicgo.Config{EnableDatagrams: true, EnableStreamResetPartialDelivery: true},
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, sess, err := d.Dial(ctx, "https://"+wt+transport.Path, nil); err != nil {
		t.Errorf("webtransport with cert_file: %v", err)
	} else {
		sess.CloseWithError(0, "")
	}
}
