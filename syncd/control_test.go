package syncd

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/syncd/auth"
	"github.com/syncd-dev/syncd/test/testkit"
)

// The token lifecycle and the control stream after Welcome, through real QUIC (issue #10: a
// 2-second token still sent messages 70 s later; closing the control stream did not end the
// session; a second Hello was not answered).

// mintAt signs a token of uid's device valid from issued until expires (whole seconds).
func mintAt(t *testing.T, ts *testServer, uid, device string, issued, expires time.Time) string {
	t.Helper()
	tok, err := ts.keys.Mint(auth.TokenClaims{User: uid, Device: device, Issued: issued, Expires: expires})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// soon returns a whole second at least d from now: a token expiry the test can wait for.
func soon(d time.Duration) time.Time { return time.Unix(time.Now().Add(d).Unix()+1, 0) }

// stillServed checks that c's session answers a request.
func stillServed(t *testing.T, c *prototest.Conn) {
	t.Helper()
	if h, ok := c.Do(&proto.HeadCheck{ID: c.ID()}).(*proto.Head); !ok {
		t.Fatalf("session not served: %#v", h)
	}
}

// controlNext reads the next frame of c's control stream.
func controlNext(t *testing.T, c *prototest.Conn, r *proto.Reader) proto.Frame {
	t.Helper()
	c.Control.SetReadDeadline(time.Now().Add(prototest.Timeout))
	f, err := r.Next()
	if err != nil {
		t.Fatalf("control stream: %v", err)
	}
	return f
}

// TestTokenExpiryEndsSession: Welcome says when the token expires, and at that moment the
// server closes the connection with token_expired; another device's session goes on.
func TestTokenExpiryEndsSession(t *testing.T) {
	ts := startServer(t, nil)
	bob := connect(t, ts, "bob", "phone")
	exp := soon(time.Second)
	c := prototest.Connect(t, ts.Addr().String(), ts.Fingerprint(), mintAt(t, ts, "alice", "phone", time.Now(), exp), "alice", "phone")
	if c.Welcome.TokenExpires != exp.UnixNano() {
		t.Fatalf("welcome token_expires %d, want %d", c.Welcome.TokenExpires, exp.UnixNano())
	}
	stillServed(t, c)
	e := prototest.Closed(t, c.QUIC)
	if e.Code != proto.CodeTokenExpired || time.Now().Before(exp) || time.Since(exp) > 2*time.Second {
		t.Fatalf("closed with %+v at %v, token expiry %v; want token_expired then", e, time.Now(), exp)
	}
	stillServed(t, bob)
}

// TestRefreshExtendsSession: a Refresh with a new token of the same device moves the session's
// end (Refreshed says to when), so it outlives its first token; refused refreshes (another user
// or device, an expired, bad or over-long token) are answered and leave the session under the
// token it had, which then ends it at its expiry.
func TestRefreshExtendsSession(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.MaxTokenLifetime = 24 * time.Hour })
	exp := soon(2 * time.Second)
	now := time.Now()
	alice := prototest.Connect(t, ts.Addr().String(), ts.Fingerprint(), mintAt(t, ts, "alice", "phone", now, exp), "alice", "phone")
	tablet := prototest.Connect(t, ts.Addr().String(), ts.Fingerprint(), mintAt(t, ts, "alice", "tablet", now, exp), "alice", "tablet")
	r := proto.NewReader(alice.Control, alice.MaxFrame())
	refresh := func(c *prototest.Conn, r *proto.Reader, tok string) proto.Frame {
		t.Helper()
		if err := proto.WriteFrame(c.Control, &proto.Refresh{Token: tok}); err != nil {
			t.Fatal(err)
		}
		return controlNext(t, c, r)
	}
	bobs, _ := ts.MintToken("bob", "phone", time.Hour)
	for name, tc := range map[string]struct {
		token string
		code  proto.Code
	}{
		"another user":      {bobs, proto.CodeForbidden},
		"another device":    {mintAt(t, ts, "alice", "laptop", now, now.Add(time.Hour)), proto.CodeForbidden},
		"expired":           {mintAt(t, ts, "alice", "phone", now.Add(-2*time.Hour), now.Add(-time.Hour)), proto.CodeTokenExpired},
		"bad signature":     {"v1.eyJ1IjoiYSJ9.AAAA", proto.CodeUnauthenticated},
		"no token":          {"", proto.CodeUnauthenticated},
		"too long":          {strings.Repeat("a", proto.MaxTokenLen+1), proto.CodeTooLarge},
		"lifetime too long": {mintAt(t, ts, "alice", "phone", now, now.Add(25*time.Hour)), proto.CodeUnauthenticated},
	} {
		if e, ok := refresh(alice, r, tc.token).(*proto.Error); !ok || e.Code != tc.code || e.ID != 0 {
			t.Errorf("refresh with %s: %#v, want error %v", name, e, tc.code)
		}
	}
	stillServed(t, alice)
	later := soon(time.Hour)
	ok, isOK := refresh(alice, r, mintAt(t, ts, "alice", "phone", now, later)).(*proto.Refreshed)
	if !isOK || ok.TokenExpires != later.UnixNano() {
		t.Fatalf("refresh: %#v, want refreshed until %v", ok, later)
	}
	// The tablet's refresh is refused: it keeps its first token, and ends with it.
	if e, isErr := refresh(tablet, proto.NewReader(tablet.Control, tablet.MaxFrame()), bobs).(*proto.Error); !isErr || e.Code != proto.CodeForbidden {
		t.Fatalf("tablet refresh: %#v", e)
	}
	if e := prototest.Closed(t, tablet.QUIC); e.Code != proto.CodeTokenExpired || time.Now().Before(exp) {
		t.Fatalf("tablet closed with %+v at %v; want token_expired at %v", e, time.Now(), exp)
	}
	time.Sleep(time.Until(exp.Add(300 * time.Millisecond)))
	stillServed(t, alice) // past the first token's expiry, under the refreshed one
}

