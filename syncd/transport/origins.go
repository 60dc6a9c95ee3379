package transport

import (
	"fmt"
	"net/url"
	"strings"
)

// DefaultOrigins are the page origins a node accepts when its operator names none: pages served
// from the loopback host, on any port — a developer's own machine. A page of any other site is
// refused: a site cannot claim a loopback origin, since the browser sets Origin.
var DefaultOrigins = []string{
	"http://localhost:*", "https://localhost:*",
	"http://127.0.0.1:*", "https://127.0.0.1:*",
	"http://[::1]:*", "https://[::1]:*",
}

// Origins is an allow-list of page origins (PROTOCOL §2.3). Each entry is an origin as a browser
// sends it — scheme://host, with :port unless it is the scheme's default — where the port may be
// "*" (any port), or the single entry "*" (any origin, for a node behind a gateway that checks
// them itself).
type Origins struct {
	any     bool
	exact   map[string]bool // scheme://host[:port]
	anyPort map[string]bool // scheme://host
}

// ParseOrigins parses an allow-list, reporting the first entry that is not an origin.
func ParseOrigins(list []string) (*Origins, error) {
	o := &Origins{exact: map[string]bool{}, anyPort: map[string]bool{}}
	for _, e := range list {
		if e == "*" {
			o.any = true
			continue
		}
		if base, ok := strings.CutSuffix(e, ":*"); ok {
			if _, err := parseOrigin(base); err != nil {
				return nil, fmt.Errorf("allowed origin %q: %w", e, err)
			}
			o.anyPort[strings.ToLower(base)] = true
			continue
		}
		norm, err := parseOrigin(e)
		if err != nil {
			return nil, fmt.Errorf("allowed origin %q: %w", e, err)
		}
		o.exact[norm] = true
	}
	return o, nil
}

// parseOrigin checks that s is scheme://host[:port] and nothing more, and returns it in lower
// case.
func parseOrigin(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("the scheme must be http or https, as in https://app.example.com")
	}
	if u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("an origin is scheme://host[:port] and nothing more, as in https://app.example.com")
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), nil
}

// Allow reports whether a page of origin may connect. A request without Origin does not come
// from a page: the token authenticates it, and there is no page to protect.
func (o *Origins) Allow(origin string) bool {
	if origin == "" || o.any {
		return true
	}
	norm, err := parseOrigin(origin)
	if err != nil {
		return false
	}
	if o.exact[norm] {
		return true
	}
	u, _ := url.Parse(norm)
	return o.anyPort[u.Scheme+"://"+strings.ToLower(hostOnly(u.Host))]
}

// hostOnly is host:port without its port ([::1]:80 → [::1]).
func hostOnly(hostport string) string {
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 && !strings.HasSuffix(hostport, "]") {
		return hostport[:i]
	}
	return hostport
}
