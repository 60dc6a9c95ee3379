package testkit

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// httpClient keeps no idle connections, so nothing lingers after a test (goroutine leak checks)
// and a restarted server is never asked over a connection to its previous run.
var httpClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// A RequestOption adjusts a request of HTTP or GetJSON before it is sent.
type RequestOption func(*http.Request)

// Bearer presents token in the Authorization header, as a syncd node's admin API requires
// (its admin token: syncd.Server.AdminToken).
func Bearer(token string) RequestOption {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }
}

// Header sets a request header, e.g. the Origin a browser would send.
func Header(key, value string) RequestOption {
	return func(r *http.Request) { r.Header.Set(key, value) }
}

// Body gives the request a body of type contentType, e.g. what an HTML form posts.
func Body(contentType, body string) RequestOption {
	return func(r *http.Request) {
		r.Body, r.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
		r.Header.Set("Content-Type", contentType)
	}
}

// HTTP sends a request (GET, POST, DELETE…), body-less unless opts give one, and returns the
// status code and the body. It fails t if no answer comes.
func HTTP(t testing.TB, method, url string, opts ...RequestOption) (int, string) {
	t.Helper()
	resp, body := HTTPResponse(t, method, url, opts...)
	return resp.StatusCode, body
}

// HTTPResponse is HTTP returning the whole response (its body already read and closed), for
// tests of headers.
func HTTPResponse(t testing.TB, method, url string, opts ...RequestOption) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range opts {
		o(req)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// GetJSON GETs url (the request adjusted by opts) and decodes its JSON body (also when the status
// is not 200) into a fresh T; it fails t if the body is not JSON.
func GetJSON[T any](t testing.TB, url string, opts ...RequestOption) (T, int) {
	t.Helper()
	var v T
	code, body := HTTP(t, http.MethodGet, url, opts...)
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("GET %s: HTTP %d, body %q is not JSON: %v", url, code, body, err)
	}
	return v, code
}

// Metric returns the value of one series (its name and labels as /metrics writes them, e.g.
// `syncd_client_gaps_total`) from the /metrics page of the admin server at addr, failing the test
// if the page or the series is missing.
func Metric(t testing.TB, addr, series string) string {
	t.Helper()
	code, body := HTTP(t, "GET", "http://"+addr+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	t.Fatalf("/metrics has no %s", series)
	return ""
}
