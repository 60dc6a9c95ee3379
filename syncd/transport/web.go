package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"

	"github.com/syncd-dev/syncd/proto"
)

// Path is where browsers open the protocol: the URL path of both WebTransport and WebSocket
// (PROTOCOL §2.3, §2.4). The version is in the path because Firefox ignores WebTransport's
// protocols option.
const Path = "/syncd/1"

// maxSessionsPerConn caps the WebTransport sessions one HTTP/3 connection may carry: each is a
// protocol connection, and QUIC's stream limit must be sized for all of them.
const maxSessionsPerConn = 4

// WebConfig configures the listener for browsers.
type WebConfig struct {
	// Addr is the host:port of both WebTransport (UDP) and WebSocket (TCP).
	Addr string
	// WebTransportTLS is the TLS configuration of HTTP/3 (its certificate must be one browsers
	// accept: CA-issued, or pinned and short-lived); nil turns WebTransport off.
	WebTransportTLS *tls.Config
	// WebSocket turns the WebSocket listener on; WebSocketTLS is its TLS configuration, nil for
	// plain ws:// (the caller allows that only on a loopback address).
	WebSocket    bool
	WebSocketTLS *tls.Config
	// Origins is the allow-list of page origins.
	Origins *Origins
	// MaxStreams caps the streams open at once on one connection (max_streams).
	MaxStreams int
	// VerifySourceAddress, when it returns true, makes a new QUIC connection prove its address
	// first (a Retry), as on the syncd/1 listener under load.
	VerifySourceAddress func() bool
	// Refused is told why a browser's request was refused ("origin", "path", "sessions",
	// "upgrade"), for metrics. May be nil.
	Refused func(reason string)
	Logger  *slog.Logger
}

// WebListener serves browsers: WebTransport over HTTP/3 on a UDP socket and WebSocket on a TCP
// one, both at WebConfig.Addr, handing each session to Accept as a Conn.
type WebListener struct {
	cfg    WebConfig
	conns  chan Conn
	ctx    context.Context // ends with Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // handlers and QUIC connections

	udp  net.PacketConn
	qt   *quic.Transport
	qln  *quic.Listener
	wt   *webtransport.Server
	tcp  net.Listener
	http *http.Server

	mu       sync.Mutex
	sessions map[*quic.Conn]int // WebTransport sessions per HTTP/3 connection
}

type quicConnKey struct{}

// ListenWeb binds the listeners cfg turns on and serves them until Close.
func ListenWeb(cfg WebConfig) (*WebListener, error) {
	l := &WebListener{cfg: cfg, conns: make(chan Conn), sessions: map[*quic.Conn]int{}}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	if cfg.WebTransportTLS != nil {
		if err := l.listenWebTransport(); err != nil {
			l.Close()
			return nil, fmt.Errorf("webtransport on udp %s: %w", cfg.Addr, err)
		}
	}
	if cfg.WebSocket {
		if err := l.listenWebSocket(); err != nil {
			l.Close()
			return nil, fmt.Errorf("websocket on tcp %s: %w", cfg.Addr, err)
		}
	}
	return l, nil
}

func (l *WebListener) listenWebTransport() error {
	addr, err := net.ResolveUDPAddr("udp", l.cfg.Addr)
	if err != nil {
		return err
	}
	udp, err := net.ListenUDP("udp", addr)
	if err != nil {
		return err
	}
	l.udp = udp
	l.qt = &quic.Transport{Conn: udp, VerifySourceAddress: func(net.Addr) bool {
		return l.cfg.VerifySourceAddress != nil && l.cfg.VerifySourceAddress()
	}}
	l.wt = &webtransport.Server{
		H3: &http3.Server{Handler: http.HandlerFunc(l.serveWebTransport), Logger: l.cfg.Logger,
			ConnContext: func(ctx context.Context, c *quic.Conn) context.Context {
				return context.WithValue(ctx, quicConnKey{}, c)
			}},
		// The advertised limits (WT_INITIAL_MAX_STREAMS_BIDI, _UNI and WT_INITIAL_MAX_DATA):
		// browsers that speak WebTransport flow control keep within them, and Safari opens no
		// stream without data credit. AcceptStream enforces the stream limit for the others.
		Config:      &webtransport.Config{MaxIncomingStreams: int64(l.cfg.MaxStreams), MaxIncomingUniStreams: -1, MaxIncomingData: 16 << 20},
		CheckOrigin: func(*http.Request) bool { return true }, // checked before Upgrade, against the allow-list
	}
	l.qln, err = l.qt.Listen(http3.ConfigureTLSConfig(l.cfg.WebTransportTLS), &quic.Config{
		MaxIdleTimeout: 30 * time.Second, KeepAlivePeriod: 10 * time.Second,
		EnableDatagrams: true, EnableStreamResetPartialDelivery: true, // WebTransport requires both
		// Every session's streams, plus its CONNECT stream; HTTP/3's own unidirectional streams
		// (control, QPACK) and a margin: WebTransport's are refused.
		MaxIncomingStreams:    int64(maxSessionsPerConn * (l.cfg.MaxStreams + 1)),
		MaxIncomingUniStreams: 16,
	})
	if err != nil {
		return err
	}
	l.wg.Go(func() {
		for {
			conn, err := l.qln.Accept(l.ctx)
			if err != nil {
				return
			}
			l.wg.Go(func() { l.wt.ServeQUICConn(conn) })
		}
	})
	return nil
}

