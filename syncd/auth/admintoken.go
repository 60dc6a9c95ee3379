package auth

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/syncd-dev/syncd/raftstore/nodecert"
	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// adminTokenBytes is how many random bytes LoadOrCreateAdminToken puts in a new admin token.
const adminTokenBytes = 32

// LoadOrCreateAdminToken returns the admin API's bearer token kept in dir/admin.token
// (adminapi.TokenFile). If the file does not exist it creates dir (0700) if needed and the file:
// 32 bytes from crypto/rand as 64 hex digits and a newline, mode 0600, created atomically and only
// if absent (as LoadOrCreateSecret does), so two processes starting together end up with the same
// token. An existing file that adminapi.ReadToken refuses is an error saying what to do; it is
// never overwritten. Safe to call concurrently, also from several processes.
func LoadOrCreateAdminToken(dir string) (string, error) {
	path := filepath.Join(dir, adminapi.TokenFile)
	tok, err := adminapi.ReadToken(path)
	if !errors.Is(err, fs.ErrNotExist) {
		if err != nil {
			return "", fmt.Errorf("syncd: %w; or delete it, and syncd creates a new one on its next start", err)
		}
		return tok, nil
	}
	raw := make([]byte, adminTokenBytes)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("syncd: generate admin token: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("syncd: create admin token: %w", err)
	}
	tok = hex.EncodeToString(raw)
	created, err := nodecert.WriteFileAtomic(path, []byte(tok+"\n"), 0o600, true)
	if err != nil {
		return "", fmt.Errorf("syncd: create admin token: %w", err)
	}
	if !created { // another process won the race: use its token
		if tok, err = adminapi.ReadToken(path); err != nil {
			return "", fmt.Errorf("syncd: %w", err)
		}
	}
	return tok, nil
}
