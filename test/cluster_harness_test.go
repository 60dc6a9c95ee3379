package test

// The multi-process cluster harness of the fault suite: real cmd/syncd processes, each with its
// own data directory and ports, node-to-node traffic through a relayMesh (when the binary
// supports -peer-dial), and controls to kill, pause, restart and stop nodes. See
// cluster_fault_test.go for the scenarios.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/test/proccluster"
)

// clusterShards is the number of shards of a test cluster: several, so conversations and users
// are spread over shards led by different nodes.
const clusterShards = 4

// timeline records what a test did and saw, with the time since it started; every line also goes
// to the test log as it happens.
type timeline struct {
	t     *testing.T
	start time.Time

	mu    sync.Mutex
	lines []string
}

// newTimeline starts a timeline now.
func newTimeline(t *testing.T) *timeline { return &timeline{t: t, start: time.Now()} }

// add records one event.
func (tl *timeline) add(format string, args ...any) {
	tl.t.Helper()
	line := fmt.Sprintf("%7.2fs  ", time.Since(tl.start).Seconds()) + fmt.Sprintf(format, args...)
	tl.mu.Lock()
	tl.lines = append(tl.lines, line)
	tl.mu.Unlock()
	tl.t.Log(line)
}

// String returns every event, one a line.
func (tl *timeline) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return strings.Join(tl.lines, "\n")
}

// clusterNode is one syncd process of a test cluster. Its flags and data directory stay the same
// across restarts; the stderr of every run is appended to one file.
type clusterNode struct {
	id                  string
	dir                 string // data directory
	listen, raft, admin string // QUIC (clients), Raft listener, admin HTTP
	logPath             string // stderr of every run

	bin  string
	args []string
	tl   *timeline

	spare   bool // not started with the cluster: joins later with -join
	retired bool // removed from the cluster and stopped for good: never restarted

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{} // closed once the current process has been waited for; nil before start
	exitErr  error         // the current process's exit, once exited is closed
	expected bool          // the test killed or stopped the current process on purpose
	paused   bool          // SIGSTOPped
	starts   int
	surprise []string // unexpected exits, for the checker
}

// start starts the process (it must not be running).
func (n *clusterNode) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.exited != nil {
		select {
		case <-n.exited:
		default:
			return fmt.Errorf("%s is already running", n.id)
		}
	}
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	n.starts++
	fmt.Fprintf(logf, "=== harness: start #%d of %s at %s\n", n.starts, n.id, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(n.bin, n.args...)
	cmd.Stderr = logf
	cmd.Stdout = logf
	cmd.SysProcAttr = clusterProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", n.id, err)
	}
	exited := make(chan struct{})
	n.cmd, n.exited, n.expected, n.paused = cmd, exited, false, false
	go func() {
		err := cmd.Wait()
		logf.Close()
		n.mu.Lock()
		n.exitErr = err
		surprise := !n.expected
		if surprise {
			n.surprise = append(n.surprise, fmt.Sprintf("run #%d exited by itself: %v", n.starts, err))
		}
		n.mu.Unlock()
		close(exited)
		if surprise {
			n.tl.add("%s EXITED UNEXPECTEDLY: %v", n.id, err)
		}
	}()
	return nil
}

// running reports whether the process is alive (paused counts as alive).
func (n *clusterNode) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.exited == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// serving reports whether the process is alive and not paused.
func (n *clusterNode) serving() bool {
	n.mu.Lock()
	paused := n.paused
	n.mu.Unlock()
	return !paused && n.running()
}

// signal sends sig to the running process; expect marks an exit it causes as intended.
func (n *clusterNode) signal(sig syscall.Signal, expect bool) (exited chan struct{}, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return nil, fmt.Errorf("%s was never started", n.id)
	}
	if expect {
		n.expected = true
	}
	switch sig {
	case syscall.SIGSTOP:
		n.paused = true
	case syscall.SIGCONT:
		n.paused = false
	}
	return n.exited, n.cmd.Process.Signal(sig)
}

// Kill sends SIGKILL and waits for the process to be gone.
func (n *clusterNode) Kill() error {
	exited, err := n.signal(syscall.SIGKILL, true)
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-exited
	return nil
}