func (l *WebListener) listenWebSocket() error {
	tcp, err := net.Listen("tcp", l.cfg.Addr)
	if err != nil {
		return err
	}
	if l.cfg.WebSocketTLS != nil {
		tcp = tls.NewListener(tcp, l.cfg.WebSocketTLS)
	}
	l.tcp = tcp
	l.http = &http.Server{Handler: http.HandlerFunc(l.serveWebSocket), ReadHeaderTimeout: 5 * time.Second,
		MaxHeaderBytes: 16 << 10, ErrorLog: slog.NewLogLogger(l.cfg.Logger.Handler(), slog.LevelDebug)}
	l.wg.Go(func() { l.http.Serve(tcp) })
	return nil
}

// UDPAddr and TCPAddr are the bound addresses of WebTransport and WebSocket (nil when off).
func (l *WebListener) UDPAddr() net.Addr {
	if l.udp == nil {
		return nil
	}
	return l.udp.LocalAddr()
}

// TCPAddr: see UDPAddr.
func (l *WebListener) TCPAddr() net.Addr {
	if l.tcp == nil {
		return nil
	}
	return l.tcp.Addr()
}

// Accept returns the next browser session.
func (l *WebListener) Accept(ctx context.Context) (Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.ctx.Done():
		return nil, net.ErrClosed
	}
}

// Close stops both listeners and closes their connections, then waits for their goroutines.
// Sessions handed to Accept are the server's to end first (a graceful close of each).
func (l *WebListener) Close() error {
	l.cancel()
	if l.wt != nil {
		l.wt.Close()
	}
	if l.qln != nil {
		l.qln.Close()
	}
	if l.qt != nil {
		l.qt.Close()
	}
	if l.udp != nil {
		l.udp.Close()
	}
	if l.http != nil {
		l.http.Close()
	}
	l.wg.Wait()
	return nil
}

// handoff gives c to Accept; false if the listener closed first.
func (l *WebListener) handoff(c Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.ctx.Done():
		return false
	}
}

func (l *WebListener) refused(reason string, w http.ResponseWriter, r *http.Request, status int) {
	if l.cfg.Refused != nil {
		l.cfg.Refused(reason)
	}
	l.cfg.Logger.Debug("browser request refused", "reason", reason, "remote", r.RemoteAddr,
		"origin", r.Header.Get("Origin"), "path", r.URL.Path)
	http.Error(w, http.StatusText(status), status)
}

// serveWebTransport answers an HTTP/3 request: a WebTransport CONNECT to Path from an allowed
// origin becomes a session, served until it ends; anything else is refused.
func (l *WebListener) serveWebTransport(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path || r.Method != http.MethodConnect {
		l.refused("path", w, r, http.StatusNotFound)
		return
	}
	if !l.cfg.Origins.Allow(r.Header.Get("Origin")) {
		l.refused("origin", w, r, http.StatusForbidden)
		return
	}
	qc, _ := r.Context().Value(quicConnKey{}).(*quic.Conn)
	if !l.enterSession(qc) {
		l.refused("sessions", w, r, http.StatusTooManyRequests)
		return
	}
	defer l.leaveSession(qc)
	sess, err := l.wt.Upgrade(w, r)
	if err != nil {
		l.refused("upgrade", w, r, http.StatusBadRequest)
		return
	}
	l.wg.Add(1) // the session's end is waited for even if the handler's return is not
	defer l.wg.Done()
	if !l.handoff(newWTConn(sess, l.cfg.MaxStreams)) {
		sess.CloseWithError(0, "server shutting down")
		return
	}
	// The protocol has no unidirectional stream; a browser that ignores the advertised limit
	// gets each one stopped (PROTOCOL §2.3).
	for {
		u, err := sess.AcceptUniStream(sess.Context())
		if err != nil {
			return
		}
		u.CancelRead(webtransport.StreamErrorCode(proto.CodeUnexpectedFrame))
	}
}

func (l *WebListener) enterSession(qc *quic.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sessions[qc] >= maxSessionsPerConn {
		return false
	}
	l.sessions[qc]++
	return true
}

func (l *WebListener) leaveSession(qc *quic.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sessions[qc]--; l.sessions[qc] <= 0 {
		delete(l.sessions, qc)
	}
}

