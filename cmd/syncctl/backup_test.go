package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// TestSyncctlBackup backs up a running node into a directory (a manifest naming every shard with
// its index and digest, the files matching them) and refuses a directory that is not empty, a
// missing -dir, and a node that refuses the token, each saying what to do.
func TestSyncctlBackup(t *testing.T) {
	t.Setenv("SYNCD_ADMIN_TOKEN", "")
	srv, dataDir := startServer(t)
	alice := []string{"-addr", srv.Addr().String(), "-token", mustToken(t, dataDir, "alice", "phone"), "-data-dir", dataDir, "-store", t.TempDir()}
	if code, _, _ := syncctl(t, append([]string{"send", "-conv", "d:alice:bob", "-peer", "bob", "-body", "kept"}, alice...)...); code != 0 {
		t.Fatalf("send: exit %d", code)
	}
	admin := []string{"-admin", srv.AdminAddr().String(), "-data-dir", dataDir}
	dir := filepath.Join(t.TempDir(), "b")
	code, out, errOut := syncctl(t, append([]string{"backup", "-dir", dir}, admin...)...)
	if code != 0 || !strings.Contains(out, "backed up") {
		t.Fatalf("backup: exit %d\n%s%s", code, out, errOut)
	}
	b, err := os.ReadFile(filepath.Join(dir, adminapi.BackupManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var m adminapi.BackupManifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Format != adminapi.BackupFormat || len(m.Shards) == 0 || m.MapIndex == 0 || m.Done.Before(m.Started) {
		t.Fatalf("manifest: %+v", m)
	}
	for _, s := range m.Shards {
		fi, err := os.Stat(filepath.Join(dir, adminapi.ShardFile(s.Shard)))
		if err != nil || fi.Size() != s.Bytes || len(s.SHA256) != 64 || s.Index == 0 || fi.Mode().Perm() != 0o600 {
			t.Errorf("shard %d: %+v, file %v %v", s.Shard, s, fi, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, adminapi.ClusterStateFile)); err != nil {
		t.Error(err)
	}

	if code, _, errOut := syncctl(t, append([]string{"backup", "-dir", dir}, admin...)...); code != exitFail || !strings.Contains(errOut, "not empty") {
		t.Errorf("backup into a used directory: exit %d: %s", code, errOut)
	}
	if code, _, errOut := syncctl(t, append([]string{"backup"}, admin...)...); code != exitUsage || !strings.Contains(errOut, "-dir is required") {
		t.Errorf("backup without -dir: exit %d: %s", code, errOut)
	}
	bad := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(bad, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = syncctl(t, "backup", "-admin", srv.AdminAddr().String(), "-admin-token-file", bad, "-dir", filepath.Join(t.TempDir(), "c"))
	if code != exitFail || !strings.Contains(errOut, "unauthenticated") || !strings.Contains(errOut, "what to do") {
		t.Errorf("backup with another token: exit %d: %s", code, errOut)
	}
}
