package test

import (
	"bufio"
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/test/testkit"
)

// unitFile is the systemd unit the project ships (docs/OPERATIONS.md, "Running under systemd").
const unitFile = "../cmd/syncd/deploy/syncd.service"

// TestSystemdUnit: the shipped unit passes systemd-analyze verify (with its binary at a real
// path) and its offline security review scores at most 2.0 ("OK"); and its ExecStart, run with
// an EnvironmentFile of SYNCD_* settings as systemd would run it, starts a node that serves
// /readyz and stops cleanly (exit 0) on the unit's KillSignal within its TimeoutStopSec.
func TestSystemdUnit(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze on PATH")
	}
	unit, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	bin := buildServer(t)
	dir := t.TempDir()
	local := filepath.Join(dir, "syncd.service")
	if err := os.WriteFile(local, bytes.ReplaceAll(unit, []byte("/usr/local/bin/syncd"), []byte(bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", local).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	if out, err := exec.Command(analyze, "security", "--offline=yes", local).CombinedOutput(); err == nil {
		m := regexp.MustCompile(`Overall exposure level for syncd\.service: ([0-9.]+)`).FindSubmatch(out)
		if m == nil {
			t.Errorf("systemd-analyze security printed no exposure level:\n%s", out)
		} else if level, _ := strconv.ParseFloat(string(m[1]), 64); level > 2.0 {
			t.Errorf("the unit's exposure level is %.1f, want at most 2.0:\n%s", level, out)
		}
	} else {
		t.Logf("systemd-analyze security --offline is not available here: %v", err)
	}

	keys := unitKeys(t, unit)
	execStart := strings.Fields(keys["ExecStart"])
	if len(execStart) == 0 || execStart[0] != "/usr/local/bin/syncd" {
		t.Fatalf("ExecStart = %q", keys["ExecStart"])
	}
	data := filepath.Join(dir, "var-lib-syncd")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	args := execStart[1:]
	for i, a := range args {
		if a == "/var/lib/syncd" {
			args[i] = data
		}
	}
	admin := testkit.FreeAddr(t)
	env := []string{"SYNCD_LISTEN=" + testkit.FreeAddr(t), "SYNCD_ADMIN=" + admin, "SYNCD_RAFT_ADDR=" + testkit.FreeAddr(t),
		"SYNCD_WEB_LISTEN=", "SYNCD_LOG_LEVEL=warn"}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	testkit.WaitTrue(t, 60*time.Second, "the unit's node to serve /readyz", func() bool {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if keys["KillSignal"] != "SIGTERM" {
		t.Fatalf("KillSignal = %q, want SIGTERM (the graceful stop)", keys["KillSignal"])
	}
	stopTimeout, err := time.ParseDuration(strings.TrimSuffix(keys["TimeoutStopSec"], "s") + "s")
	if err != nil {
		t.Fatalf("TimeoutStopSec = %q: %v", keys["TimeoutStopSec"], err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the node exited with %v on SIGTERM, want 0:\n%s", err, log.String())
		}
	case <-time.After(stopTimeout):
		_ = cmd.Process.Kill()
		t.Fatalf("the node did not stop within TimeoutStopSec (%v):\n%s", stopTimeout, log.String())
	}
}

// unitKeys returns the Key=value lines of a unit file (the last of each key wins).
func unitKeys(t *testing.T, unit []byte) map[string]string {
	t.Helper()
	keys := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(unit))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("unit line %q is not Key=value", line)
		}
		keys[k] = v
	}
	return keys
}
