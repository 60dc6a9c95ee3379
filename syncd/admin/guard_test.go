package admin_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/admin"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/test/testkit"
)

// The admin plane's guard (guard.go) over real HTTP against a real syncd: the admin token, the
// refusal of browser requests, and no state change on GET.

// withLog returns a server whose user alice has a log (a group she created was fanned out to
// it), its admin base URL and data directory, and a func returning alice's log epoch as the
// admin API reports it: the state the refused requests below must leave alone.
func withLog(t *testing.T, tweak func(*syncd.Config)) (ts *testServer, base, dir string, epoch func() uint64) {
	t.Helper()
	ts = startServer(t, func(c *syncd.Config) {
		dir = c.Dir
		if tweak != nil {
			tweak(c)
		}
	})
	base = "http://" + ts.AdminAddr().String()
	alice := connect(t, ts, "alice", "phone")
	alice.Ack(&proto.CreateGroup{ID: alice.ID(), Conv: "team", ClientMsgID: "g", Members: []string{"bob"}})
	epoch = func() uint64 {
		t.Helper()
		cur, code := testkit.GetJSON[adminapi.CursorReport](t, base+"/v1/cursors?user=alice", testkit.Bearer(ts.AdminToken()))
		if code != http.StatusOK {
			t.Fatalf("cursors: HTTP %d %+v", code, cur)
		}
		return cur.Epoch
	}
	testkit.WaitTrue(t, 10*time.Second, "alice's log to exist", func() bool { return epoch() != 0 })
	return ts, base, dir, epoch
}

// wantRefused sends the request and checks the status, the JSON error's code and that it says
// what to do; it returns the response.
func wantRefused(t *testing.T, method, url string, status int, code string, opts ...testkit.RequestOption) *http.Response {
	t.Helper()
	resp, body := testkit.HTTPResponse(t, method, url, opts...)
	var e adminapi.OpsError
	if resp.StatusCode != status || resp.Header.Get("Content-Type") != "application/json" ||
		json.Unmarshal([]byte(body), &e) != nil || e.Code != code || e.Message == "" || e.Hint == "" {
		t.Errorf("%s %s: HTTP %d %q; want %d with a JSON error %q, a message and a hint", method, url, resp.StatusCode, body, status, code)
	}
	return resp
}