// TestControlStreamEndsSession: closing or resetting the control stream ends the session, and so
// does any frame the client may not send on it after Welcome (a second Hello, a request, a frame
// version other than 1, a frame beyond max_frame) — answered first with its code. Unknown types
// and malformed bodies are answered and the session goes on. Other sessions are not touched.
func TestControlStreamEndsSession(t *testing.T) {
	ts := startServer(t, nil)
	bob := connect(t, ts, "bob", "phone")
	hello, _ := proto.AppendFrame(nil, &proto.Hello{Token: "t", Device: "phone", ProtoVersion: 1})
	request, _ := proto.AppendFrame(nil, &proto.HeadCheck{ID: 1})
	for name, tc := range map[string]struct {
		do   func(c *prototest.Conn)
		code proto.Code
	}{
		"close":        {func(c *prototest.Conn) { c.Control.Close() }, 0},
		"reset":        {func(c *prototest.Conn) { c.Control.CancelWrite(7) }, 0},
		"second hello": {func(c *prototest.Conn) { c.Control.Write(hello) }, proto.CodeUnexpectedFrame},
		"a request":    {func(c *prototest.Conn) { c.Control.Write(request) }, proto.CodeUnexpectedFrame},
		"version 2":    {func(c *prototest.Conn) { c.Control.Write([]byte{0, 0, 0, 3, 2, byte(proto.TypeRefresh), 0x80}) }, proto.CodeUnsupportedVersion},
		"too large":    {func(c *prototest.Conn) { c.Control.Write([]byte{0x7f, 0xff, 0xff, 0xff, 1, byte(proto.TypeRefresh)}) }, proto.CodeFrameTooLarge},
	} {
		t.Run(name, func(t *testing.T) {
			c := connect(t, ts, "alice", "phone")
			tc.do(c)
			if e := prototest.Closed(t, c.QUIC); e.Code != tc.code || e.Message == "" {
				t.Fatalf("closed with %+v, want code %v and a message", e, tc.code)
			}
			if tc.code != 0 {
				// The Error frame came first, when the close did not overtake it.
				c.Control.SetReadDeadline(time.Now().Add(time.Second))
				if f, err := proto.NewReader(c.Control, c.MaxFrame()).Next(); err == nil {
					if e, ok := f.(*proto.Error); !ok || e.Code != tc.code {
						t.Fatalf("control stream: %#v, want error %v", f, tc.code)
					}
				}
			}
		})
	}
	c := connect(t, ts, "alice", "phone")
	r := proto.NewReader(c.Control, c.MaxFrame())
	for raw, code := range map[string]proto.Code{
		string([]byte{0, 0, 0, 3, 1, 99, 0x80}):                      proto.CodeUnknownFrame,
		string([]byte{0, 0, 0, 3, 1, byte(proto.TypeRefresh), 0xc1}): proto.CodeMalformed,
	} {
		c.Control.Write([]byte(raw))
		if e, ok := controlNext(t, c, r).(*proto.Error); !ok || e.Code != code {
			t.Fatalf("% x on the control stream: %#v, want error %v", raw, e, code)
		}
		stillServed(t, c)
	}
	stillServed(t, bob)
}

