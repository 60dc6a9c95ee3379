package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/test/proccluster"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestMain fails the package if a goroutine (a process waiter, an HTTP client) outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestLocalCluster runs the real thing twice on one directory: it builds syncd and syncctl,
// starts three nodes, runs the printed syncctl commands, checks the cluster view, survives a
// node killed with SIGKILL, and stops every node on cancel; the second start reuses the secret,
// the certificate and the data, with the binaries given by -syncd.
func TestLocalCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real syncd processes (and builds them): skipped with -short")
	}
	if runtime.GOOS == "windows" {
		t.Skip("localcluster signals its nodes: Unix only")
	}
	base := freeBasePort(t)
	dir := filepath.Join(t.TempDir(), "lc")

	// First start: built from the repository (the test runs in cmd/localcluster, inside it).
	lc := startLocalCluster(t, config{Dir: dir, Nodes: 3, BasePort: base, Shards: 4, ReadyTimeout: 90 * time.Second})
	info := lc.info
	if len(info.Nodes) != 3 {
		t.Fatalf("ready with %d nodes, want 3", len(info.Nodes))
	}
	for i, n := range info.Nodes {
		ip := proccluster.NodeIP(i)
		if want := fmt.Sprintf("%s:%d", ip, base+adminOffset); n.Admin != want {
			t.Errorf("%s admin %s, want %s", n.ID, n.Admin, want)
		}
		if want := fmt.Sprintf("%s:%d", ip, base); n.Client != want {
			t.Errorf("%s clients %s, want %s", n.ID, n.Client, want)
		}
	}
	adminToken, err := adminapi.ReadToken(info.AdminTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	waitClusterView(t, info.Nodes[0].Admin, adminToken, 3, 4)
	secret, err := os.ReadFile(info.SecretFile)
	if err != nil {
		t.Fatal(err)
	}

	// The printed commands work as printed: tokens, a send through n2, a pull through n3, status.
	out := lc.stdout.String()
	for _, want := range []string{info.Fingerprint, fmt.Sprintf("kill -9 %d", info.Nodes[1].PID),
		"cluster status -admin " + info.Nodes[0].Admin + " -data-dir " + dir} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	runPrintedCommands(t, out)

	// A node killed from outside is reported; the others keep running.
	victim := info.Nodes[2]
	if p, err := os.FindProcess(victim.PID); err != nil {
		t.Fatal(err)
	} else if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitTrue(t, 20*time.Second, "the kill of "+victim.ID+" to be reported", func() bool {
		return strings.Contains(lc.stderr.String(), fmt.Sprintf("%s (pid %d) exited: signal: killed", victim.ID, victim.PID))
	})
	select {
	case err := <-lc.done:
		t.Fatalf("localcluster returned after one node was killed: %v", err)
	default:
	}
	lc.stop(t)

	// Second start on the same directory: the layout, the secret, the certificate and the data
	// are reused; the binaries of the first start are given with -syncd.
	lc = startLocalCluster(t, config{Dir: dir, Syncd: filepath.Join(dir, "bin", "syncd"), ReadyTimeout: 90 * time.Second})
	if lc.info.Fingerprint != info.Fingerprint {
		t.Errorf("fingerprint %s after restart, was %s", lc.info.Fingerprint, info.Fingerprint)
	}
	if again, err := os.ReadFile(lc.info.SecretFile); err != nil || !bytes.Equal(again, secret) {
		t.Errorf("token secret changed across restarts (err %v)", err)
	}
	if !strings.Contains(lc.stdout.String(), filepath.Join(dir, "bin", "syncctl")+" token") {
		t.Errorf("with -syncd, the commands do not use the syncctl next to it:\n%s", lc.stdout.String())
	}
	if again, err := adminapi.ReadToken(lc.info.AdminTokenFile); err != nil || again != adminToken {
		t.Errorf("admin token changed across restarts (err %v)", err)
	}
	waitClusterView(t, lc.info.Nodes[1].Admin, adminToken, 3, 6) // the printed moves added two shards
	lc.stop(t)
}