// TestAdminNeedsToken: every /v1 endpoint and pprof answer 401 unauthenticated without the node's
// admin token, with a wrong one or a malformed header — with a challenge and a hint naming the
// token file by its name, never the data directory it is in (issue #21: the 401 told anyone who
// asked where the node keeps its data) — and a refused reset resets nothing; /healthz, /readyz
// and /metrics stay open.
func TestAdminNeedsToken(t *testing.T) {
	ts, base, dir, epoch := withLog(t, nil)
	tok := ts.AdminToken()
	file := filepath.Join(dir, adminapi.TokenFile)
	if raw, err := os.ReadFile(file); err != nil || strings.TrimSpace(string(raw)) != tok {
		t.Fatalf("%s: %q, %v; want the server's token", file, raw, err)
	}
	before := epoch()

	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, body := testkit.HTTP(t, http.MethodGet, base+path); code != http.StatusOK {
			t.Errorf("GET %s without a token: HTTP %d %.200s", path, code, body)
		}
	}
	wrong := []byte(tok)
	wrong[len(wrong)-1] ^= 1 // same length, one bit off
	for _, r := range []struct{ method, path string }{
		{"GET", "/v1/cluster"}, {"GET", "/v1/cursors?user=alice"}, {"GET", "/v1/trace?msg_id=1.1.0"},
		{"GET", "/v1/deadletters"}, {"POST", "/v1/users/alice/reset"}, {"POST", "/v1/nodes?id=n9&raft_addr=127.0.0.1:9"},
		{"POST", "/v1/nodes/n1/remove"}, {"POST", "/v1/shards"}, {"POST", "/v1/moves?user=alice&to=2"}, {"POST", "/v1/moves?slots=0-9&to=2"}, {"POST", "/v1/shards/1/split"}, {"POST", "/v1/moves/1/cancel"}, {"POST", "/v1/deadletters/1-2-3/replay"}, {"DELETE", "/v1/deadletters/1-2-3"},
		{"GET", "/debug/pprof/"}, {"GET", "/debug/pprof/cmdline"}, {"GET", "/debug/pprof/goroutine?debug=1"},
		{"GET", "/v1/nope"}, {"GET", "/nope"}, // what exists is not told either
	} {
		url := base + r.path
		resp := wantRefused(t, r.method, url, http.StatusUnauthorized, adminapi.CodeUnauthenticated)
		if got := resp.Header.Get("WWW-Authenticate"); got != `Bearer realm="syncd admin"` {
			t.Errorf("%s %s without a token: WWW-Authenticate %q", r.method, r.path, got)
		}
		for _, h := range []string{"Bearer " + string(wrong), "Bearer " + tok + "x", "Bearer " + tok[:len(tok)-1], "Basic " + tok, tok, "Bearer"} {
			resp := wantRefused(t, r.method, url, http.StatusUnauthorized, adminapi.CodeUnauthenticated, testkit.Header("Authorization", h))
			if got := resp.Header.Get("WWW-Authenticate"); !strings.Contains(got, `error="invalid_token"`) {
				t.Errorf("%s %s with %q: WWW-Authenticate %q", r.method, r.path, h, got)
			}
		}
	}
	_, body := testkit.HTTP(t, http.MethodPost, base+"/v1/users/alice/reset")
	for _, want := range []string{adminapi.TokenFile, "data directory", "-data-dir", "-admin-token-file", adminapi.TokenEnv} {
		if !strings.Contains(body, want) {
			t.Errorf("the 401's hint does not name %s: %s", want, body)
		}
	}
	if abs, _ := filepath.Abs(dir); strings.Contains(body, dir) || strings.Contains(body, abs) {
		t.Errorf("the 401 names the data directory %s to a caller without the token: %s", abs, body)
	}
	if got := epoch(); got != before {
		t.Fatalf("alice's epoch went from %d to %d: a refused reset reset her log", before, got)
	}
	view, _ := testkit.GetJSON[adminapi.ClusterView](t, base+"/v1/cluster", testkit.Bearer(tok))
	if len(view.Nodes) != 1 {
		t.Fatalf("cluster after a refused node add: %+v", view.Nodes)
	}

	// With the token (the scheme is case-insensitive) the same requests are served.
	for _, path := range []string{"/v1/cluster", "/v1/deadletters", "/debug/pprof/", "/debug/pprof/cmdline"} {
		if code, body := testkit.HTTP(t, http.MethodGet, base+path, testkit.Header("Authorization", "bearer "+tok)); code != http.StatusOK {
			t.Errorf("GET %s with the token: HTTP %d %.200s", path, code, body)
		}
	}
	if code, body := testkit.HTTP(t, http.MethodPost, base+"/v1/users/alice/reset", testkit.Bearer(tok)); code != http.StatusOK {
		t.Fatalf("reset with the token: HTTP %d %s", code, body)
	}
	if got := epoch(); got == before {
		t.Fatalf("alice's epoch is still %d after a reset with the token", got)
	}
}

// TestAdminMetricsAuth: with AdminMetricsAuth, /metrics needs the token too; health stays open.
func TestAdminMetricsAuth(t *testing.T) {
	ts := startServer(t, func(c *syncd.Config) { c.AdminMetricsAuth = true })
	base := "http://" + ts.AdminAddr().String()
	wantRefused(t, http.MethodGet, base+"/metrics", http.StatusUnauthorized, adminapi.CodeUnauthenticated)
	if code, body := testkit.HTTP(t, http.MethodGet, base+"/metrics", testkit.Bearer(ts.AdminToken())); code != http.StatusOK ||
		!strings.Contains(body, "syncd_connections") {
		t.Errorf("/metrics with the token: HTTP %d %.200s", code, body)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _ := testkit.HTTP(t, http.MethodGet, base+path); code != http.StatusOK {
			t.Errorf("GET %s without a token: HTTP %d", path, code)
		}
	}
}

