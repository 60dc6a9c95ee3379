package main

import (
	"strings"
	"testing"
)

func TestSyncctlResetUser(t *testing.T) {
	t.Setenv("SYNCD_TOKEN", "")
	t.Setenv("SYNCD_ADMIN_TOKEN", "")
	srv, dataDir := startServer(t)
	admin := []string{"-admin", srv.AdminAddr().String(), "-data-dir", dataDir} // the admin token is in the data dir
	alice := []string{"-addr", srv.Addr().String(), "-token", mustToken(t, dataDir, "alice", "phone"), "-data-dir", dataDir, "-store", t.TempDir()}
	if code, _, _ := syncctl(t, append([]string{"send", "-conv", "d:alice:bob", "-peer", "bob", "-body", "hi"}, alice...)...); code != 0 {
		t.Fatalf("send: exit %d", code)
	}
	// The fan-out has created alice's log: read it from another device of hers, with a store of
	// its own (the sending device's SDK may already have synced the entry into its store, and a
	// pull prints only what its store did not have).
	pullUntil(t, 1, "-addr", srv.Addr().String(), "-token", mustToken(t, dataDir, "alice", "laptop"), "-data-dir", dataDir, "-store", t.TempDir())
	if code, _, _ := syncctl(t, append([]string{"reset-user", "-user", "alice"}, admin...)...); code != exitUsage {
		t.Fatalf("reset without -yes: exit %d, want %d", code, exitUsage)
	}
	code, out, _ := syncctl(t, append([]string{"reset-user", "-user", "alice", "-yes"}, admin...)...)
	if code != 0 || !strings.HasPrefix(out, "alice: log reset, new epoch ") {
		t.Fatalf("reset: exit %d: %s", code, out)
	}
	code, _, errOut := syncctl(t, append([]string{"reset-user", "-user", "nobody", "-yes"}, admin...)...)
	if code != exitFail || !strings.Contains(errOut, "no log to reset") || !strings.Contains(errOut, "what to do") {
		t.Fatalf("reset of a user without a log: exit %d: %s", code, errOut)
	}
}
