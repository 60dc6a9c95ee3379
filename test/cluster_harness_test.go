package test

// The fault suite's side of the multi-process cluster: the processes, their data directories and
// ports, and the controls to kill, pause, restart and stop them are the harness test/proccluster's;
// what is added here is the suite's own: node-to-node traffic through a testkit.Mesh (when the
// binary supports -peer-dial: each node's -peer-dial map is passed as its extra flags), the
// timeline, the record of unexpected exits and the checks the checker runs. See
// cluster_fault_test.go for the scenarios.

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/test/proccluster"
	"github.com/syncd-dev/syncd/test/testkit"
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

// clusterNode is one node of a test cluster: its process (the harness's proccluster.Node: flags,
// data directory and addresses that stay the same across restarts, one log file for every run)
// and what the scenarios record about it.
type clusterNode struct {
	*proccluster.Node

	retired bool // removed from the cluster and stopped for good: never restarted

	mu       sync.Mutex
	surprise []string // unexpected exits, for the checker
	mayExit  string   // set: an exit by itself is what the scenario allows now, for this reason
}

// testCluster is a cluster of syncd processes on loopback that share one token secret and one
// certificate, so a device may connect to any node with the same token and fingerprint.
type testCluster struct {
	t      *testing.T
	pc     *proccluster.Cluster
	nodes  []*clusterNode // pc's nodes, in the same order
	mesh   *testkit.Mesh  // nil when the binary has no -peer-dial: no partitions then
	tl     *timeline
	byNode map[*proccluster.Node]*clusterNode
}

// startClusterWithSpares builds cmd/syncd and starts n nodes n1..n<n>, with node-to-node traffic
// through relays when the binary supports -peer-dial, and waits until every node is ready; with spare nodes n<n+1>…: set up (data directory,
// relays, flags: -join through n1) but not started; a scenario starts one to have it join. args
// are flags for every node (proccluster.Config.Args).
func startClusterWithSpares(t *testing.T, n, spares int, tl *timeline, args ...string) *testCluster {
	t.Helper()
	bin := buildServer(t)
	c := &testCluster{t: t, tl: tl, byNode: map[*proccluster.Node]*clusterNode{}}
	pc, err := proccluster.New(proccluster.Config{Syncd: bin, Dir: t.TempDir(), Nodes: n, Spares: spares, Shards: clusterShards,
		Args: args, OnExit: c.onExit})
	if err != nil {
		t.Fatal(err)
	}
	c.pc = pc
	raftAddrs := map[string]string{}
	for _, pn := range pc.Nodes() {
		node := &clusterNode{Node: pn}
		c.nodes = append(c.nodes, node)
		c.byNode[pn] = node
		raftAddrs[pn.ID] = pn.RaftAddr
	}

	if binaryHasFlag(bin, "peer-dial") {
		if c.mesh, err = testkit.NewMesh(raftAddrs); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Log("this syncd has no -peer-dial: nodes dial each other directly, partitions are unavailable")
	}
	for _, node := range c.nodes {
		var args []string
		if node.Spare {
			join := raftAddrs["n1"]
			if c.mesh != nil {
				join = c.mesh.DialMap(node.ID)["n1"]
			}
			args = append(args, "-join", join)
		}
		if c.mesh != nil {
			var dial []string
			for to, addr := range c.mesh.DialMap(node.ID) {
				dial = append(dial, to+"="+addr)
			}
			slices.Sort(dial)
			args = append(args, "-peer-dial", strings.Join(dial, ","))
		}
		node.SetArgs(args...)
	}
	t.Cleanup(c.cleanup)
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	c.waitReady(60 * time.Second)
	tl.add("cluster of %d nodes ready (%s)", n, c.describeNodes())
	return c
}

// onExit records an exit the test did not cause (proccluster.Config.OnExit).
func (c *testCluster) onExit(pn *proccluster.Node, err error, expected bool) {
	if expected {
		return
	}
	n := c.byNode[pn]
	n.mu.Lock()
	allowed := n.mayExit
	if allowed == "" {
		n.surprise = append(n.surprise, fmt.Sprintf("run #%d exited by itself: %v", pn.Starts(), err))
	}
	n.mu.Unlock()
	if allowed != "" {
		c.tl.add("%s exited by itself (%v), which it may do now: %s", pn.ID, err, allowed)
		return
	}
	c.tl.add("%s EXITED UNEXPECTEDLY: %v", pn.ID, err)
}

// binaryHasFlag reports whether the syncd binary lists -name in its usage.
func binaryHasFlag(bin, name string) bool {
	out, _ := exec.Command(bin, "-h").CombinedOutput() // -h exits 0 or 2 depending on the version
	return bytes.Contains(out, []byte("-"+name+" ")) || bytes.Contains(out, []byte("-"+name+"\n"))
}