// serveWebSocket answers an HTTP request on the TCP port: a WebSocket upgrade to Path from an
// allowed origin becomes a session, served until it ends.
func (l *WebListener) serveWebSocket(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path {
		l.refused("path", w, r, http.StatusNotFound)
		return
	}
	if !l.cfg.Origins.Allow(r.Header.Get("Origin")) {
		l.refused("origin", w, r, http.StatusForbidden)
		return
	}
	// Origin is checked above, against the allow-list; compression would let a client make the
	// server inflate small messages into large ones.
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true, CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		if l.cfg.Refused != nil {
			l.cfg.Refused("upgrade")
		}
		return // Accept answered the request
	}
	c := newWSConn(ws, remoteAddr(r), l.cfg.MaxStreams, refuseStream)
	if !l.handoff(c) {
		ws.Close(websocket.StatusGoingAway, "server shutting down")
		return
	}
	c.serve()
}

// remoteAddr is the client's address of an HTTP request.
func remoteAddr(r *http.Request) net.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return &net.TCPAddr{}
	}
	return net.TCPAddrFromAddrPort(ap)
}

// refuseStream answers a stream beyond max_streams as PROTOCOL §2.3 and §2.4 say: an Error
// too_many_streams, the server's side ended, STOP with that code.
func refuseStream(st Stream) {
	e := &proto.Error{Code: proto.CodeTooManyStreams, Message: "more streams open than max_streams allows: close one first"}
	var b bytes.Buffer
	proto.WriteFrame(&b, e)
	st.SetWriteDeadline(time.Now().Add(wsControlTimeout))
	st.Write(b.Bytes())
	st.Close()
	st.CancelRead(uint64(e.Code))
}

// wtConn is a WebTransport session.
type wtConn struct {
	s          *webtransport.Session
	maxStreams int

	mu   sync.Mutex
	open int // streams accepted and not yet ended both ways
}

func newWTConn(s *webtransport.Session, maxStreams int) *wtConn {
	return &wtConn{s: s, maxStreams: maxStreams}
}

func (c *wtConn) AcceptStream(ctx context.Context) (Stream, error) {
	for {
		st, err := c.s.AcceptStream(ctx)
		if err != nil {
			return nil, wtError(err)
		}
		ws := &wtStream{Stream: st, c: c}
		c.mu.Lock()
		full := c.open >= c.maxStreams
		if !full {
			c.open++
		}
		c.mu.Unlock()
		if !full {
			return ws, nil
		}
		ws.released = true // never counted
		refuseStream(ws)
	}
}

func (c *wtConn) CloseWithError(code uint64, reason string) {
	// Closing a session resets its streams at once, discarding what they have not sent — the
	// Error frame written just before a close (PROTOCOL §2) included — and Chromium and Firefox
	// report such a close as a lost connection, without its code and reason. So the frame is
	// all a page can learn of why (and when to retry): give it a moment to leave first.
	select {
	case <-c.s.Context().Done():
	case <-time.After(wtCloseLinger):
	}
	c.s.CloseWithError(webtransport.SessionErrorCode(code), truncateUTF8(reason, 1024))
}

// wtCloseLinger is how long a WebTransport close waits for what the streams just wrote: a few
// round trips on the networks browsers use.
const wtCloseLinger = 100 * time.Millisecond

func (c *wtConn) Context() context.Context { return c.s.Context() }
func (c *wtConn) RemoteAddr() net.Addr     { return c.s.RemoteAddr() }
func (c *wtConn) Kind() Kind               { return WebTransport }

// wtStream is a stream of a WebTransport session, counted until both sides have ended.
type wtStream struct {
	*webtransport.Stream
	c *wtConn

	mu                sync.Mutex
	readEnd, writeEnd bool
	released          bool
}

// ended records that one side ended, releasing the stream's place once both have.
func (s *wtStream) ended(read bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if read {
		s.readEnd = true
	} else {
		s.writeEnd = true
	}
	if s.readEnd && s.writeEnd && !s.released {
		s.released = true
		s.c.mu.Lock()
		s.c.open--
		s.c.mu.Unlock()
	}
}

func (s *wtStream) Read(p []byte) (int, error) {
	n, err := s.Stream.Read(p)
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		s.ended(true)
	}
	return n, wtError(err)
}

func (s *wtStream) Write(p []byte) (int, error) {
	n, err := s.Stream.Write(p)
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		s.ended(false)
	}
	return n, wtError(err)
}

func (s *wtStream) Close() error {
	s.ended(false)
	return s.Stream.Close()
}

func (s *wtStream) CancelRead(code uint64) {
	s.ended(true)
	s.Stream.CancelRead(webtransport.StreamErrorCode(code))
}

func (s *wtStream) CancelWrite(code uint64) {
	s.ended(false)
	s.Stream.CancelWrite(webtransport.StreamErrorCode(code))
}

func (s *wtStream) ID() int64 { return int64(s.StreamID()) }

// wtError translates webtransport-go's stream and session errors.
func wtError(err error) error {
	if err == nil {
		return nil
	}
	var se *webtransport.StreamError
	if errors.As(err, &se) {
		return &StreamError{Code: uint64(se.ErrorCode), Remote: se.Remote}
	}
	var sess *webtransport.SessionError
	if errors.As(err, &sess) {
		return closedConn(err)
	}
	return quicError(err)
}
