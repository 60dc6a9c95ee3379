package test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/syncd-dev/syncd/"

// allowed lists, for each package, the packages of this module it may import (directly or not).
// The arrows of the design run downward only: log and proto stand alone, client sees only proto,
// and nothing imports the server, commands, benchmarks or tests — except test/testkit, the
// network fakes and wait helper every tier's tests share, which therefore imports nothing here.
var allowed = map[string][]string{
	"log":                     {},
	"proto":                   {},
	"raftstore":               {"log"},
	"test/testkit":            {},
	"raftstore/raftstoretest": {"log", "raftstore", "test/testkit"},
	"syncd/syncdtest":         {"log", "raftstore", "raftstore/raftstoretest", "proto", "syncd", "test/testkit"},
	"syncd":                   {"log", "raftstore", "proto"},
	"client":                  {"proto"},
	"bench":                   {"client", "proto"},
}

// TestDependencyDirection enforces the package map of the design with go list, so a wrong
// import fails CI instead of waiting for a reviewer.
func TestDependencyDirection(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		rules, ok := allowed[pkg]
		if !ok {
			continue // cmd/*, bench, test: may import anything
		}
		checked++
		for _, dep := range fields[1:] {
			if !strings.HasPrefix(dep, module) {
				continue
			}
			dep = strings.TrimPrefix(dep, module)
			if !contains(rules, dep) {
				t.Errorf("%s imports %s; it may import only %v from this module", pkg, dep, rules)
			}
		}
	}
	if checked < 2 {
		t.Fatalf("checked %d packages: go list output not understood", checked)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
