package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/buildinfo"
)

func runBackup(ctx context.Context, e *env, args []string) int {
	const cmd = "backup"
	f := newFlagSet(e, cmd, "[-admin host:port] -dir <dir>", `
Backs up the whole cluster, online, into -dir (which must not exist, or be empty): the cluster's
state (the map of shards, users' and conversations' placement, device revocations) and every data
shard's state, each as of one Raft index, read from a replica while traffic runs. Everything
acknowledged before the backup began is in it. Each shard is read from its leader's node, whose
admin address the cluster lists and which must accept the same admin token (a shared
admin_token_file). Refused while a move or split is in
progress. Its manifest.json lists each shard's index and SHA-256; restore with syncd restore
(docs/OPERATIONS.md, "Backup and restore").`, `
syncctl backup -admin 127.0.0.1:7380 -dir /var/backups/syncd/2026-12-03`)
	var admin adminFlags
	admin.register(f)
	dir := f.String("dir", "", "the `directory` to back up into (required; created if missing, refused unless empty)")
	if code, ok := parse(e, f, args); !ok {
		return code
	}
	if *dir == "" {
		fmt.Fprintln(e.stderr, "syncctl backup: -dir is required (see -h)")
		return exitUsage
	}
	m, err := adminapi.TakeBackup(ctx, &admin, *dir, buildinfo.Get().String(), func(line string) { fmt.Fprintln(e.stderr, line) })
	if err != nil {
		e.reportAdmin(cmd, err)
		return exitFail
	}
	var bytes int64
	for _, s := range m.Shards {
		bytes += s.Bytes
	}
	fmt.Fprintf(e.stdout, "backed up %d shards (%d bytes) and the cluster map (version %d) into %s in %s\n",
		len(m.Shards), bytes, m.MapIndex, *dir, m.Done.Sub(m.Started).Round(time.Millisecond))
	return exitOK
}

// Stream sends a GET for path to the admin server at base with the admin token and returns the
// response to a 2xx answer, whose body the caller reads and closes; other answers become an
// *adminError. Only the wait for the response's headers is bounded by -timeout: a shard's state
// may take longer to stream.
func (a *adminFlags) Stream(ctx context.Context, base, path string) (*http.Response, error) {
	if err := a.resolveToken(); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return nil, err
	}
	if a.token != "" {
		adminapi.Authorize(req, a.token)
	}
	if a.streams == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.ResponseHeaderTimeout = *a.timeout
		a.streams = &http.Client{Transport: tr}
	}
	resp, err := a.streams.Do(req)
	if err != nil {
		return nil, &adminError{Message: err.Error(), Hint: fmt.Sprintf("is syncd running with -admin %s?", strings.TrimPrefix(base, "http://"))}
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, a.answerError(resp.StatusCode, body)
	}
	return resp, nil
}
