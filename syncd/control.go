package syncd

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd/auth"
	"github.com/syncd-dev/syncd/syncd/transport"
)

// The control stream after Welcome (PROTOCOL §6, control stream). It lives as long as the
// session: the server reads it for Refresh, and closing it ends the session. The session ends,
// with an Error on the control stream and a connection close of the same code, when its token
// expires (a timer, no goroutine: 10,000 idle devices a node are the target), when an operator
// revokes its device (on every node, as the meta shard applies the revocation), or when the
// client breaks the stream's rules.

// control is a session's control stream and the token it runs under.
type control struct {
	st transport.Stream

	mu      sync.Mutex  // serializes writes on st; guards the fields below
	issued  time.Time   // of the token in force
	expires time.Time   // of the token in force: the session's end
	expiry  *time.Timer // fires at expires; nil until Welcome is written
	ended   bool
}

// controlWriteTimeout bounds a write on the control stream: the frames are tiny and the stream
// has its whole flow-control window to itself, so only a vanished client makes one wait.
const controlWriteTimeout = time.Second

// writeControl writes f on the control stream unless the session ended.
func (ss *session) writeControl(f proto.Frame) {
	ss.ctl.mu.Lock()
	defer ss.ctl.mu.Unlock()
	if !ss.ctl.ended {
		ss.writeControlLocked(f)
	}
}

// REQUIRES: ss.ctl.mu
func (ss *session) writeControlLocked(f proto.Frame) {
	ss.ctl.st.SetWriteDeadline(time.Now().Add(controlWriteTimeout))
	proto.WriteFrameWithin(ss.ctl.st, f, int(ss.s.cfg.Limits.MaxFrame))
}

// startExpiry arms the timer that ends the session when its token expires.
func (ss *session) startExpiry() {
	ss.ctl.mu.Lock()
	defer ss.ctl.mu.Unlock()
	ss.ctl.expiry = time.AfterFunc(time.Until(ss.ctl.expires), ss.expired)
}

// expired ends the session if its token has expired; a Refresh may have moved the expiry since
// the timer was set (it resets the timer too).
func (ss *session) expired() {
	ss.ctl.mu.Lock()
	exp := ss.ctl.expires
	ss.ctl.mu.Unlock()
	if time.Now().Before(exp) {
		return
	}
	ss.end(&proto.Error{Code: proto.CodeTokenExpired, Message: fmt.Sprintf(
		"the token expired at %s; send refresh with a new token before the token_expires of welcome or refreshed, or reconnect with one",
		exp.UTC().Format(time.RFC3339))})
}

// end ends the session with e: it writes e on the control stream (a code of 0 writes nothing:
// the client asked for the end) and closes the connection with e's code and a reason phrase
// that carries e whole (proto.CloseReason), since the frame may be lost in the close. Only the
// first call does anything.
func (ss *session) end(e *proto.Error) {
	ss.ctl.mu.Lock()
	if ss.ctl.ended {
		ss.ctl.mu.Unlock()
		return
	}
	ss.ctl.ended = true
	if ss.ctl.expiry != nil {
		ss.ctl.expiry.Stop()
	}
	if e.Code != 0 {
		ss.writeControlLocked(e)
	}
	ss.ctl.mu.Unlock()
	closeConn(ss.conn, e)
}

// finish marks the session ended however it ended, and stops its expiry timer, which would
// otherwise keep the session in memory until its token expires (up to max_token_lifetime).
func (ss *session) finish() {
	ss.ctl.mu.Lock()
	defer ss.ctl.mu.Unlock()
	ss.ctl.ended = true
	if ss.ctl.expiry != nil {
		ss.ctl.expiry.Stop()
	}
}

// closeConn closes conn because of e: e's code as the QUIC application error code, and e's
// retry-after and message in the reason phrase (proto.CloseReason).
func closeConn(conn transport.Conn, e *proto.Error) {
	if conn == nil {
		return // a session made by a test without a connection
	}
	conn.CloseWithError(uint64(e.Code), proto.CloseReason(e))
}

// serveControl reads the control stream after Welcome until the session ends: Refresh frames
// are answered, Report frames counted (digest.go); the stream's end (the client closed or reset
// it) ends the session, and so does any other frame a client may send (a second Hello, a
// request: unexpected_frame), a frame version other than 1 (unsupported_version) or a frame
// beyond max_frame. Unknown frame types and malformed bodies are answered and skipped, as on
// every stream (PROTOCOL §3).
func (ss *session) serveControl() {
	r := proto.NewReader(ss.ctl.st, int(ss.s.cfg.Limits.MaxFrame))
	for {
		f, err := r.Next()
		switch {
		case errors.Is(err, proto.ErrUnknownType), errors.Is(err, proto.ErrMalformed):
			ss.writeControl(&proto.Error{Code: codeForFrameError(err), Message: err.Error()})
			continue
		case errors.Is(err, io.EOF):
			ss.end(&proto.Error{Message: "the client closed the control stream: session ended"})
			return
		case transport.PeerReset(err):
			ss.end(&proto.Error{Message: "the client reset the control stream: session ended"})
			return
		case err != nil:
			if errors.Is(err, transport.ErrConnClosed) || ss.conn.Context().Err() != nil {
				return // the connection is gone already
			}
			ss.end(&proto.Error{Code: codeForFrameError(err), Message: "control stream: " + err.Error()})
			return
		}
		switch f := f.(type) {
		case *proto.Refresh:
			ss.refresh(f)
		case *proto.Report:
			ss.report(f) // digest.go
		default:
			ss.end(&proto.Error{Code: proto.CodeUnexpectedFrame, Message: fmt.Sprintf(
				"after welcome the control stream carries only refresh and report from the client, got %v: session ended", f.FrameType())})
			return
		}
	}
}