// TestAdminTokenFile: a token file of the operator's is what the server requires (none is
// generated in the data directory), and a 401 names no path of it; one that is missing or
// malformed stops the start with what to do.
func TestAdminTokenFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ops.token")
	const mine = "0123456789abcdef0123456789abcdef-mine"
	if err := os.WriteFile(file, []byte(mine+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var dir string
	ts := startServer(t, func(c *syncd.Config) { c.AdminTokenFile, dir = file, c.Dir })
	if ts.AdminToken() != mine {
		t.Fatalf("AdminToken %q, want the file's %q", ts.AdminToken(), mine)
	}
	if _, err := os.Stat(filepath.Join(dir, adminapi.TokenFile)); !os.IsNotExist(err) {
		t.Errorf("%s in the data directory with a token file configured: %v", adminapi.TokenFile, err)
	}
	base := "http://" + ts.AdminAddr().String()
	if code, body := testkit.HTTP(t, http.MethodGet, base+"/v1/cluster", testkit.Bearer(mine)); code != http.StatusOK {
		t.Errorf("with the file's token: HTTP %d %s", code, body)
	}
	_, body := testkit.HTTP(t, http.MethodGet, base+"/v1/cluster")
	if strings.Contains(body, filepath.Dir(file)) || !strings.Contains(body, "-admin-token-file") {
		t.Errorf("the 401 names the configured file's directory %s, or not -admin-token-file: %s", filepath.Dir(file), body)
	}

	for content, want := range map[string]string{"": "does not exist", "short\n": "not an admin token", "has a space in it, which a header cannot carry\n": "not an admin token"} {
		bad := filepath.Join(t.TempDir(), "bad.token")
		if content != "" {
			if err := os.WriteFile(bad, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		_, err := syncd.NewServer(syncd.Config{Dir: t.TempDir(), AdminTokenFile: bad, ListenAddr: testkit.FreeAddr(t),
			RaftAddr: testkit.FreeAddr(t), AdminAddr: testkit.FreeAddr(t)})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "openssl rand -hex 32") {
			t.Errorf("token file %q: NewServer error %v; want it to say %q, name the file and how to make one", content, err, want)
		}
	}
}

// TestAdminRefusesBrowserRequests: what a web page can make a browser send — a request with
// another Origin (or "null"), a cross-site or same-site Sec-Fetch-Site, a state-changing request
// with a form's Content-Type — is refused even with the right token (each barrier holds on its
// own), and none of them resets the log; a same-origin request and a JSON one are served.
func TestAdminRefusesBrowserRequests(t *testing.T) {
	ts, base, _, epoch := withLog(t, nil)
	bearer := testkit.Bearer(ts.AdminToken())
	before := epoch()
	reset := base + "/v1/users/alice/reset"

	// The attack as a browser sends it: no Authorization, an Origin, cross-site.
	wantRefused(t, http.MethodPost, reset, http.StatusForbidden, adminapi.CodeCrossOrigin,
		testkit.Header("Origin", "http://evil.example"), testkit.Header("Sec-Fetch-Site", "cross-site"))
	for _, o := range []string{"http://evil.example", "null", "http://localhost:1", "https://" + ts.AdminAddr().String()} {
		wantRefused(t, http.MethodPost, reset, http.StatusForbidden, adminapi.CodeCrossOrigin, bearer, testkit.Header("Origin", o))
		wantRefused(t, http.MethodGet, base+"/v1/cluster", http.StatusForbidden, adminapi.CodeCrossOrigin, bearer, testkit.Header("Origin", o))
		wantRefused(t, http.MethodGet, base+"/healthz", http.StatusForbidden, adminapi.CodeCrossOrigin, testkit.Header("Origin", o))
	}
	for _, site := range []string{"cross-site", "same-site"} {
		wantRefused(t, http.MethodPost, reset, http.StatusForbidden, adminapi.CodeCrossOrigin, bearer, testkit.Header("Sec-Fetch-Site", site))
	}
	for _, ct := range []string{"application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/plain;charset=UTF-8",
		"TEXT/PLAIN", "text/plain; ;", "text/plain, application/json"} {
		wantRefused(t, http.MethodPost, reset, http.StatusUnsupportedMediaType, adminapi.CodeUnsupportedMediaType, bearer, testkit.Body(ct, "a=b"))
		wantRefused(t, http.MethodDelete, base+"/v1/deadletters/1-2-3", http.StatusUnsupportedMediaType, adminapi.CodeUnsupportedMediaType,
			bearer, testkit.Body(ct, "a=b"))
	}
	if got := epoch(); got != before {
		t.Fatalf("alice's epoch went from %d to %d: a refused request reset her log", before, got)
	}

	// Same origin, a navigation (Sec-Fetch-Site none), a read with any body type: served.
	for _, opt := range []testkit.RequestOption{testkit.Header("Origin", "http://"+ts.AdminAddr().String()),
		testkit.Header("Sec-Fetch-Site", "same-origin"), testkit.Header("Sec-Fetch-Site", "none"), testkit.Header("Content-Type", "text/plain")} {
		if code, body := testkit.HTTP(t, http.MethodGet, base+"/v1/cluster", bearer, opt); code != http.StatusOK {
			t.Errorf("same-origin read: HTTP %d %s", code, body)
		}
	}
	if code, body := testkit.HTTP(t, http.MethodPost, reset, bearer, testkit.Body("application/json", "{}"),
		testkit.Header("Origin", "http://"+ts.AdminAddr().String())); code != http.StatusOK {
		t.Fatalf("same-origin JSON reset: HTTP %d %s", code, body)
	}
	if got := epoch(); got == before {
		t.Fatalf("alice's epoch is still %d after an accepted reset", got)
	}
}

// TestAdminNoStateChangeOnGet: every operator route (found in this package's source, so a new
// one cannot be missed) names its method; those that change state are POST or DELETE only, and
// GET and HEAD on them answer 405 without acting.
func TestAdminNoStateChangeOnGet(t *testing.T) {
	routes := v1Routes(t)
	if len(routes) < 9 {
		t.Fatalf("found %d /v1 routes in the source (%v): the scan is broken", len(routes), routes)
	}
	ts, base, _, epoch := withLog(t, nil)
	bearer := testkit.Bearer(ts.AdminToken())
	before := epoch()
	param := regexp.MustCompile(`\{[^}]*\}`)
	for _, r := range routes {
		method, path, ok := strings.Cut(r, " ")
		if !ok {
			t.Errorf("route %q names no method: it would serve GET too", r)
			continue
		}
		switch method {
		case http.MethodGet:
			continue // reads: reviewed to change nothing
		case http.MethodPost, http.MethodDelete:
		default:
			t.Errorf("route %q: a state-changing route must be POST or DELETE", r)
		}
		// Arguments that would work, so that a GET would act if it were served.
		url := base + param.ReplaceAllStringFunc(path, func(p string) string {
			return map[string]string{"{uid}": "alice", "{id}": "1-2-3", "{dev}": "phone"}[p]
		})
		if path == "/v1/nodes" {
			url += "?id=n9&raft_addr=127.0.0.1:9"
		}
		for _, m := range []string{http.MethodGet, http.MethodHead} {
			resp, _ := testkit.HTTPResponse(t, m, url, bearer)
			if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(resp.Header.Get("Allow"), method) {
				t.Errorf("%s %s: HTTP %d (Allow %q), want 405 allowing %s", m, url, resp.StatusCode, resp.Header.Get("Allow"), method)
			}
		}
	}
	if got := epoch(); got != before {
		t.Errorf("alice's epoch went from %d to %d on GET/HEAD", before, got)
	}
	view, _ := testkit.GetJSON[adminapi.ClusterView](t, base+"/v1/cluster", bearer)
	if len(view.Nodes) != 1 {
		t.Errorf("cluster after GET/HEAD of node routes: %+v", view.Nodes)
	}
}

// v1Routes returns the patterns of every /v1 route registered in this package's non-test
// source: the string literal first argument of each call of a function named HandleFunc, Handle
// or handle.
func v1Routes(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			var fn string
			switch f := call.Fun.(type) {
			case *ast.SelectorExpr:
				fn = f.Sel.Name
			case *ast.Ident:
				fn = f.Name
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if (fn != "HandleFunc" && fn != "Handle" && fn != "handle") || !ok || lit.Kind != token.STRING {
				return true
			}
			p, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatal(err)
			}
			if _, path, ok := strings.Cut(p, " "); strings.HasPrefix(p, "/v1/") && p != "/v1/" || ok && strings.HasPrefix(path, "/v1/") {
				routes = append(routes, p)
			}
			return true
		})
	}
	return routes
}

