package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// guard is what every admin request passes before it reaches an endpoint:
//
//  1. Requests from web pages are refused (403 cross_origin): one with an Origin header other than
//     this server's own (http://<Host>), "null" included, or with Sec-Fetch-Site cross-site or
//     same-site (another port of the same host is same-site). A request that may change state
//     (any method but GET, HEAD and OPTIONS) with a body type an HTML form can send without a
//     CORS preflight — application/x-www-form-urlencoded, multipart/form-data, text/plain — or an
//     unreadable Content-Type is refused too (415 unsupported_media_type). The admin API serves no
//     browser pages, and these are what a page can make a browser send to a loopback port.
//  2. Every path but /healthz, /readyz and (unless metricsAuth) /metrics needs the admin token as
//     "Authorization: Bearer <token>" (401 unauthenticated, with a WWW-Authenticate challenge).
//     The comparison is of SHA-256 digests in constant time, so neither the token's bytes nor
//     its length leak through timing. The hint says where operators find the token without
//     naming any path of the node: the 401 goes to whoever asks.
//  3. A body beyond MaxBody is refused (413 too_large) unread; a smaller one can be read only up
//     to MaxBody.
//
// The guard reads no body, so a caller without the token never gets one read, and every refusal
// closes the connection at once (refuse) instead of letting net/http drain the unread body: a
// body trickled a byte at a time used to hold its connection, and its file descriptor, for as
// long as the caller liked (issue #21). Every request also gets its
// write deadline here (WriteTimeout; a pprof profile or trace its ?seconds more).
//
// The token alone already stops a browser (a page cannot add an Authorization header to a
// request without a preflight the server does not answer); the browser checks make that a
// second, independent barrier, also for open paths. Refusals are not logged: anyone who can
// reach the port could fill the log.
type guard struct {
	next        http.Handler
	digest      [sha256.Size]byte // of the token
	metricsAuth bool
}

func newGuard(next http.Handler, token string, metricsAuth bool) *guard {
	return &guard{next: next, digest: sha256.Sum256([]byte(token)), metricsAuth: metricsAuth}
}

// tokenHint is the 401's hint: where an operator finds the token, in terms that name no path.
const tokenHint = "send \"Authorization: Bearer <token>\" with the node's admin token: the content of " + adminapi.TokenFile +
	" in its data directory, or of the file its -admin-token-file names; syncctl reads it with -data-dir <the node's data dir>, " +
	"-admin-token-file <file> or $" + adminapi.TokenEnv

// open reports whether path is served without the token.
func (g *guard) open(path string) bool {
	switch path {
	case "/healthz", "/readyz":
		return true
	case "/metrics":
		return !g.metricsAuth
	}
	return false
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(writeTime(r)))
	if why := crossOrigin(r); why != "" {
		refuse(w, http.StatusForbidden, adminapi.CodeCrossOrigin, why,
			"the admin API serves no web pages: call it from syncctl or curl, which send no Origin header")
		return
	}
	if why := formBody(r); why != "" {
		refuse(w, http.StatusUnsupportedMediaType, adminapi.CodeUnsupportedMediaType, why,
			"send no body (every operator endpoint takes its arguments in the URL), or a JSON one")
		return
	}
	if !g.open(r.URL.Path) {
		if why := g.unauthenticated(r); why != "" {
			challenge := `Bearer realm="syncd admin"`
			if r.Header.Get("Authorization") != "" {
				challenge += `, error="invalid_token"`
			}
			w.Header().Set("WWW-Authenticate", challenge)
			refuse(w, http.StatusUnauthorized, adminapi.CodeUnauthenticated, why, tokenHint)
			return
		}
	}
	if r.ContentLength > MaxBody {
		refuse(w, http.StatusRequestEntityTooLarge, adminapi.CodeTooLarge,
			"the request body of "+strconv.FormatInt(r.ContentLength, 10)+" bytes is over "+strconv.Itoa(MaxBody),
			"send no body: every operator endpoint takes its arguments in the URL")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
	g.next.ServeHTTP(w, r)
}

// refuse answers a request the guard refuses and has the connection closed after the answer, its
// body unread. "Connection: close" alone does not do it: net/http still reads up to 256 KiB of an
// unread body once the handler returns (to find the trailers), at the caller's pace; a read
// deadline already passed ends that read at once.
func refuse(w http.ResponseWriter, status int, code, msg, hint string) {
	w.Header().Set("Connection", "close")
	writeOpsError(w, status, code, msg, hint)
	http.NewResponseController(w).SetReadDeadline(time.Now())
}

// writeTime is how long the server may take to write r's response: WriteTimeout, and for pprof's
// profile and trace, which run for ?seconds=N (default 30 s and 1 s), N more. pprof refuses a
// duration beyond a server-wide WriteTimeout, which is why the server sets none.
func writeTime(r *http.Request) time.Duration {
	switch r.URL.Path {
	case "/debug/pprof/profile", "/debug/pprof/trace":
		sec, err := strconv.ParseFloat(r.URL.Query().Get("seconds"), 64)
		if err != nil || sec <= 0 {
			sec = 30
		}
		return WriteTimeout + time.Duration(min(sec, 3600)*float64(time.Second))
	}
	return WriteTimeout
}

// unauthenticated returns why r does not carry the admin token, or "".
func (g *guard) unauthenticated(r *http.Request) string {
	h := r.Header.Values("Authorization")
	if len(h) == 0 {
		return "this endpoint needs the node's admin token, and the request has no Authorization header"
	}
	scheme, tok, ok := strings.Cut(h[0], " ")
	if len(h) > 1 || !ok || !strings.EqualFold(scheme, "Bearer") {
		return "the Authorization header is not one \"Bearer <token>\""
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	if subtle.ConstantTimeCompare(got[:], g.digest[:]) != 1 {
		return "the admin token is not this node's"
	}
	return ""
}

// crossOrigin returns why r comes from a web page of another origin, or "".
func crossOrigin(r *http.Request) string {
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return "the request comes from a web page of another site (Sec-Fetch-Site: " + site + ")"
	}
	if o, ok := r.Header["Origin"]; ok && (len(o) != 1 || !strings.EqualFold(o[0], "http://"+r.Host)) {
		return "the request comes from a web page of another origin (Origin: " + strings.Join(o, ", ") + ")"
	}
	return ""
}

// formBody returns why r is a state-changing request with a body type HTML forms send, or "".
func formBody(r *http.Request) string {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return ""
	}
	ct, ok := r.Header["Content-Type"]
	if !ok || len(ct) == 1 && strings.TrimSpace(ct[0]) == "" {
		return ""
	}
	mt, _, err := mime.ParseMediaType(strings.Join(ct, ","))
	// What a browser takes for a form type may not parse here: refuse what does not parse.
	if len(ct) > 1 || err != nil {
		return "the request's Content-Type " + strings.Join(ct, ", ") + " cannot be read"
	}
	switch mt {
	case "application/x-www-form-urlencoded", "multipart/form-data", "text/plain":
		return "a " + r.Method + " with Content-Type " + mt + " (what an HTML form sends) is refused"
	}
	return ""
}
