package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// TestRestoreRefusesBadBackups: syncd restore checks the whole backup before it writes anything:
// no manifest (an interrupted backup), a manifest of another format, a shard file that does not
// match its digest, copies of which one lacks a delivery the other trimmed; each exits 1 saying why and leaves the data directory without a store. With
// no argument it prints its usage and exits 2.
func TestRestoreRefusesBadBackups(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"restore"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "usage: syncd restore") {
		t.Fatalf("restore without a backup: exit %d: %s", code, errOut.String())
	}
	write := func(dir, name string, v any) {
		t.Helper()
		b, ok := v.([]byte)
		if !ok {
			var err error
			if b, err = json.Marshal(v); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	interrupted := t.TempDir()
	write(interrupted, adminapi.ClusterStateFile, []byte(`{"shards":1}`))
	otherFormat := t.TempDir()
	write(otherFormat, adminapi.BackupManifestFile, adminapi.BackupManifest{Format: adminapi.BackupFormat + 1})
	damaged := t.TempDir()
	write(damaged, adminapi.BackupManifestFile, adminapi.BackupManifest{Format: adminapi.BackupFormat,
		Shards: []adminapi.BackupShard{{Shard: 1, Index: 5, Bytes: 3, SHA256: strings.Repeat("0", 64)}}})
	write(damaged, adminapi.ShardFile(1), []byte("abc"))
	// Two copies that each match the manifest, but shard 2's misses what shard 1's trimmed.
	stale := t.TempDir()
	sum := fmt.Sprintf("%x", sha256.Sum256([]byte("abc")))
	write(stale, adminapi.BackupManifestFile, adminapi.BackupManifest{Format: adminapi.BackupFormat, Shards: []adminapi.BackupShard{
		{Shard: 1, Index: 5, Bytes: 3, SHA256: sum, OutboxFirst: 9},
		{Shard: 2, Index: 5, Bytes: 3, SHA256: sum, OutboxFirst: 1, Marks: map[uint32]uint64{1: 7}}}})
	write(stale, adminapi.ShardFile(1), []byte("abc"))
	write(stale, adminapi.ShardFile(2), []byte("abc"))
	for _, c := range []struct{ name, dir, want string }{
		{"no manifest", interrupted, "interrupted backup"},
		{"another format", otherFormat, "backup format 2"},
		{"a damaged shard", damaged, "the backup is damaged"},
		{"copies that lost a delivery between them", stale, "the backup is inconsistent"},
	} {
		data := t.TempDir()
		out.Reset()
		errOut.Reset()
		code := run(context.Background(), []string{"restore", c.dir, "-data-dir", data, "-admin", "127.0.0.1:0", "-listen", "127.0.0.1:0"}, &out, &errOut)
		if code != 1 || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%s: exit %d, %q; want 1 and %q", c.name, code, errOut.String(), c.want)
		}
		if _, err := os.Stat(filepath.Join(data, "db")); !os.IsNotExist(err) {
			t.Errorf("%s: the data directory has a store (%v)", c.name, err)
		}
	}
}