// refresh answers a Refresh: the session runs under the new token from now on, or, if the token
// is refused, goes on under the one it had.
func (ss *session) refresh(f *proto.Refresh) {
	if err := f.Validate(); err != nil {
		ss.writeControl(wireError(ss.s.logger, 0, err))
		return
	}
	claims, err := ss.s.checkToken(f.Token, time.Now())
	if err == nil && (claims.User != ss.user || claims.Device != ss.device) {
		err = proto.Errorf(proto.CodeForbidden, "the new token is for %s's device %s, this session is %s's device %s",
			claims.User, claims.Device, ss.user, ss.device)
	}
	if err != nil {
		ss.writeControl(wireError(ss.s.logger, 0, err))
		return
	}
	ss.ctl.mu.Lock()
	defer ss.ctl.mu.Unlock()
	if ss.ctl.ended {
		return
	}
	ss.ctl.issued, ss.ctl.expires = claims.Issued, claims.Expires
	ss.ctl.expiry.Reset(time.Until(claims.Expires))
	ss.writeControlLocked(&proto.Refreshed{TokenExpires: claims.Expires.UnixNano()})
}

// checkToken verifies a token of Hello or Refresh: signed by a key of the ring, not expired, not
// valid for longer than MaxTokenLifetime, and not issued before a revocation of its device.
// Errors are *proto.Error or auth's (which errorCodes maps).
func (s *Server) checkToken(token string, now time.Time) (auth.TokenClaims, error) {
	claims, err := s.keys.Verify(token, now)
	if err != nil {
		return claims, err
	}
	if life := claims.Expires.Sub(claims.Issued); life > s.cfg.MaxTokenLifetime {
		return claims, proto.Errorf(proto.CodeUnauthenticated, "the token is valid for %v, longer than this server's maximum token lifetime %v: mint tokens that expire sooner",
			life, s.cfg.MaxTokenLifetime)
	}
	if r, ok := s.cluster.Revocation(claims.User, claims.Device); ok && revokes(r, claims.Issued) {
		return claims, revokedError(r)
	}
	return claims, nil
}

// revokes reports whether r covers a token issued at issued: every token issued up to r's second
// plus auth.MaxClockSkew, since until the revocation a server accepted tokens issued that far
// ahead of its clock (a token service whose clock runs fast); a token minted for the device
// after that is accepted. The admin plane keeps r that much longer too (admin.RevokeDevice).
func revokes(r cluster.Revocation, issued time.Time) bool {
	return issued.Unix() <= r.Before+int64(auth.MaxClockSkew/time.Second)
}

// revokedError is the answer to a token of a revoked device, and the end of its sessions.
func revokedError(r cluster.Revocation) *proto.Error {
	return proto.Errorf(proto.CodeUnauthenticated, "device %s of user %s was revoked by an operator: its tokens issued up to %s are refused; get a new token",
		r.Device, r.User, time.Unix(r.Before, 0).Add(auth.MaxClockSkew).UTC().Format(time.RFC3339))
}

// sessions indexes the node's sessions by device, for revocations. Safe for concurrent use.
type sessions struct {
	mu sync.Mutex
	m  map[string]map[*session]struct{} // by session.key()
}

func (ss *sessions) add(s *session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.m == nil {
		ss.m = map[string]map[*session]struct{}{}
	}
	if ss.m[s.key()] == nil {
		ss.m[s.key()] = map[*session]struct{}{}
	}
	ss.m[s.key()][s] = struct{}{}
}

func (ss *sessions) remove(s *session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m[s.key()], s)
	if len(ss.m[s.key()]) == 0 {
		delete(ss.m, s.key())
	}
}

// of returns the sessions of user's device.
func (ss *sessions) of(user, device string) []*session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	var out []*session
	for s := range ss.m[user+"\x00"+device] {
		out = append(out, s)
	}
	return out
}

// deviceRevoked ends this node's sessions of r's device whose token r covers. It runs on the
// meta shard's apply goroutine, which must not wait for a client: each session ends on a timer
// goroutine of its own.
func (s *Server) deviceRevoked(r cluster.Revocation) {
	n := 0
	for _, ss := range s.sessions.of(r.User, r.Device) {
		ss.ctl.mu.Lock()
		covered := revokes(r, ss.ctl.issued)
		ss.ctl.mu.Unlock()
		if covered {
			n++
			time.AfterFunc(0, func() { ss.end(revokedError(r)) })
		}
	}
	if n > 0 {
		s.logger.Info("device revoked: closing its sessions on this node", "user", r.User, "device", r.Device, "sessions", n)
	}
}
