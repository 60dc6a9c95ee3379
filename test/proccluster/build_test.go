package proccluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestModuleRoot finds this repository from a folder inside it and refuses another module, or
// a folder in no module, with a *NotInModuleError saying why.
func TestModuleRoot(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := ModuleRoot(wd)
	if err != nil || root != filepath.Dir(filepath.Dir(wd)) {
		t.Fatalf("from %s: %q, %v", wd, root, err)
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "go.mod"), []byte("module example.com/other\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(other, "a", "b")
	if err := os.MkdirAll(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err = ModuleRoot(sub)
	var nim *NotInModuleError
	if !errors.As(err, &nim) || !strings.Contains(nim.Why, `"example.com/other"`) {
		t.Fatalf("other module: %v", err)
	}
	if _, err := Build(t.Context(), BuildConfig{Dir: t.TempDir(), Root: sub}); !errors.As(err, &nim) {
		t.Fatalf("Build in another module: %v", err)
	}
}