// cleanup kills every process still running, closes the relays and, if the test failed, logs
// the timeline and the tail of every node's stderr.
func (c *testCluster) cleanup() {
	if err := c.pc.Kill(); err != nil {
		c.t.Error(err)
	}
	if c.mesh != nil {
		c.mesh.Close()
	}
	if c.t.Failed() {
		c.t.Logf("timeline:\n%s", c.tl)
		for _, n := range c.nodes {
			c.t.Logf("---- tail of %s's stderr (%s) ----\n%s", n.ID, n.Log, n.LogTail(80))
		}
	}
}

// describeNodes lists each node's addresses.
func (c *testCluster) describeNodes() string {
	var parts []string
	for _, n := range c.nodes {
		parts = append(parts, fmt.Sprintf("%s: quic %s raft %s admin %s", n.ID, n.ClientAddr, n.RaftAddr, n.AdminAddr))
	}
	return strings.Join(parts, "; ")
}

// get fetches an admin URL path of node n and returns the status and body.
func (c *testCluster) get(n *clusterNode, path string) (int, string, error) {
	return c.do(n, http.MethodGet, path)
}

// do sends a body-less request to an admin URL path of node n and returns the status and body.
func (c *testCluster) do(n *clusterNode, method, path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return n.AdminDo(ctx, method, path)
}

// waitReady waits until every serving node is ready; a node that exits meanwhile without the
// test stopping it fails the test at once, with the tail of its log.
func (c *testCluster) waitReady(timeout time.Duration) {
	c.t.Helper()
	if err := c.pc.WaitReady(context.Background(), timeout); err != nil {
		c.t.Fatalf("waiting for every running node to be ready: %v", err)
	}
}

// scrape reads node n's per-shard metrics (Raft indexes and leadership, dead letters, fan-out
// lag).
func (c *testCluster) scrape(n *clusterNode) (map[raftstore.ShardID]*proccluster.ShardStat, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return n.Metrics(ctx)
}

// leaders returns, per shard, the serving node that claims to lead it in the highest term (a
// deposed leader may still claim an older term for a moment). Shards without a leader are absent.
func (c *testCluster) leaders() map[raftstore.ShardID]*clusterNode {
	out := map[raftstore.ShardID]*clusterNode{}
	for shard, n := range c.pc.Leaders(context.Background()) {
		out[shard] = c.byNode[n]
	}
	return out
}

// waitLeaders waits until every shard has a leader among the serving nodes and returns them.
func (c *testCluster) waitLeaders(timeout time.Duration) map[raftstore.ShardID]*clusterNode {
	c.t.Helper()
	var got map[raftstore.ShardID]*clusterNode
	testkit.Wait(c.t, timeout, "every shard to have a leader", func() (bool, string) {
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
			id = n.ID
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
		if n.Serving() && (best == nil || count[n] < count[best]) {
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
	testkit.Wait(c.t, timeout, "every replica of every shard to apply the same index", func() (bool, string) {
		var parts []string
		for shard := raftstore.ShardID(1); shard <= clusterShards; shard++ {
			var seen string
			for _, n := range c.nodes {
				if !n.Serving() {
					continue
				}
				stats, err := c.scrape(n)
				if err != nil {
					return false, err.Error()
				}
				st := stats[shard]
				if st == nil || st.Applied != st.Commit || st.Commit != st.Last {
					return false, fmt.Sprintf("shard %d on %s: %+v", shard, n.ID, st)
				}
				idx := strconv.FormatUint(st.Applied, 10)
				if seen != "" && seen != idx {
					return false, fmt.Sprintf("shard %d: applied %s on one node, %s on %s", shard, seen, idx, n.ID)
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
	if err := c.pc.Stop(30 * time.Second); err != nil {
		c.t.Error(err)
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
			c.t.Errorf("%s: %s", n.ID, s)
		}
		b, err := os.ReadFile(n.Log)
		if err != nil {
			c.t.Error(err)
			continue
		}
		for _, bad := range []string{"panic:", "fatal error:", "DATA RACE"} {
			if i := bytes.Index(b, []byte(bad)); i >= 0 {
				c.t.Errorf("%s's stderr reports %q:\n%s", n.ID, bad, b[i:min(len(b), i+4000)])
			}
		}
	}
}

// clusterView asks node n for the cluster view (GET /v1/cluster).
func (c *testCluster) clusterView(n *clusterNode) (adminapi.ClusterView, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return n.ClusterView(ctx)
}
