// Package browser runs the TypeScript SDK's journeys (client/js/e2e) in real Chromium and
// Firefox against real syncd processes, as part of go test ./...: it builds syncd and syncctl,
// compiles the SDK and the harness, and runs them with Node. It skips, saying how to set up, on
// a machine without Node, the browsers or the npm packages; CI sets them up (.ci/run).
package browser

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// js is the TypeScript SDK's folder.
const js = "../../client/js"

const setup = "apt-get install -y chromium firefox-esr && (cd client/js && npm ci) && (cd client/js/e2e && npm ci)"

func TestBrowserJourneys(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the browser journeys take minutes")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("no node on PATH; to run the browser journeys: %s", setup)
	}
	for _, need := range []string{"/usr/bin/chromium", filepath.Join(js, "node_modules"), filepath.Join(js, "e2e", "node_modules")} {
		if _, err := os.Stat(need); err != nil {
			t.Skipf("%s is missing; to run the browser journeys: %s", need, setup)
		}
	}
	bin := t.TempDir()
	for _, cmd := range []string{"syncd", "syncctl"} {
		run(t, "../..", "go", "build", "-o", filepath.Join(bin, cmd), "./cmd/"+cmd)
	}
	run(t, js, "npm", "run", "--silent", "build")
	run(t, filepath.Join(js, "e2e"), "npm", "run", "--silent", "build")

	cmd := exec.Command(node, "build/run.js")
	cmd.Dir = filepath.Join(js, "e2e")
	cmd.Env = append(os.Environ(), "SYNCD_BIN="+filepath.Join(bin, "syncd"), "SYNCCTL_BIN="+filepath.Join(bin, "syncctl"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		t.Log(lines.Text()) // one line per journey run, as it ends
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the browser journeys failed (%v): see the FAIL lines above", err)
	}
}

// run runs a command in dir, failing the test with its output if it fails.
func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
