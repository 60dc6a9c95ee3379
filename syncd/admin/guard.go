package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"mime"
	"net/http"
	"strings"

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
//     its length leak through timing.
//
// The token alone already stops a browser (a page cannot add an Authorization header to a
// request without a preflight the server does not answer); the browser checks make that a
// second, independent barrier, also for open paths. Refusals are not logged: anyone who can
// reach the port could fill the log.
type guard struct {
	next        http.Handler
	digest      [sha256.Size]byte // of the token
	tokenFile   string            // where the token is, for the 401's hint
	metricsAuth bool
}

func newGuard(next http.Handler, token, tokenFile string, metricsAuth bool) *guard {
	return &guard{next: next, digest: sha256.Sum256([]byte(token)), tokenFile: tokenFile, metricsAuth: metricsAuth}
}

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
	if why := crossOrigin(r); why != "" {
		writeOpsError(w, http.StatusForbidden, adminapi.CodeCrossOrigin, why,
			"the admin API serves no web pages: call it from syncctl or curl, which send no Origin header")
		return
	}
	if why := formBody(r); why != "" {
		writeOpsError(w, http.StatusUnsupportedMediaType, adminapi.CodeUnsupportedMediaType, why,
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
			writeOpsError(w, http.StatusUnauthorized, adminapi.CodeUnauthenticated, why,
				"send \"Authorization: Bearer <token>\" with the token in "+g.tokenFile+" on the node; syncctl reads it with "+
					"-data-dir <the node's data dir>, -admin-token-file <file> or $"+adminapi.TokenEnv)
			return
		}
	}
	g.next.ServeHTTP(w, r)
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
