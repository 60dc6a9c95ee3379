package proccluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/nodecert"
)

// TestNewLayout lays out clusters without starting them: free ports on 127.0.0.1 or the fixed
// layout on 127.0.0.i, spares left out of -peers, the flags every node gets, and one secret,
// admin token and certificate that a second New on the same directory finds again.
func TestNewLayout(t *testing.T) {
	dir := t.TempDir()
	c, err := New(Config{Syncd: "/bin/true", Dir: dir, Nodes: 2, Spares: 1, Shards: 4, Args: []string{"-log-level", "warn"}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Size() != 3 || c.Shards() != 4 || c.Dir() != dir {
		t.Fatalf("size %d, shards %d, dir %s", c.Size(), c.Shards(), c.Dir())
	}
	seen := map[string]bool{}
	for i, n := range c.Nodes() {
		if n.ID != fmt.Sprintf("n%d", i+1) || n.Dir != filepath.Join(dir, n.ID) || n.Log != filepath.Join(n.Dir, "syncd.log") {
			t.Errorf("node %d: %+v", i, n)
		}
		if n.Spare != (i == 2) || n.Starts() != 0 || n.Running() || n.PID() != 0 {
			t.Errorf("%s: spare %v, starts %d, running %v, pid %d", n.ID, n.Spare, n.Starts(), n.Running(), n.PID())
		}
		for _, a := range []string{n.ClientAddr, n.AdminAddr, n.RaftAddr} {
			if !strings.HasPrefix(a, "127.0.0.1:") || seen[a] {
				t.Errorf("%s: address %s reused or not on 127.0.0.1", n.ID, a)
			}
			seen[a] = true
		}
	}
	n1, n3 := c.Node(0), c.Node(2)
	n3.SetArgs("-join", n1.RaftAddr)
	peers := "n1=" + n1.RaftAddr + ",n2=" + c.Node(1).RaftAddr
	if args := strings.Join(n1.Args(), " "); !strings.Contains(args, "-peers "+peers) ||
		!strings.Contains(args, "-token-secret-file "+c.SecretFile()) || !strings.Contains(args, "-admin-token-file "+c.AdminTokenFile()) ||
		!strings.HasSuffix(args, "-log-level warn") {
		t.Errorf("n1 args: %s", args)
	}
	if args := strings.Join(n3.Args(), " "); strings.Contains(args, "-peers") || !strings.HasSuffix(args, "-log-level warn -join "+n1.RaftAddr) {
		t.Errorf("spare args: %s", args)
	}
	if _, err := os.Stat(filepath.Join(dir, "tls.crt")); err != nil {
		t.Error(err)
	}
	// Every node, spares included, has a node certificate of the one cluster CA, passed by flag.
	for _, n := range c.Nodes() {
		args := strings.Join(n.Args(), " ")
		certDir := filepath.Join(dir, "certs", n.ID)
		if !strings.Contains(args, "-node-ca "+filepath.Join(dir, nodecert.CAFile)+" -node-cert "+filepath.Join(certDir, nodecert.CertFile)) {
			t.Errorf("%s args lack its node certificate: %s", n.ID, args)
		}
		certs, err := nodecert.Load(filepath.Join(dir, nodecert.CAFile), filepath.Join(certDir, nodecert.CertFile), filepath.Join(certDir, nodecert.KeyFile))
		if err != nil || certs.NodeID != n.ID {
			t.Errorf("%s: node certificate names %q, %v", n.ID, certs.NodeID, err)
		}
	}

	again, err := New(Config{Syncd: "/bin/true", Dir: dir, BasePort: 17300, Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	if again.Fingerprint() != c.Fingerprint() || !bytes.Equal(again.Secret(), c.Secret()) || again.AdminToken() != c.AdminToken() ||
		c.AdminToken() == "" {
		t.Error("a second New on the same directory has other credentials")
	}
	if n := again.Node(0); n.ClientAddr != "127.0.0.1:17300" || n.AdminAddr != "127.0.0.1:17380" || n.RaftAddr != "127.0.0.1:17400" {
		t.Errorf("fixed layout: %+v", n)
	}
	if strings.Contains(strings.Join(again.Node(0).Args(), " "), "-peers") {
		t.Error("a single node gets -peers")
	}
	if NodeIP(2) != "127.0.0.3" {
		t.Errorf("NodeIP(2) = %s", NodeIP(2))
	}
	if _, err := New(Config{Dir: dir, Nodes: -1}); err == nil || !strings.Contains(err.Error(), "Syncd is required") ||
		!strings.Contains(err.Error(), "out of range") {
		t.Errorf("bad config: %v", err)
	}
}

// TestClusterHarness: three nodes start and elect a leader for every shard; a node killed with
// SIGKILL loses its leaderships to the others and, restarted on its data, rejoins; a paused node
// resumes; the cluster settles; a node killed from outside is reported as an unexpected exit
// (OnExit, WaitReady's *ExitError); every other node stops cleanly on SIGTERM and none reported
// a panic.
func TestClusterHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/syncd and runs three processes for about a minute: skipped with -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("needs Linux (SIGKILL, SIGSTOP, parent-death signal)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bins, err := Build(ctx, BuildConfig{Dir: filepath.Join(dir, "bin")})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var surprises []string
	c, err := New(Config{Syncd: bins.Syncd, Dir: dir, Nodes: 3, Shards: 4, OnExit: func(n *Node, err error, expected bool) {
		if !expected {
			mu.Lock()
			surprises = append(surprises, fmt.Sprintf("%s: %v", n.ID, err))
			mu.Unlock()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Kill(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			for _, n := range c.Nodes() {
				t.Logf("---- tail of %s's log (%s) ----\n%s", n.ID, n.Log, n.LogTail(60))
			}
		}
	})
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	leaders := waitLeaders(ctx, t, c, nil)
	count := map[*Node]int{}
	for _, n := range leaders {
		count[n]++
	}
	victim := slices.MaxFunc(c.Nodes(), func(a, b *Node) int { return count[a] - count[b] })
	t.Logf("leaders %v; killing %s", describe(leaders), victim.ID)
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("leaders without %s: %s", victim.ID, describe(waitLeaders(ctx, t, c, victim)))
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if victim.Starts() != 2 {
		t.Errorf("%s started %d times", victim.ID, victim.Starts())
	}

	other := c.Node((slices.Index(c.Nodes(), victim) + 1) % c.Size())
	if err := other.Pause(); err != nil {
		t.Fatal(err)
	}
	if other.Serving() || !other.Running() {
		t.Errorf("paused %s: serving %v, running %v", other.ID, other.Serving(), other.Running())
	}
	t.Logf("%s paused; leaders %s", other.ID, describe(waitLeaders(ctx, t, c, other)))
	if err := other.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitSettled(ctx, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Node(0).ClusterView(ctx); err != nil || len(v.Nodes) != 3 {
		t.Fatalf("cluster view: %+v, %v", v, err)
	}

	// A node killed behind the harness's back is an unexpected exit.
	crashed := c.Node(2)
	if p, err := os.FindProcess(crashed.PID()); err != nil {
		t.Fatal(err)
	} else if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	var exit *ExitError
	if err := c.WaitReady(ctx, 30*time.Second); !errors.As(err, &exit) || exit.Node != crashed {
		t.Fatalf("WaitReady after %s was killed from outside: %v", crashed.ID, err)
	}
	mu.Lock()
	if len(surprises) != 1 || !strings.HasPrefix(surprises[0], crashed.ID+": signal: killed") {
		t.Errorf("unexpected exits %q, want one of %s", surprises, crashed.ID)
	}
	mu.Unlock()

	if err := c.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes() {
		b, err := os.ReadFile(n.Log)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"panic:", "fatal error:", "DATA RACE"} {
			if bytes.Contains(b, []byte(bad)) {
				t.Errorf("%s's log reports %q", n.ID, bad)
			}
		}
	}
}

// waitLeaders waits up to 30 s until every shard of c has a leader other than without, and
// returns the leaders.
func waitLeaders(ctx context.Context, t *testing.T, c *Cluster, without *Node) map[raftstore.ShardID]*Node {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l := c.Leaders(ctx)
		ok := len(l) == c.Shards()
		for _, n := range l {
			ok = ok && n != without
		}
		if ok {
			return l
		}
		if time.Now().After(deadline) {
			name := "-"
			if without != nil {
				name = without.ID
			}
			t.Fatalf("no leader for every shard without %s after 30s: %s", name, describe(l))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// describe prints shard:node id, in shard order.
func describe(l map[raftstore.ShardID]*Node) string {
	var parts []string
	for _, shard := range slices.Sorted(maps.Keys(l)) {
		parts = append(parts, fmt.Sprintf("%d:%s", shard, l[shard].ID))
	}
	return strings.Join(parts, " ")
}
