package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
)

// TestSyncctlAdminToken: the operator commands find the node's admin token in -admin-token-file,
// <-data-dir>/admin.token, $SYNCD_ADMIN_TOKEN or ./syncd-data/admin.token (where a local syncd
// creates it: the README's commands need no flag), in that order; without one, or with another
// node's, the 401 is reported with the options that fix it.
func TestSyncctlAdminToken(t *testing.T) {
	t.Setenv(adminapi.TokenEnv, "")
	srv, dataDir := startServer(t)
	admin := []string{"cluster", "status", "-admin", srv.AdminAddr().String()}
	ok := func(what string, args ...string) {
		t.Helper()
		if code, out, _ := syncctl(t, append(admin, args...)...); code != 0 || !strings.Contains(out, "SHARD") {
			t.Errorf("%s: exit %d\n%s", what, code, out)
		}
	}
	refused := func(what string, want []string, args ...string) {
		t.Helper()
		code, _, errOut := syncctl(t, append(admin, args...)...)
		if code != exitFail {
			t.Errorf("%s: exit %d, want %d", what, code, exitFail)
		}
		for _, w := range want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%s: stderr does not say %q:\n%s", what, w, errOut)
			}
		}
	}
	options := []string{"what to do", "-data-dir", "-admin-token-file", adminapi.TokenEnv}

	// No token anywhere (the test runs in cmd/syncctl, which has no ./syncd-data).
	refused("no token", append([]string{"unauthenticated (HTTP 401)", "found no admin token"}, options...))
	ok("-data-dir", "-data-dir", dataDir)
	copyFile := filepath.Join(t.TempDir(), "copy.token")
	writeToken(t, copyFile, srv.AdminToken())
	ok("-admin-token-file", "-admin-token-file", copyFile)
	t.Setenv(adminapi.TokenEnv, srv.AdminToken())
	ok("$" + adminapi.TokenEnv)

	// Another node's token: refused, naming where it came from. The file wins over the variable.
	other := filepath.Join(t.TempDir(), "other.token")
	writeToken(t, other, strings.Repeat("ab", 32))
	refused("another node's token", append([]string{"unauthenticated", "refused the admin token from -admin-token-file " + other}, options...),
		"-admin-token-file", other)
	t.Setenv(adminapi.TokenEnv, strings.Repeat("cd", 32))
	refused("another node's token in the variable", []string{"refused the admin token from $" + adminapi.TokenEnv})
	ok("the file over the variable", "-admin-token-file", copyFile)
	ok("-data-dir over the variable", "-data-dir", dataDir)
	refused("a -data-dir without a token", []string{"does not exist", "-data-dir"}, "-data-dir", t.TempDir())
	t.Setenv(adminapi.TokenEnv, "not a token")
	refused("a malformed variable", []string{adminapi.TokenEnv, "not an admin token"})
	refused("a missing file", []string{"does not exist", "-admin-token-file"}, "-admin-token-file", filepath.Join(t.TempDir(), "none"))
	t.Setenv(adminapi.TokenEnv, "")

	// The default data directory, as in the README: syncd and syncctl run in the same directory.
	cwd := t.TempDir()
	writeToken(t, filepath.Join(cwd, "syncd-data", adminapi.TokenFile), srv.AdminToken())
	t.Chdir(cwd)
	ok("./syncd-data by default")
}

// TestSyncctlStatusMetricsAuth: against a node whose /metrics needs the admin token, status sends
// it, and says what to do without it.
func TestSyncctlStatusMetricsAuth(t *testing.T) {
	t.Setenv(adminapi.TokenEnv, "")
	var dataDir string
	srv := syncdtest.Start(t, func(c *syncd.Config) { c.Shards, c.AdminMetricsAuth, dataDir = 2, true, c.Dir })
	code, _, errOut := syncctl(t, "status", "-admin", srv.AdminAddr().String())
	if code != exitFail || !strings.Contains(errOut, "unauthenticated") || !strings.Contains(errOut, "-data-dir") {
		t.Errorf("status without the token: exit %d, stderr %q", code, errOut)
	}
	if code, out, _ := syncctl(t, "status", "-admin", srv.AdminAddr().String(), "-data-dir", dataDir); code != 0 || !strings.Contains(out, ": ready") {
		t.Errorf("status with -data-dir: exit %d\n%s", code, out)
	}
}

// writeToken writes an admin token file, creating its directory.
func writeToken(t *testing.T, path, tok string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}