// localCluster is a run of localcluster in a goroutine.
type localCluster struct {
	cancel         context.CancelFunc
	done           chan error // run's result
	info           readyInfo
	stdout, stderr *testkit.Buffer
}

// startLocalCluster runs c until its nodes are ready. If the test ends before stop, cleanup stops
// it.
func startLocalCluster(t *testing.T, c config) *localCluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	lc := &localCluster{cancel: cancel, done: make(chan error, 1), stdout: &testkit.Buffer{}, stderr: &testkit.Buffer{}}
	ready := make(chan readyInfo, 1)
	c.Stdout, c.Stderr, c.OnReady = lc.stdout, lc.stderr, func(i readyInfo) { ready <- i }
	go func() { lc.done <- run(ctx, c) }()
	t.Cleanup(func() {
		cancel()
		<-lc.done // run returns only once every node has exited
	})
	select {
	case lc.info = <-ready:
	case err := <-lc.done:
		lc.done <- err // for the cleanup
		t.Fatalf("localcluster returned before the cluster was ready: %v\nstderr:\n%s", err, lc.stderr)
	case <-time.After(4 * time.Minute): // a cold build of syncd takes a while
		t.Fatalf("localcluster not ready after 4m; stderr:\n%s", lc.stderr)
	}
	return lc
}

// stop cancels the run and checks that it returns cleanly and that no node is left.
func (lc *localCluster) stop(t *testing.T) {
	t.Helper()
	lc.cancel()
	var err error
	select {
	case err = <-lc.done:
		lc.done <- err // for the cleanup
	case <-time.After(stopGrace + 20*time.Second):
		t.Fatalf("localcluster did not return after cancel; stderr:\n%s", lc.stderr)
	}
	if err != nil {
		t.Errorf("localcluster stopped with %v; stderr:\n%s", err, lc.stderr)
	}
	for _, n := range lc.info.Nodes {
		p, err := os.FindProcess(n.PID)
		if err != nil {
			continue // not found: gone
		}
		if err := p.Signal(syscall.Signal(0)); err == nil {
			t.Errorf("%s (pid %d) is still running after localcluster returned", n.ID, n.PID)
		}
	}
}

// runPrintedCommands runs the commands localcluster printed under "Try it", up to the failover
// part, as one shell script, and checks that the message sent through one node arrives through
// another and that the cluster status answers.
func runPrintedCommands(t *testing.T, out string) {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Log("no sh: the printed commands are not run")
		return
	}
	_, block, ok := strings.Cut(out, "Try it from another terminal:")
	if !ok {
		t.Fatalf("no commands in the output:\n%s", out)
	}
	block, _, _ = strings.Cut(block, "# failover")
	block, _, _ = strings.Cut(block, "Ctrl-C")
	cmd := exec.Command(sh, "-e", "-c", block)
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the printed commands failed: %v\nscript:%s\noutput:\n%s", err, block, got)
	}
	for _, want := range []string{`"status":"sent"`, `"body":"hi bob"`, "as seen by node n1", "started", `"body":"after the moves"`} {
		if !bytes.Contains(got, []byte(want)) {
			t.Errorf("the printed commands' output lacks %s:\n%s", want, got)
		}
	}
	if n := bytes.Count(got, []byte(`"body":"hi bob"`)); n != 1 {
		t.Errorf("bob pulled \"hi bob\" %d times, want once: his second pull goes on from his cursor:\n%s", n, got)
	}
}

// waitClusterView polls GET /v1/cluster on admin, with the admin token, until it lists nodes
// reachable nodes and shards shards, each with a leader.
func waitClusterView(t *testing.T, admin, token string, nodes, shards int) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	testkit.Wait(t, 30*time.Second, "a full cluster view", func() (bool, string) {
		req, err := http.NewRequest(http.MethodGet, "http://"+admin+"/v1/cluster", nil)
		if err != nil {
			return false, err.Error()
		}
		adminapi.Authorize(req, token)
		resp, err := client.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var v adminapi.ClusterView
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			return false, err.Error()
		}
		last := fmt.Sprintf("%+v", v)
		reachable := 0
		for _, n := range v.Nodes {
			if n.Reachable {
				reachable++
			}
		}
		if reachable != nodes || len(v.Nodes) != nodes || len(v.Shards) != shards {
			return false, last
		}
		for _, s := range v.Shards {
			if s.Leader == "" {
				return false, last
			}
		}
		return true, ""
	})
}

