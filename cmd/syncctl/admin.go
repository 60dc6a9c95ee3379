package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// adminFlags are the flags of the operator commands that talk to a node's admin HTTP server.
// That server is on loopback unless exposed on purpose, so these commands need no token.
type adminFlags struct {
	addr    *string
	timeout *time.Duration
}

func (a *adminFlags) register(f *flag.FlagSet) {
	a.addr = f.String("admin", adminapi.DefaultAddr, "the node's admin HTTP address (syncd -admin), host:port or URL")
	a.timeout = f.Duration("timeout", 10*time.Second, "HTTP timeout")
}

// base returns the admin server's URL without a trailing slash.
func (a *adminFlags) base() string {
	base := strings.TrimSuffix(*a.addr, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return base
}

// call sends a body-less request to path on the admin server and decodes a 2xx JSON answer into
// out (if not nil). A non-2xx answer becomes an *adminError carrying the server's code and hint.
func (a *adminFlags) call(ctx context.Context, method, path string, out any) error {
	ctx, cancel := withTimeout(ctx, *a.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.base()+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return &adminError{Message: err.Error(), Hint: fmt.Sprintf("is syncd running with -admin %s? check -admin", *a.addr)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		ae := &adminError{Status: resp.StatusCode}
		if json.Unmarshal(body, ae) != nil || ae.Message == "" {
			ae.Message = strings.TrimSpace(string(body))
		}
		return ae
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s %s: unexpected answer: %w", method, path, err)
	}
	return nil
}

// adminError is an admin endpoint's error answer (adminapi.OpsError), or a failure to reach it.
type adminError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Hint    string `json:"hint"`
}

func (e *adminError) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("%s (HTTP %d): %s", e.Code, e.Status, e.Message)
	}
	return e.Message
}

// reportAdmin prints err and, for an admin error with a hint, what to do.
func (e *env) reportAdmin(cmd string, err error) {
	e.errorf(cmd, "%v", err)
	if ae, ok := err.(*adminError); ok && ae.Hint != "" {
		fmt.Fprintf(e.stderr, "  what to do: %s\n", ae.Hint)
	}
}
