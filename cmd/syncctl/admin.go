package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// defaultDataDir is where syncd keeps its data with no flags, and so where syncctl looks for
// what a local syncd created there (token.key, tls.crt, admin.token).
const defaultDataDir = "./syncd-data"

// adminFlags are the flags of the operator commands that talk to a node's admin HTTP server,
// which needs the node's admin token for everything but health and (by default) metrics. The
// token comes from -admin-token-file, else <-data-dir>/admin.token if -data-dir is given, else
// $SYNCD_ADMIN_TOKEN, else ./syncd-data/admin.token, which is where a local syncd on its defaults
// creates it: on one machine the commands need no flag at all.
type adminFlags struct {
	fs        *flag.FlagSet
	addr      *string
	timeout   *time.Duration
	dataDir   *string
	tokenFile *string

	resolved bool
	token    string       // "" if none was found
	source   string       // where token came from, for messages
	streams  *http.Client // get's client, made once: connections are reused across a backup's shards
}

func (a *adminFlags) register(f *flag.FlagSet) {
	a.fs = f
	a.addr = f.String("admin", adminapi.DefaultAddr, "the node's admin HTTP address (syncd -admin), host:port or URL")
	a.timeout = f.Duration("timeout", 10*time.Second, "HTTP timeout")
	a.dataDir = f.String("data-dir", defaultDataDir, "the node's data directory, to read its admin token ("+adminapi.TokenFile+") from")
	a.tokenFile = f.String("admin-token-file", "", "`file` holding the node's admin token (default: <data-dir>/"+adminapi.TokenFile+
		" if -data-dir is given, else $"+adminapi.TokenEnv+", else "+defaultDataDir+"/"+adminapi.TokenFile+")")
}

// Base returns the admin server's URL without a trailing slash.
func (a *adminFlags) Base() string {
	base := strings.TrimSuffix(*a.addr, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return base
}

// resolveToken finds the admin token once: -admin-token-file, a -data-dir given on the command
// line, $SYNCD_ADMIN_TOKEN, then the default data directory. A file or value that is named but
// cannot be used is an error; no token at all is not (the server then says 401 and the error
// names the options).
func (a *adminFlags) resolveToken() error {
	if a.resolved {
		return nil
	}
	a.resolved = true
	dataDirGiven := false
	a.fs.Visit(func(f *flag.Flag) { dataDirGiven = dataDirGiven || f.Name == "data-dir" })
	path := filepath.Join(*a.dataDir, adminapi.TokenFile)
	env := os.Getenv(adminapi.TokenEnv)
	switch {
	case *a.tokenFile != "":
		tok, err := adminapi.ReadToken(*a.tokenFile)
		if err != nil {
			return &adminError{Message: err.Error(), Hint: "-admin-token-file names a copy of the node's " + adminapi.TokenFile + " (or the file syncd -admin-token-file names)"}
		}
		a.token, a.source = tok, "-admin-token-file "+*a.tokenFile
	case !dataDirGiven && env != "":
		tok, err := adminapi.ParseToken(env)
		if err != nil {
			return &adminError{Message: "$" + adminapi.TokenEnv + ": " + err.Error(), Hint: "set it to the content of the node's " + adminapi.TokenFile + ", or unset it"}
		}
		a.token, a.source = tok, "$"+adminapi.TokenEnv
	default:
		tok, err := adminapi.ReadToken(path)
		switch {
		case errors.Is(err, fs.ErrNotExist) && !dataDirGiven:
			return nil // a local syncd on its defaults is not here
		case err != nil:
			return &adminError{Message: err.Error(), Hint: "point -data-dir at the node's data directory, readable by you, or pass -admin-token-file"}
		}
		a.token, a.source = tok, path
	}
	return nil
}

// send sends a body-less request for path to the admin server, with the admin token if one was
// found, and returns the status and (at most 64 MiB of) the body. Failing to reach the server is
// an *adminError saying what to check.
func (a *adminFlags) send(ctx context.Context, method, path string) (int, []byte, error) {
	if err := a.resolveToken(); err != nil {
		return 0, nil, err
	}
	ctx, cancel := withTimeout(ctx, *a.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.Base()+path, nil)
	if err != nil {
		return 0, nil, err
	}
	if a.token != "" {
		adminapi.Authorize(req, a.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, &adminError{Message: err.Error(), Hint: fmt.Sprintf("is syncd running with -admin %s? check -admin", *a.addr)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp.StatusCode, body, nil
}

// Call sends a body-less request to path on the admin server and decodes a 2xx JSON answer into
// out (if not nil). A non-2xx answer becomes an *adminError carrying the server's code and hint.
func (a *adminFlags) Call(ctx context.Context, method, path string, out any) error {
	status, body, err := a.send(ctx, method, path)
	if err != nil {
		return err
	}
	if status/100 != 2 {
		return a.answerError(status, body)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s %s: unexpected answer: %w", method, path, err)
	}
	return nil
}

// answerError turns a non-2xx answer into an *adminError. For a 401 the hint says which token
// was sent, if any, and where syncctl finds one.
func (a *adminFlags) answerError(status int, body []byte) *adminError {
	ae := &adminError{Status: status}
	if json.Unmarshal(body, ae) != nil || ae.Message == "" {
		ae.Message = strings.TrimSpace(string(body))
	}
	if status == http.StatusUnauthorized {
		where := fmt.Sprintf("pass -data-dir <the node's data directory> (syncctl reads its %s), -admin-token-file <a copy of it>, "+
			"or set %s to its content", adminapi.TokenFile, adminapi.TokenEnv)
		if a.token == "" {
			ae.Hint = fmt.Sprintf("syncctl found no admin token (no -admin-token-file, no $%s, no %s): %s",
				adminapi.TokenEnv, filepath.Join(*a.dataDir, adminapi.TokenFile), where)
		} else {
			ae.Hint = fmt.Sprintf("the node at %s refused the admin token from %s, which is another node's or stale: %s",
				*a.addr, a.source, where)
		}
	}
	return ae
}

// adminError is an admin endpoint's error answer (adminapi.OpsError), or a failure to reach it.
type adminError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Hint    string `json:"hint"`
}

// OpsCode is the server's error code ("" when the server was not reached): adminapi.TakeBackup
// asks again after an answer that a shard's leader is changing.
func (e *adminError) OpsCode() string { return e.Code }

func (e *adminError) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("%s (HTTP %d): %s", e.Code, e.Status, e.Message)
	}
	return e.Message
}

// reportAdmin prints err and, for an admin error with a hint (a server's answer, or
// adminapi.TakeBackup's own finding), what to do.
func (e *env) reportAdmin(cmd string, err error) {
	e.errorf(cmd, "%v", err)
	var hint string
	if ae := (*adminError)(nil); errors.As(err, &ae) {
		hint = ae.Hint
	} else if oe := (*adminapi.OpsError)(nil); errors.As(err, &oe) {
		hint = oe.Hint
	}
	if hint != "" {
		fmt.Fprintf(e.stderr, "  what to do: %s\n", hint)
	}
}