// TestHelloChecksKeysAndLifetime: at Hello, a token of a key in TokenKeys (one being rotated) is
// accepted; one of a key the server does not hold is refused naming its key id; one valid for
// longer than MaxTokenLifetime is refused.
func TestHelloChecksKeysAndLifetime(t *testing.T) {
	next, gone := bytes.Repeat([]byte{7}, 32), bytes.Repeat([]byte{9}, 32)
	ts := startServer(t, func(c *Config) { c.TokenKeys, c.MaxTokenLifetime = [][]byte{next}, 24*time.Hour })
	now := time.Now()
	mintWith := func(secret []byte, ttl time.Duration) string {
		t.Helper()
		tok, err := auth.MintToken(secret, auth.TokenClaims{User: "alice", Device: "phone", Issued: now, Expires: now.Add(ttl)})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	stillServed(t, prototest.Connect(t, ts.Addr().String(), ts.Fingerprint(), mintWith(next, time.Hour), "alice", "phone"))
	for name, tc := range map[string]struct {
		token, says string
	}{
		"a key the server does not hold": {mintWith(gone, time.Hour), auth.KeyID(gone)},
		"lifetime over the maximum":      {mintAt(t, ts, "alice", "phone", now, now.Add(25*time.Hour)), "maximum token lifetime"},
	} {
		e, ok := hello(t, dialRaw(t, ts), tc.token, "phone").(*proto.Error)
		if !ok || e.Code != proto.CodeUnauthenticated || !strings.Contains(e.Message, tc.says) {
			t.Errorf("%s: %#v, want unauthenticated saying %q", name, e, tc.says)
		}
	}
}

// TestSessionEndStopsItsTimer: a session that ends because the client went away releases its
// expiry timer (else every such session would stay in memory until its token expired) and its
// place in the revocation index.
func TestSessionEndStopsItsTimer(t *testing.T) {
	ts := startServer(t, nil)
	c := connect(t, ts, "alice", "phone")
	live := ts.sessions.of("alice", "phone")
	if len(live) != 1 {
		t.Fatalf("%d sessions indexed for alice's phone", len(live))
	}
	c.QUIC.CloseWithError(0, "gone")
	testkit.WaitTrue(t, 5*time.Second, "the session to leave the index", func() bool { return len(ts.sessions.of("alice", "phone")) == 0 })
	live[0].ctl.mu.Lock()
	defer live[0].ctl.mu.Unlock()
	if live[0].ctl.expiry.Stop() {
		t.Fatal("the ended session's expiry timer was still armed")
	}
}

// TestTokensIssuedInTheFutureRefused (issue #21, 4): a token whose iat is beyond the clock skew
// is refused at Hello and in Refresh — the audit's token issued a year ahead with a 29-day span
// was accepted, outlived max_token_lifetime and every revocation. A token a little ahead (within
// auth.MaxClockSkew) is accepted, and a revocation made now covers it: its session is closed and
// it cannot reconnect.
func TestTokensIssuedInTheFutureRefused(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.MaxTokenLifetime = 30 * 24 * time.Hour })
	now := time.Now()
	yearAhead := now.Add(365 * 24 * time.Hour)
	future := mintAt(t, ts, "alice", "phone", yearAhead, yearAhead.Add(29*24*time.Hour))
	if e, ok := hello(t, dialRaw(t, ts), future, "phone").(*proto.Error); !ok || e.Code != proto.CodeUnauthenticated || !strings.Contains(e.Message, "issued in the future") {
		t.Fatalf("hello with a token issued a year ahead: %#v, want unauthenticated (issued in the future)", e)
	}
	justAhead := now.Add(auth.MaxClockSkew + 5*time.Second)
	if e, ok := hello(t, dialRaw(t, ts), mintAt(t, ts, "alice", "phone", justAhead, justAhead.Add(time.Hour)), "phone").(*proto.Error); !ok || e.Code != proto.CodeUnauthenticated {
		t.Fatalf("hello with a token issued %v ahead: %#v, want unauthenticated", auth.MaxClockSkew+5*time.Second, e)
	}

	// Within the skew: accepted, so a clock a few seconds fast does not log devices out.
	skewed := now.Add(auth.MaxClockSkew / 2)
	alice := prototest.Connect(t, ts.Addr().String(), ts.Fingerprint(), mintAt(t, ts, "alice", "phone", skewed, skewed.Add(time.Hour)), "alice", "phone")
	stillServed(t, alice)
	r := proto.NewReader(alice.Control, alice.MaxFrame())
	if err := proto.WriteFrame(alice.Control, &proto.Refresh{Token: future}); err != nil {
		t.Fatal(err)
	}
	if e, ok := controlNext(t, alice, r).(*proto.Error); !ok || e.Code != proto.CodeUnauthenticated {
		t.Fatalf("refresh with a token issued a year ahead: %#v, want unauthenticated", e)
	}
	stillServed(t, alice) // a refused refresh leaves the session under its token

	// A revocation made now covers the token issued ahead within the skew: the session ends and
	// the token is refused (the audit's session stayed and its token reconnected).
	code, body := testkit.HTTP(t, "POST", "http://"+ts.AdminAddr().String()+"/v1/users/alice/devices/phone/revoke", testkit.Bearer(ts.AdminToken()))
	if code != 200 {
		t.Fatalf("revoke: HTTP %d %s", code, body)
	}
	if e := prototest.Closed(t, alice.QUIC); e.Code != proto.CodeUnauthenticated || !strings.Contains(e.Message, "revoked") {
		t.Fatalf("the session of a token issued %v ahead closed with %+v, want unauthenticated (revoked)", auth.MaxClockSkew/2, e)
	}
	again := mintAt(t, ts, "alice", "phone", skewed, skewed.Add(time.Hour))
	if e, ok := hello(t, dialRaw(t, ts), again, "phone").(*proto.Error); !ok || e.Code != proto.CodeUnauthenticated || !strings.Contains(e.Message, "revoked") {
		t.Fatalf("a revoked token issued ahead reconnecting: %#v, want unauthenticated (revoked)", e)
	}
}
