package buildinfo

import (
	"runtime"
	"strings"
	"testing"
)

// TestGet: a test binary has no release version set, so it reports the module's or "devel",
// and the Go release that runs it.
func TestGet(t *testing.T) {
	info := Get()
	if info.Version == "" || info.GoVersion != runtime.Version() {
		t.Fatalf("Get() = %+v, want a version and Go %s", info, runtime.Version())
	}
	if s := info.String(); !strings.HasPrefix(s, info.Version+" (") || !strings.Contains(s, runtime.Version()) {
		t.Errorf("String() = %q", s)
	}
}

// TestLinkerVersion: a version set by the linker wins, and the commit is shortened.
func TestLinkerVersion(t *testing.T) {
	defer func(v string) { version = v }(version)
	version = "v9.8.7"
	if got := Get().Version; got != "v9.8.7" {
		t.Errorf("Get().Version = %q, want the linker's v9.8.7", got)
	}
	i := Info{Version: "v1.0.0", Revision: "3f2a9c1d0e4b5a6978", Modified: true, GoVersion: "go1.26.0"}
	if got, want := i.String(), "v1.0.0 (commit 3f2a9c1d0e4b with local changes, go1.26.0)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