// freeBasePort returns a base port whose ports are free on 127.0.0.1-3, away from the default
// 7300 so that a developer's cluster is left alone. It skips the test if 127.0.0.2 and .3 are
// missing (macOS without aliases).
func freeBasePort(t *testing.T) int {
	t.Helper()
	for base := 17300; base < 27300; base += 500 {
		err := checkAddrs(layout{Nodes: 3, BasePort: base})
		switch {
		case err == nil:
			return base
		case errors.Is(err, errNoLoopback):
			t.Skip(err)
		case !errors.Is(err, errInUse):
			t.Fatal(err)
		}
	}
	t.Fatal("no free base port between 17300 and 27300")
	return 0
}

// TestResolveLayout: a new directory gets the flags or the defaults, a later start the recorded
// layout; changing it, or using a directory localcluster did not create, is refused.
func TestResolveLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "lc")
	l, existing, err := resolveLayout(dir, config{Shards: 2})
	if err != nil || existing || l != (layout{Nodes: defaultNodes, BasePort: defaultBasePort, Shards: 2}) {
		t.Fatalf("new dir: %+v %v %v", l, existing, err)
	}
	if err := initDir(dir, l); err != nil {
		t.Fatal(err)
	}
	if got, existing, err := resolveLayout(dir, config{}); err != nil || !existing || got != l {
		t.Fatalf("recorded dir: %+v %v %v, want %+v", got, existing, err, l)
	}
	if _, _, err := resolveLayout(dir, config{Nodes: defaultNodes, Shards: 2}); err != nil {
		t.Fatalf("flags equal to the recorded layout: %v", err)
	}
	if _, _, err := resolveLayout(dir, config{Nodes: 5, Shards: 3}); err == nil ||
		!strings.Contains(err.Error(), "-nodes 3 -shards 2") {
		t.Fatalf("changed layout: %v", err)
	}
	foreign := t.TempDir()
	if err := os.WriteFile(filepath.Join(foreign, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := resolveLayout(foreign, config{}); err == nil || !strings.Contains(err.Error(), "not created by localcluster") {
		t.Fatalf("foreign dir: %v", err)
	}
}

// TestFindModuleRoot: outside the syncd module (here a folder in no module at all) the error
// tells the user to cd into the repository or pass -syncd. (Finding the module is
// test/proccluster's, and tested there.)
func TestFindModuleRoot(t *testing.T) {
	if _, err := findModuleRoot(t.TempDir()); err == nil || !strings.Contains(err.Error(), "-syncd") ||
		!strings.Contains(err.Error(), "syncd repository") {
		t.Fatalf("outside the module: %v", err)
	}
}

// TestBindHints: a missing loopback address is recognised as EADDRNOTAVAIL, and a node log
// showing one gets the macOS alias hint.
func TestBindHints(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("Unix errors")
	}
	// 192.0.2.1 (TEST-NET-1) is on no interface: binding it fails as 127.0.0.2 does on macOS.
	if err := tryBind("tcp", "192.0.2.1:7380"); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Errorf("bind to a missing address: %v, want EADDRNOTAVAIL", err)
	}
	if h := bindHint("listen udp 127.0.0.2:7300: bind: can't assign requested address", "127.0.0.2"); !strings.Contains(h, "sudo ifconfig lo0 alias 127.0.0.2 up") {
		t.Errorf("macOS hint: %q", h)
	}
	if h := bindHint("all fine", "127.0.0.2"); h != "" {
		t.Errorf("hint without a bind failure: %q", h)
	}
}

// TestShellQuote: printed paths are quoted only when the shell needs it.
func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/tmp/lc-try/bin/syncctl": "/tmp/lc-try/bin/syncctl",
		"/tmp/my dir":             "'/tmp/my dir'",
		"it's":                    `'it'\''s'`,
		"":                        "''",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