// Stop pauses the process (SIGSTOP): it keeps its sockets but does nothing.
func (n *clusterNode) Stop() error {
	_, err := n.signal(syscall.SIGSTOP, false)
	return err
}

// Cont resumes a paused process (SIGCONT).
func (n *clusterNode) Cont() error {
	_, err := n.signal(syscall.SIGCONT, false)
	return err
}

// Restart starts the process again on the same data directory and flags, after a Kill or
// Terminate.
func (n *clusterNode) Restart() error { return n.start() }

// Terminate asks the process to stop (SIGTERM, resuming it first if paused) and waits up to
// timeout for it to exit; a clean stop exits with status 0. After the timeout it is killed and
// the error says so.
func (n *clusterNode) Terminate(timeout time.Duration) error {
	if _, err := n.signal(syscall.SIGCONT, true); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	exited, err := n.signal(syscall.SIGTERM, true)
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-exited:
	case <-time.After(timeout):
		n.Kill()
		return fmt.Errorf("%s did not stop within %v of SIGTERM; killed", n.id, timeout)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.exitErr != nil {
		return fmt.Errorf("%s exit after SIGTERM: %v", n.id, n.exitErr)
	}
	return nil
}

// logTail returns the last lines of the node's stderr file.
func (n *clusterNode) logTail(lines int) string {
	b, err := os.ReadFile(n.logPath)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// testCluster is a cluster of syncd processes on loopback that share one token secret and one
// certificate, so a device may connect to any node with the same token and fingerprint.
type testCluster struct {
	t           *testing.T
	nodes       []*clusterNode
	mesh        *relayMesh // nil when the binary has no -peer-dial: no partitions then
	secret      []byte
	fingerprint string
	tl          *timeline
	http        *http.Client
}

// startCluster builds cmd/syncd and starts n nodes n1..n<n>, with node-to-node traffic through
// relays when the binary supports -peer-dial, and waits until every node is ready. Cleanup kills
// whatever is still running, closes the relays and, if the test failed, logs the tail of every
// node's stderr.
func startCluster(t *testing.T, n int, tl *timeline) *testCluster {
	t.Helper()
	return startClusterWithSpares(t, n, 0, tl)
}

// startClusterWithSpares is startCluster with spare nodes n<n+1>…: set up (data directory,
// relays, flags: -join through n1) but not started; a scenario starts one to have it join.
func startClusterWithSpares(t *testing.T, n, spares int, tl *timeline) *testCluster {
	t.Helper()
	bin := buildServer(t)
	base := t.TempDir()
	c := &testCluster{t: t, tl: tl,
		http: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}

	// One certificate for every node: clients pin one fingerprint whatever node they use.
	tlsDir := filepath.Join(base, "tls")
	if _, fp, err := syncd.SelfSignedCert(tlsDir, nil); err != nil {
		t.Fatal(err)
	} else {
		c.fingerprint = fp
	}
	raftAddrs := map[string]string{}
	var peers []string
	for i := range n + spares {
		id := fmt.Sprintf("n%d", i+1)
		node := &clusterNode{id: id, dir: filepath.Join(base, id), listen: raftstoretest.FreeAddr(t), raft: raftstoretest.FreeAddr(t), admin: raftstoretest.FreeAddr(t),
			logPath: filepath.Join(base, id+".log"), bin: bin, tl: tl, spare: i >= n}
		c.nodes = append(c.nodes, node)
		raftAddrs[id] = node.raft
		if !node.spare {
			peers = append(peers, id+"="+node.raft)
		}
	}
	// One token secret for every node: the file LoadOrCreateSecret creates in the first data
	// directory, copied into the others before their first start.
	secret, err := syncd.LoadOrCreateSecret(c.nodes[0].dir)
	if err != nil {
		t.Fatal(err)
	}
	c.secret = secret
	keyFile, err := os.ReadFile(filepath.Join(c.nodes[0].dir, syncd.TokenKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, node := range c.nodes[1:] {
		if err := os.MkdirAll(node.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(node.dir, syncd.TokenKeyFile), keyFile, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	if binaryHasFlag(bin, "peer-dial") {
		if c.mesh, err = newRelayMesh(raftAddrs); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Log("this syncd has no -peer-dial: nodes dial each other directly, partitions are unavailable")
	}
	for _, node := range c.nodes {
		node.args = []string{"-data-dir", node.dir, "-node-id", node.id, "-listen", node.listen,
			"-raft-addr", node.raft, "-admin", node.admin, "-shards", strconv.Itoa(clusterShards),
			"-cert", filepath.Join(tlsDir, syncd.TLSCertFile), "-key", filepath.Join(tlsDir, syncd.TLSKeyFile)}
		if node.spare {
			join := raftAddrs["n1"]
			if c.mesh != nil {
				join = c.mesh.DialMap(node.id)["n1"]
			}
			node.args = append(node.args, "-join", join)
		} else {
			node.args = append(node.args, "-peers", strings.Join(peers, ","))
		}
		if c.mesh != nil {
			var dial []string
			for to, addr := range c.mesh.DialMap(node.id) {
				dial = append(dial, to+"="+addr)
			}
			slices.Sort(dial)
			node.args = append(node.args, "-peer-dial", strings.Join(dial, ","))
		}
	}
	t.Cleanup(c.cleanup)
	for _, node := range c.nodes {
		if node.spare {
			continue
		}
		if err := node.start(); err != nil {
			t.Fatal(err)
		}
	}
	c.waitReady(60 * time.Second)
	tl.add("cluster of %d nodes ready (%s)", n, c.describeNodes())
	return c
}

// binaryHasFlag reports whether the syncd binary lists -name in its usage.
func binaryHasFlag(bin, name string) bool {
	out, _ := exec.Command(bin, "-h").CombinedOutput() // -h exits 0 or 2 depending on the version
	return bytes.Contains(out, []byte("-"+name+" ")) || bytes.Contains(out, []byte("-"+name+"\n"))
}

// cleanup kills every process still running, closes the relays and the HTTP client and, if the
// test failed, logs the timeline and the tail of every node's stderr.
func (c *testCluster) cleanup() {
	for _, n := range c.nodes {
		if n.running() {
			n.Kill()
		}
	}
	if c.mesh != nil {
		c.mesh.Close()
	}
	c.http.CloseIdleConnections()
	if c.t.Failed() {
		c.t.Logf("timeline:\n%s", c.tl)
		for _, n := range c.nodes {
			c.t.Logf("---- tail of %s's stderr (%s) ----\n%s", n.id, n.logPath, n.logTail(80))
		}
	}
}

// describeNodes lists each node's addresses.
func (c *testCluster) describeNodes() string {
	var parts []string
	for _, n := range c.nodes {
		parts = append(parts, fmt.Sprintf("%s: quic %s raft %s admin %s", n.id, n.listen, n.raft, n.admin))
	}
	return strings.Join(parts, "; ")
}

// get fetches an admin URL path of node n and returns the status and body.
func (c *testCluster) get(n *clusterNode, path string) (int, string, error) {
	return c.do(n, http.MethodGet, path)
}

// do sends a body-less request to an admin URL path of node n and returns the status and body.
func (c *testCluster) do(n *clusterNode, method, path string) (int, string, error) {
	return httpDo(c.http, method, "http://"+n.admin+path, 5*time.Second)
}

// httpDo sends a body-less request with client, bounded by timeout, and returns the status and
// body.
func httpDo(client *http.Client, method, url string, timeout time.Duration) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// ready reports whether node n answers /readyz with 200 (every shard has a known leader).
func (c *testCluster) ready(n *clusterNode) (bool, string) {
	code, body, err := c.get(n, "/readyz")
	if err != nil {
		return false, err.Error()
	}
	return code == http.StatusOK, strings.TrimSpace(body)
}

// waitReady waits until every serving node is ready.
func (c *testCluster) waitReady(timeout time.Duration) {
	c.t.Helper()
	waitFor(c.t, timeout, "every running node to be ready", func() (bool, string) {
		var notReady []string
		for _, n := range c.nodes {
			if !n.serving() {
				continue
			}
			if ok, why := c.ready(n); !ok {
				notReady = append(notReady, n.id+": "+why)
			}
		}
		return len(notReady) == 0, strings.Join(notReady, "; ")
	})
}

// scrape reads node n's per-shard metrics (Raft indexes and leadership, dead letters, fan-out
// lag).
func (c *testCluster) scrape(n *clusterNode) (map[raftstore.ShardID]*proccluster.ShardStat, error) {
	code, body, err := c.get(n, "/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("%s /metrics: status %d", n.id, code)
	}
	return proccluster.ParseShardMetrics(body)
}

// leaders returns, per shard, the serving node that claims to lead it in the highest term (a
// deposed leader may still claim an older term for a moment). Shards without a leader are absent.
func (c *testCluster) leaders() map[raftstore.ShardID]*clusterNode {
	out := map[raftstore.ShardID]*clusterNode{}
	terms := map[raftstore.ShardID]uint64{}
	for _, n := range c.nodes {
		if !n.serving() {
			continue
		}
		stats, err := c.scrape(n)
		if err != nil {
			continue
		}
		for shard, st := range stats {
			if st.Leader && st.Term >= terms[shard] {
				out[shard], terms[shard] = n, st.Term
			}
		}
	}
	return out
}

// waitLeaders waits until every shard has a leader among the serving nodes and returns them.
func (c *testCluster) waitLeaders(timeout time.Duration) map[raftstore.ShardID]*clusterNode {
	c.t.Helper()
	var got map[raftstore.ShardID]*clusterNode
	waitFor(c.t, timeout, "every shard to have a leader", func() (bool, string) {
		got = c.leaders()
		return len(got) == clusterShards, fmt.Sprintf("leaders %v", describeLeaders(got))
	})
	return got
}

// describeLeaders prints shard → node id.
func describeLeaders(l map[raftstore.ShardID]*clusterNode) string {
	var parts []string
	for shard := raftstore.ShardID(1); shard <= clusterShards; shard++ {
		id := "-"
		if n := l[shard]; n != nil {
			id = n.id
		}
		parts = append(parts, fmt.Sprintf("%d:%s", shard, id))
	}
	return strings.Join(parts, " ")
}

// mostLeader returns the serving node that leads the most shards (ties: the lowest id).
func (c *testCluster) mostLeader(l map[raftstore.ShardID]*clusterNode) *clusterNode {
	count := map[*clusterNode]int{}
	for _, n := range l {
		count[n]++
	}
	var best *clusterNode
	for _, n := range c.nodes {
		if count[n] > 0 && (best == nil || count[n] > count[best]) {
			best = n
		}
	}
	return best
}

// leastLeader returns the serving node that leads the fewest shards (ties: the lowest id).
func (c *testCluster) leastLeader(l map[raftstore.ShardID]*clusterNode) *clusterNode {
	count := map[*clusterNode]int{}
	for _, n := range l {
		count[n]++
	}
	var best *clusterNode
	for _, n := range c.nodes {
		if n.serving() && (best == nil || count[n] < count[best]) {
			best = n
		}
	}
	return best
}

// waitReplicasCaughtUp waits until, for every shard, every serving node reports the same commit,
// applied and last index (so every replica holds and has applied the same log), twice in a row
// a second apart (so nothing was still being proposed).
func (c *testCluster) waitReplicasCaughtUp(timeout time.Duration) {
	c.t.Helper()
	var prev string
	waitFor(c.t, timeout, "every replica of every shard to apply the same index", func() (bool, string) {
		var parts []string
		for shard := raftstore.ShardID(1); shard <= clusterShards; shard++ {
			var seen string
			for _, n := range c.nodes {
				if !n.serving() {
					continue
				}
				stats, err := c.scrape(n)
				if err != nil {
					return false, err.Error()
				}
				st := stats[shard]
				if st == nil || st.Applied != st.Commit || st.Commit != st.Last {
					return false, fmt.Sprintf("shard %d on %s: %+v", shard, n.id, st)
				}
				idx := strconv.FormatUint(st.Applied, 10)
				if seen != "" && seen != idx {
					return false, fmt.Sprintf("shard %d: applied %s on one node, %s on %s", shard, seen, idx, n.id)
				}
				seen = idx
			}
			parts = append(parts, fmt.Sprintf("%d@%s", shard, seen))
		}
		now := strings.Join(parts, " ")
		stable := now == prev
		prev = now
		if !stable {
			time.Sleep(time.Second)
		}
		return stable, "indexes still moving: " + now
	})
	c.tl.add("replicas caught up: shard@applied %s", prev)
}

// terminateAll stops every running node with SIGTERM, all at once, and checks each stopped
// cleanly.
func (c *testCluster) terminateAll() {
	c.t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(c.nodes))
	for i, n := range c.nodes {
		if !n.running() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = n.Terminate(30 * time.Second)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			c.t.Error(err)
		}
	}
	c.tl.add("all nodes stopped with SIGTERM")
}

// checkLogs fails the test if a node exited by itself or its stderr reports a panic, a fatal
// error or a data race.
func (c *testCluster) checkLogs() {
	c.t.Helper()
	for _, n := range c.nodes {
		n.mu.Lock()
		surprise := slices.Clone(n.surprise)
		n.mu.Unlock()
		for _, s := range surprise {
			c.t.Errorf("%s: %s", n.id, s)
		}
		b, err := os.ReadFile(n.logPath)
		if err != nil {
			c.t.Error(err)
			continue
		}
		for _, bad := range []string{"panic:", "fatal error:", "DATA RACE"} {
			if i := bytes.Index(b, []byte(bad)); i >= 0 {
				c.t.Errorf("%s's stderr reports %q:\n%s", n.id, bad, b[i:min(len(b), i+4000)])
			}
		}
	}
}

// waitFor polls cond every 100 ms until it holds or timeout passes; then it fails the test with
// what and cond's last description of the state.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last state: %s", timeout, what, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestClusterHarness: three nodes start and elect a leader for every shard; a node killed with
// SIGKILL loses its leaderships to the others and, restarted on its data, rejoins; a paused node
// resumes; every node stops cleanly on SIGTERM and none reported a panic.
func TestClusterHarness(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the cluster suite needs Linux (SIGKILL, SIGSTOP, parent-death signal)")
	}
	tl := newTimeline(t)
	c := startCluster(t, 3, tl)
	leaders := c.waitLeaders(30 * time.Second)
	victim := c.mostLeader(leaders)
	tl.add("leaders %s; killing %s", describeLeaders(leaders), victim.id)
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the other nodes to take over every shard", func() (bool, string) {
		l := c.leaders()
		for _, n := range l {
			if n == victim {
				return false, describeLeaders(l)
			}
		}
		return len(l) == clusterShards, describeLeaders(l)
	})
	tl.add("leaders without %s: %s", victim.id, describeLeaders(c.leaders()))
	if err := victim.Restart(); err != nil {
		t.Fatal(err)
	}
	c.waitReady(30 * time.Second)
	tl.add("%s restarted and ready", victim.id)

	other := c.nodes[(slices.Index(c.nodes, victim)+1)%len(c.nodes)]
	if err := other.Stop(); err != nil {
		t.Fatal(err)
	}
	tl.add("%s paused", other.id)
	c.waitLeaders(30 * time.Second)
	if err := other.Cont(); err != nil {
		t.Fatal(err)
	}
	tl.add("%s resumed", other.id)
	c.waitReady(30 * time.Second)
	c.waitReplicasCaughtUp(30 * time.Second)
	c.terminateAll()
	c.checkLogs()
	if c.mesh != nil {
		t.Log(c.mesh.Summary())
	}
}

// clusterView asks node n for the cluster view (GET /v1/cluster).
func (c *testCluster) clusterView(n *clusterNode) (syncd.ClusterView, error) {
	var v syncd.ClusterView
	code, body, err := c.get(n, "/v1/cluster")
	if err != nil {
		return v, err
	}
	if code != http.StatusOK {
		return v, fmt.Errorf("GET /v1/cluster on %s: HTTP %d: %s", n.id, code, body)
	}
	return v, json.Unmarshal([]byte(body), &v)
}
