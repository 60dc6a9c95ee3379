package main

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/auth"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
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

// TestSyncctlRevokeDevice: revoke-device closes the device's session and its old token is refused
// from then on (syncctl says what to do); another device of the user keeps working.
func TestSyncctlRevokeDevice(t *testing.T) {
	t.Setenv("SYNCD_TOKEN", "")
	t.Setenv("SYNCD_ADMIN_TOKEN", "")
	srv, dataDir := startServer(t)
	admin := []string{"-admin", srv.AdminAddr().String(), "-data-dir", dataDir}
	conn := func(device string) []string {
		return []string{"-addr", srv.Addr().String(), "-token", mustToken(t, dataDir, "alice", device), "-data-dir", dataDir, "-store", t.TempDir()}
	}
	phone, laptop := conn("phone"), conn("laptop")
	if code, _, _ := syncctl(t, append([]string{"send", "-conv", "d:alice:bob", "-peer", "bob", "-body", "hi"}, phone...)...); code != 0 {
		t.Fatalf("send before: exit %d", code)
	}
	if code, _, errOut := syncctl(t, append([]string{"revoke-device", "-user", "alice"}, admin...)...); code != exitUsage || !strings.Contains(errOut, "-device") {
		t.Fatalf("revoke without -device: exit %d: %s", code, errOut)
	}
	code, out, errOut := syncctl(t, append([]string{"revoke-device", "-user", "alice", "-device", "phone"}, admin...)...)
	if code != 0 || !strings.HasPrefix(out, "alice/phone: revoked") {
		t.Fatalf("revoke: exit %d: %s %s", code, out, errOut)
	}
	code, _, errOut = syncctl(t, append([]string{"send", "-conv", "d:alice:bob", "-body", "after"}, phone...)...)
	if code != exitFail || !strings.Contains(errOut, "revoked") {
		t.Fatalf("send with the revoked token: exit %d: %s", code, errOut)
	}
	if code, _, errOut := syncctl(t, append([]string{"send", "-conv", "d:alice:bob", "-body", "from the laptop"}, laptop...)...); code != 0 {
		t.Fatalf("send from another device: exit %d: %s", code, errOut)
	}
}

// TestTokenKeyFile: token -key-file signs with a key of the operator's; a server that accepts
// that key (token_keys, a key being rotated in) serves its tokens, and a key it does not hold is
// refused naming the key id.
func TestTokenKeyFile(t *testing.T) {
	t.Setenv("SYNCD_TOKEN", "")
	keys := t.TempDir()
	writeKey := func(name string, b byte) (string, []byte) {
		secret := bytes.Repeat([]byte{b}, 32)
		path := filepath.Join(keys, name)
		if err := os.WriteFile(path, []byte(hex.EncodeToString(secret)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path, secret
	}
	next, nextSecret := writeKey("next.key", 7)
	stranger, strangerSecret := writeKey("stranger.key", 9)
	var dataDir string
	srv := syncdtest.Start(t, func(c *syncd.Config) { c.Shards = 2; dataDir = c.Dir; c.TokenKeys = [][]byte{nextSecret} })
	mint := func(keyFile string) string {
		t.Helper()
		code, out, errOut := syncctl(t, "token", "-key-file", keyFile, "-user", "alice", "-device", "phone")
		if code != 0 {
			t.Fatalf("token -key-file %s: exit %d: %s", keyFile, code, errOut)
		}
		return strings.TrimSpace(out)
	}
	send := func(tok string) (int, string) {
		code, _, errOut := syncctl(t, "send", "-conv", "d:alice:bob", "-peer", "bob", "-body", "hi", "-addr", srv.Addr().String(),
			"-token", tok, "-data-dir", dataDir, "-store", t.TempDir())
		return code, errOut
	}
	if code, errOut := send(mint(next)); code != 0 {
		t.Fatalf("send with a token of the rotated-in key: exit %d: %s", code, errOut)
	}
	if code, errOut := send(mint(stranger)); code != exitFail || !strings.Contains(errOut, auth.KeyID(strangerSecret)) {
		t.Fatalf("send with a token of a key the server does not hold: exit %d: %s", code, errOut)
	}
	if code, _, errOut := syncctl(t, "token", "-key-file", filepath.Join(keys, "none.key"), "-user", "alice"); code != exitFail || !strings.Contains(errOut, "does not exist") {
		t.Fatalf("missing -key-file: exit %d: %s", code, errOut)
	}
}
