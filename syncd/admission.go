package syncd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/transport"
)

// Admission and the handshake (PROTOCOL §2, §6 Hello, §7). A connection is admitted to the
// handshake only while the node has room (Config.MaxHandshakes) and its source has fewer than
// Config.MaxHandshakesPerSource handshakes in progress, so one machine opening hundreds of
// connections that never say Hello locks out nobody else; once half of the room is taken, new
// connections must prove their source address first (QUIC Retry, one more round trip), so the
// per-source limit cannot be dodged with spoofed addresses. A connection has
// Config.HelloTimeout to send Hello. Every refusal closes the connection with a code and a
// reason phrase carrying the retry-after (proto.CloseReason), which clients read even when the
// Error frame written before the close is lost.

// listen binds the QUIC listener for clients, asking for address validation under load.
func (s *Server) listen(tlsConf *tls.Config) error {
	addr, err := net.ResolveUDPAddr("udp", s.cfg.ListenAddr)
	if err != nil {
		return err
	}
	udp, err := net.ListenUDP("udp", addr)
	if err != nil {
		return err
	}
	s.udp = &quic.Transport{
		Conn: udp,
		// Under load a connection attempt must show it can receive at its address before it
		// costs more than a stateless Retry.
		VerifySourceAddress: func(net.Addr) bool { return len(s.handshakes) >= max(cap(s.handshakes)/2, 1) },
		ConnContext: func(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
			if info.AddrVerified {
				s.metrics.addressValidated()
			}
			return ctx, nil
		},
	}
	s.ln, err = s.udp.Listen(tlsConf, &quic.Config{
		MaxIdleTimeout:     30 * time.Second,
		KeepAlivePeriod:    10 * time.Second,
		MaxIncomingStreams: int64(s.cfg.MaxStreamsPerConn),
		// The protocol has no unidirectional stream; quic-go's default would let a client open
		// 100 that nobody reads, each pinning its receive window (issue #10). Negative: none.
		MaxIncomingUniStreams: -1,
	})
	if err != nil {
		s.closeListener()
		return err
	}
	return nil
}

// closeListener closes the client listener's transport and its socket (a Transport leaves a
// socket it was given open).
func (s *Server) closeListener() {
	s.udp.Close()
	s.udp.Conn.Close()
}

// admissionRetry is the retry-after of a connection refused for want of handshake room.
const admissionRetry = time.Second

// serveConn admits a connection to the handshake, authenticates it, then serves its control
// stream while acceptStreams serves the others, until either side ends the session.
func (s *Server) serveConn(ctx context.Context, conn transport.Conn) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var streams sync.WaitGroup
	defer streams.Wait()
	defer conn.CloseWithError(0, "bye")
	// A closed connection ends ctx, and the other way round; AfterFunc costs no goroutine
	// while the connection lives (10,000 idle devices per node are the target).
	defer context.AfterFunc(conn.Context(), cancel)()
	defer context.AfterFunc(ctx, func() { conn.CloseWithError(0, "server shutting down") })()

	defer context.AfterFunc(s.removed, func() {
		closeConn(conn, &proto.Error{Code: proto.CodeUnavailable, Message: removedMsg})
	})()
	if s.removed.Err() != nil {
		return
	}
	src := raftstore.SourceKey(conn.RemoteAddr())
	if !s.sources.enter(src, s.cfg.MaxHandshakesPerSource) {
		s.metrics.handshakeRefused(refusedSource)
		closeConn(conn, overloaded(0, fmt.Sprintf("%d handshakes in progress from your address, the most allowed", s.cfg.MaxHandshakesPerSource), admissionRetry))
		return
	}
	if !s.handshakes.enter() {
		s.sources.leave(src)
		s.metrics.handshakeRefused(refusedBusy)
		closeConn(conn, overloaded(0, "handshakes", admissionRetry))
		return
	}
	sess, err := s.handshake(ctx, conn, &streams)
	s.handshakes.leave()
	s.sources.leave(src)
	if err != nil {
		s.logger.Debug("handshake failed", "remote", conn.RemoteAddr().String(), "err", err)
		return
	}
	defer s.userConns.leave(sess.user)
	defer s.sessions.remove(sess)
	defer sess.finish()
	sess.serveControl()
}

