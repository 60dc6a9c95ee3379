package testkit

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"
)

// httpClient keeps no idle connections, so nothing lingers after a test (goroutine leak checks)
// and a restarted server is never asked over a connection to its previous run.
var httpClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// HTTP sends a body-less request (GET, POST, DELETE…) and returns the status code and the body.
// It fails t if no answer comes.
func HTTP(t testing.TB, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
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
	return resp.StatusCode, string(b)
}

// GetJSON GETs url and decodes its JSON body (also when the status is not 200) into a fresh T;
// it fails t if the body is not JSON.
func GetJSON[T any](t testing.TB, url string) (T, int) {
	t.Helper()
	var v T
	code, body := HTTP(t, http.MethodGet, url)
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("GET %s: HTTP %d, body %q is not JSON: %v", url, code, body, err)
	}
	return v, code
}
