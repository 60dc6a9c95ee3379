package auth

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/syncd-dev/syncd/syncd/adminapi"
)

func TestAdminTokenCreatedOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data") // created on demand
	tok, err := LoadOrCreateAdminToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(tok) {
		t.Fatalf("token %q is not 64 hex digits", tok)
	}
	path := filepath.Join(dir, adminapi.TokenFile)
	if raw, err := os.ReadFile(path); err != nil || string(raw) != tok+"\n" {
		t.Fatalf("file holds %q (%v), want %q", raw, err, tok+"\n")
	}
	if runtime.GOOS != "windows" {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("mode %v (%v), want 0600", fi.Mode().Perm(), err)
		}
	}
	if again, err := LoadOrCreateAdminToken(dir); err != nil || again != tok {
		t.Errorf("second call: %q, %v; want the same token", again, err)
	}
	if got, err := adminapi.ReadToken(path); err != nil || got != tok {
		t.Errorf("adminapi.ReadToken (syncctl's reader): %q, %v", got, err)
	}
	// The other secrets of the data directory are separate files.
	if other, err := LoadOrCreateAdminToken(t.TempDir()); err != nil || other == tok {
		t.Errorf("another directory's token: %q, %v", other, err)
	}
}

func TestAdminTokenConcurrentCreate(t *testing.T) {
	dir := t.TempDir()
	const n = 8
	toks := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			tok, err := LoadOrCreateAdminToken(dir)
			if err != nil {
				t.Error(err)
			}
			toks[i] = tok
		})
	}
	wg.Wait()
	for i := 1; i < n; i++ {
		if toks[i] != toks[0] {
			t.Fatalf("callers %d and 0 got different tokens", i)
		}
	}
}

func TestAdminTokenRefusesBadFile(t *testing.T) {
	for name, content := range map[string]string{
		"empty":     "",
		"short":     strings.Repeat("a", adminapi.MinTokenLen-1),
		"long":      strings.Repeat("a", adminapi.MaxTokenLen+1),
		"space":     strings.Repeat("a", 20) + " " + strings.Repeat("a", 20),
		"newline":   strings.Repeat("a", 20) + "\n" + strings.Repeat("a", 20),
		"non-ascii": strings.Repeat("é", 20),
	} {
		dir := t.TempDir()
		path := filepath.Join(dir, adminapi.TokenFile)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadOrCreateAdminToken(dir)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "delete it") ||
			!strings.Contains(err.Error(), "openssl rand -hex 32") {
			t.Errorf("%s: err %v, want a refusal naming the file and what to do", name, err)
		}
		if raw, _ := os.ReadFile(path); string(raw) != content {
			t.Errorf("%s: the bad file was changed", name)
		}
	}
	// An operator's own token in any RFC 6750 spelling, with white space around it, is fine.
	dir := t.TempDir()
	want := "Abc-._~+/" + strings.Repeat("9", 30) + "=="
	if err := os.WriteFile(filepath.Join(dir, adminapi.TokenFile), []byte("  "+want+"\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadOrCreateAdminToken(dir); err != nil || got != want {
		t.Errorf("got %q, %v; want %q", got, err, want)
	}
}