// handshake accepts the control stream and reads Hello from it within HelloTimeout, checks the
// token and answers Welcome; on any refusal it answers an Error and closes the connection with
// the same code. From the control stream on, acceptStreams takes the connection's other streams
// and refuses those that come before Welcome.
func (s *Server) handshake(ctx context.Context, conn transport.Conn, streams *sync.WaitGroup) (*session, error) {
	deadline := time.Now().Add(s.cfg.HelloTimeout)
	noHello := &proto.Error{Code: proto.CodeTimeout, Message: fmt.Sprintf("no hello within %v of connecting", s.cfg.HelloTimeout)}
	actx, cancel := context.WithDeadline(ctx, deadline)
	st, err := conn.AcceptStream(actx)
	cancel()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			s.metrics.handshakeRefused(refusedTimeout)
			closeConn(conn, noHello)
		}
		return nil, err
	}
	ss := &session{s: s, conn: conn, ctl: control{st: st}}
	var welcomed atomic.Bool
	streams.Add(1)
	go func() {
		defer streams.Done()
		ss.acceptStreams(ctx, &welcomed, streams)
	}()

	st.SetReadDeadline(deadline)
	f, err := proto.NewReader(st, proto.DefaultMaxFrame).Next()
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.metrics.handshakeRefused(refusedTimeout)
		return nil, s.refuse(conn, st, noHello)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return nil, s.refuse(conn, st, proto.Errorf(proto.CodeMalformed, "the control stream ended before a whole hello"))
	case err != nil:
		// Before Welcome every bad first frame is a refusal, whatever it would cost on another
		// stream: a version other than 1 is unsupported_version, an unknown type unknown_frame.
		return nil, s.refuse(conn, st, proto.Errorf(codeForFrameError(err), "first frame: %v", err))
	}
	hello, ok := f.(*proto.Hello)
	if !ok {
		return nil, s.refuse(conn, st, proto.Errorf(proto.CodeUnexpectedFrame, "the first frame must be hello, got %v", f.FrameType()))
	}
	if err := hello.Validate(); err != nil {
		return nil, s.refuse(conn, st, err)
	}
	claims, err := s.checkToken(hello.Token, time.Now())
	if err != nil {
		return nil, s.refuse(conn, st, err)
	}
	if claims.Device != hello.Device {
		return nil, s.refuse(conn, st, proto.Errorf(proto.CodeForbidden, "the token is for device %q, not %q", claims.Device, hello.Device))
	}
	if !s.userConns.enter(claims.User, s.cfg.MaxConnectionsPerUser) {
		return nil, s.refuse(conn, st, &proto.Error{Code: proto.CodeTooManyConnections, RetryAfterMs: 5000,
			Message: fmt.Sprintf("user %s has %d connections open, the most allowed; close one", claims.User, s.cfg.MaxConnectionsPerUser)})
	}
	ss.user, ss.device = claims.User, claims.Device
	ss.answers = connAnswers{b: s.answers, user: ss.user, device: ss.key()}
	ss.ctl.issued, ss.ctl.expires = claims.Issued, claims.Expires
	s.sessions.add(ss)
	// A revocation applied since checkToken found no session to end: look again, now that a
	// revocation applied from here on finds this one.
	if r, ok := s.cluster.Revocation(ss.user, ss.device); ok && revokes(r, claims.Issued) {
		s.sessions.remove(ss)
		s.userConns.leave(ss.user)
		return nil, s.refuse(conn, st, revokedError(r))
	}
	welcome := &proto.Welcome{
		User: claims.User, Device: claims.Device, ServerTime: time.Now().UnixNano(),
		Session:      fmt.Sprintf("%s-%x", s.cfg.NodeID, time.Now().UnixNano()),
		ProtoVersion: min(hello.ProtoVersion, proto.ProtoVersion), Limits: s.cfg.Limits,
		TokenExpires: claims.Expires.UnixNano(),
	}
	// Streams accepted from here on are served: set before Welcome goes out, so that no stream
	// the client opens after reading it can be refused (one racing the Welcome out is served).
	ss.proto = welcome.ProtoVersion
	welcomed.Store(true)
	st.SetReadDeadline(time.Time{})
	// Like every control write (writeControlLocked): a client that does not read its Welcome
	// must not hold a handshake slot.
	st.SetWriteDeadline(time.Now().Add(controlWriteTimeout))
	if err := proto.WriteFrame(st, welcome); err != nil {
		s.sessions.remove(ss)
		s.userConns.leave(claims.User)
		return nil, err
	}
	ss.startExpiry()
	s.metrics.sessionWelcomed(conn.Kind())
	return ss, nil
}

// acceptStreams serves the connection's streams after the control stream until ctx ends or the
// connection closes. A stream that arrives before Welcome was sent is not served: it gets an
// Error with unexpected_frame, STOP_SENDING with that code, and its end.
func (ss *session) acceptStreams(ctx context.Context, welcomed *atomic.Bool, streams *sync.WaitGroup) {
	for {
		st, err := ss.conn.AcceptStream(ctx)
		if err != nil {
			return
		}
		if !welcomed.Load() {
			e := proto.Errorf(proto.CodeUnexpectedFrame, "stream %d opened before welcome: open streams only after reading welcome on the control stream", st.ID())
			st.SetWriteDeadline(time.Now().Add(controlWriteTimeout))
			proto.WriteFrame(st, e)
			st.CancelRead(uint64(e.Code))
			st.Close()
			continue
		}
		streams.Add(1)
		go func() {
			defer streams.Done()
			ss.serveStream(ctx, st)
		}()
	}
}

// refuse answers the handshake with an error frame and closes the connection with its code and
// the close reason that carries it whole.
func (s *Server) refuse(conn transport.Conn, st transport.Stream, err error) error {
	e := wireError(s.logger, 0, err)
	st.SetWriteDeadline(time.Now().Add(controlWriteTimeout))
	proto.WriteFrame(st, e)
	st.Close()
	closeConn(conn, e)
	return e
}