// TestAdminRefusalClosesConnection: a request without the token that announces a body and sends
// only its first byte (the audit's flood, issue #21) is answered 401 and its connection closed at
// once, the body unread; before, the server read on for the rest of the body to keep the
// connection alive, for as long as the caller trickled it. With the token, a body over
// admin.MaxBody is refused 413 too_large, unread, and the connection closed.
func TestAdminRefusalClosesConnection(t *testing.T) {
	ts := startServer(t, nil)
	for _, c := range []struct {
		auth, code string
		length     int
		status     int
	}{
		{"", adminapi.CodeUnauthenticated, 200000, http.StatusUnauthorized},
		{"Authorization: Bearer " + ts.AdminToken() + "\r\n", adminapi.CodeTooLarge, admin.MaxBody + 1, http.StatusRequestEntityTooLarge},
	} {
		conn, err := net.Dial("tcp", ts.AdminAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /v1/users/alice/reset HTTP/1.1\r\nHost: syncd\r\nContent-Type: application/json\r\n%s"+
			"Content-Length: %d\r\n\r\n{", c.auth, c.length)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		raw, err := io.ReadAll(conn) // up to the server's close
		if err != nil {
			t.Fatalf("HTTP %d case: the connection was not closed within 5 s (%v), after %q", c.status, err, raw)
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
		if err != nil {
			t.Fatalf("HTTP %d case: %v in %q", c.status, err, raw)
		}
		var e adminapi.OpsError
		if json.NewDecoder(resp.Body).Decode(&e); resp.StatusCode != c.status || e.Code != c.code {
			t.Errorf("answered HTTP %d %q, want %d %s", resp.StatusCode, e.Code, c.status, c.code)
		}
		t.Logf("HTTP %d, connection closed after %v", resp.StatusCode, time.Since(start).Round(time.Millisecond))
	}
}
