// Package buildinfo says which build of syncd is running: its version, the commit it was built
// from and the Go release that built it. syncd -version and syncctl -version print it, syncd
// logs it at start and exports it as the syncd_build_info metric, so an operator can tell
// which nodes of a cluster run what during a rolling upgrade.
//
// A release build sets the version with the linker:
//
//	go build -ldflags "-X github.com/syncd-dev/syncd/syncd/buildinfo.version=v0.7.0" ./cmd/syncd
//
// Without it the version is the module's (a `go install …@v0.7.0` build) or "devel", and the
// commit is the one Go stamps into a build from a git checkout.
package buildinfo

import (
	"fmt"
	"runtime/debug"
)

// version is set by the linker for a release build (see the package comment).
var version string

// Info describes one build.
type Info struct {
	Version   string // the release, e.g. "v0.7.0", or "devel"
	Revision  string // the commit built from; "" if unknown (a build outside a git checkout)
	Modified  bool   // the checkout had uncommitted changes
	GoVersion string // the Go release that built it
}

// Get returns this binary's build information.
func Get() Info {
	info := Info{Version: version}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return fill(info)
	}
	info.GoVersion = bi.GoVersion
	if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		info.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return fill(info)
}

func fill(info Info) Info {
	if info.Version == "" {
		info.Version = "devel"
	}
	return info
}

// String formats the build as one line, e.g. "v0.7.0 (commit 3f2a9c1d0e4b, go1.26.0)".
func (i Info) String() string {
	commit := "commit unknown"
	if i.Revision != "" {
		commit = "commit " + short(i.Revision)
		if i.Modified {
			commit += " with local changes"
		}
	}
	return fmt.Sprintf("%s (%s, %s)", i.Version, commit, i.GoVersion)
}

// short is the first 12 characters of a commit hash, as git prints it in logs.
func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
