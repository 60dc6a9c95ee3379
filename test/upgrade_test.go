package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/test/proccluster"
	"github.com/syncd-dev/syncd/test/testkit"
)

// upgradeFromEnv names the revision TestRollingUpgrade upgrades from; default HEAD~1.
const upgradeFromEnv = "SYNCD_UPGRADE_FROM"

// TestRollingUpgrade (issue #26, 1): the upgrade policy as a test. A three-node cluster runs
// the syncd built from the previous commit (SYNCD_UPGRADE_FROM, default HEAD~1, built from a git
// worktree) while two senders each send to a receiver, one message every 50 ms (the default
// send_rate is 20 a second per device); the nodes are upgraded one at a time to the syncd of the
// current tree — SIGTERM, a clean exit, a start on the same data directory and addresses with the
// new binary, the whole cluster ready again and 2 s more of both senders' messages acked — while the
// traffic keeps running, and the devices reconnect by themselves (each has the other nodes as
// fallbacks). Afterwards every message queued is acked (none failed), each conversation holds its
// sender's messages exactly once, in the order queued, on both devices, and every node serves the
// new build: its syncd_build_info is the one `syncd -version` of the new binary prints, and its
// process runs the new binary.
//
// It needs git and the revision to upgrade from: in a shallow clone, fetch more history or set
// SYNCD_UPGRADE_FROM. The current tree is built with VCS stamping (-buildvcs=true) so that its
// build_info names its commit.
func TestRollingUpgrade(t *testing.T) {
	skipShort(t)
	if runtime.GOOS == "windows" {
		t.Skip("stops nodes with SIGTERM")
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := proccluster.ModuleRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	fromRev := os.Getenv(upgradeFromEnv)
	if fromRev == "" {
		fromRev = "HEAD~1"
	}
	howTo := fmt.Sprintf("TestRollingUpgrade builds syncd from the revision it upgrades from (%s=%q, default HEAD~1) with git: "+
		"run it in a git clone of the repository with that revision (in a shallow clone: git fetch --deepen=1, or --unshallow), "+
		"or set %s to a revision the clone has; go test -short skips it", upgradeFromEnv, fromRev, upgradeFromEnv)
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git not found (%v). %s", err, howTo)
	}
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", append([]string{"-C", root}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			if msg := strings.TrimSpace(string(out)); msg != "" {
				err = fmt.Errorf("%v: %s", err, msg)
			}
			return "", fmt.Errorf("git %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	fromCommit, err := git("rev-parse", "--verify", "--quiet", fromRev+"^{commit}")
	if err != nil {
		t.Fatalf("%s is not a commit of the repository in %s (%v). %s", fromRev, root, err, howTo)
	}
	toCommit, _ := git("rev-parse", "--verify", "--quiet", "HEAD^{commit}")

	// The old tree: a detached worktree of fromCommit, removed again at the end.
	src := filepath.Join(t.TempDir(), "syncd-"+fromCommit[:12])
	if _, err := git("worktree", "add", "--detach", src, fromCommit); err != nil {
		t.Fatalf("check out %s (%s): %v. %s", fromRev, fromCommit, err, howTo)
	}
	t.Cleanup(func() {
		if _, err := git("worktree", "remove", "--force", src); err != nil {
			t.Errorf("remove the worktree of %s: %v", fromRev, err)
		}
	})

	// Both builds at once, stamped with their commits (a go env or CI may turn that off), so that
	// a node's syncd_build_info says which one it runs. Go stamps no build of a git worktree: the
	// old one says "commit unknown", which tells it from the new one all the same. A checkout git
	// cannot read is built unstamped.
	goflags, err := exec.Command("go", "env", "GOFLAGS").Output()
	if err != nil {
		t.Fatalf("go env GOFLAGS: %v", err)
	}
	t.Setenv("GOFLAGS", strings.TrimSpace(string(goflags))+" -buildvcs=true")
	buildStart := time.Now()
	trees := []struct {
		what, root string
		bins       proccluster.Binaries
		err        error
	}{{what: "the old syncd (" + fromRev + ", " + fromCommit[:12] + ")", root: src}, {what: "the new syncd (the current tree)", root: root}}
	var builds sync.WaitGroup
	for i := range trees {
		builds.Go(func() {
			trees[i].bins, trees[i].err = proccluster.Build(t.Context(), proccluster.BuildConfig{Dir: t.TempDir(), Root: trees[i].root})
		})
	}
	builds.Wait()
	for i := range trees {
		if tr := &trees[i]; tr.err != nil && strings.Contains(tr.err.Error(), "error obtaining VCS status") {
			t.Logf("building %s without its commit, git cannot read %s: %v", tr.what, tr.root, tr.err)
			t.Setenv("GOFLAGS", strings.TrimSpace(string(goflags))+" -buildvcs=false")
			tr.bins, tr.err = proccluster.Build(t.Context(), proccluster.BuildConfig{Dir: t.TempDir(), Root: tr.root})
		}
	}
	for _, tr := range trees {
		if tr.err != nil {
			t.Fatalf("build %s: %v", tr.what, tr.err)
		}
	}
	oldBins, newBins := trees[0].bins, trees[1].bins
	newBuild, err := syncdVersion(newBins.Syncd)
	if err != nil {
		t.Fatalf("new syncd: %v", err)
	}
	oldBuild, oldVerErr := syncdVersion(oldBins.Syncd) // a revision before syncd -version has none
	t.Logf("built in %v: upgrading from %s %s (%s) to %s (the current tree, HEAD %s)", time.Since(buildStart).Round(time.Second),
		fromRev, fromCommit[:12], oldBuild.line, newBuild.line, short12(toCommit))
	if oldVerErr != nil {
		t.Logf("old syncd: %v", oldVerErr)
	} else if oldBuild.sameMetric(newBuild) {
		t.Logf("note: the old and the new build have the same syncd_build_info; the processes' executables still tell them apart")
	}

	// The cluster, on the old binary.
	c, err := proccluster.New(proccluster.Config{Syncd: oldBins.Syncd, Dir: t.TempDir(), Nodes: 3, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run after the deferred client Closes: the nodes outlive their clients, then must
	// exit cleanly on SIGTERM.
	stopAtCleanup(t, c, "the cluster")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if oldVerErr == nil {
		for _, n := range c.Nodes() { // the check that the upgrade must change
			if err := checkBuildInfo(ctx, n, oldBuild); err != nil {
				t.Fatalf("before the upgrade: %v", err)
			}
		}
	}

	// Two conversations, each with one sender and one receiver on different nodes; every device
	// has the other nodes as fallbacks.
	nodes := c.Nodes()
	senders := []*upgradeSender{{user: "alice", peer: "bob"}, {user: "carol", peer: "dave"}}
	for i, s := range senders {
		s.conv = proto.DirectConv(s.user, s.peer)
		// alice on n1 to bob on n2, carol on n2 to dave on n3
		s.d, s.to = dialClusterDevice(t, c, s.user, "phone", t.TempDir(), i), dialClusterDevice(t, c, s.peer, "phone", t.TempDir(), i+1)
		s.start()
		defer s.stop() // after the Closes below: nothing blocks their event loops
		defer s.to.Close()
		defer s.d.Close()
	}

	// Traffic: each sender queues a message every 50 ms until told to stop.
	stopTraffic := keepSending(t, senders, 50*time.Millisecond)
	defer stopTraffic()

	// flowing waits until every sender has had 40 more messages acked (2 s of its traffic) than
	// it had at the call: the cluster, whatever builds it runs, serves the traffic.
	flowing := func(when string) {
		t.Helper()
		base := make([]int, len(senders))
		for i, s := range senders {
			base[i] = s.ackCount()
		}
		testkit.Wait(t, 45*time.Second, "every sender's messages to be acked "+when, func() (bool, string) {
			var state []string
			ok := true
			for i, s := range senders {
				n, failed := s.ackCount(), s.failures()
				if len(failed) > 0 {
					t.Fatalf("%s: a message failed %s: %s", s.user, when, failed[0])
				}
				ok = ok && n >= base[i]+40
				state = append(state, fmt.Sprintf("%s: %d acked (%d before)", s.user, n, base[i]))
			}
			return ok, strings.Join(state, ", ")
		})
	}
	flowing("on the old build")

	upgradeStart := time.Now()
	for _, n := range nodes {
		start := time.Now()
		n.SetSyncd(newBins.Syncd)
		if err := n.Stop(15 * time.Second); err != nil {
			t.Fatalf("upgrade %s: the old build did not stop cleanly on SIGTERM: %v", n.ID, err)
		}
		stopped := time.Since(start)
		if err := n.Start(); err != nil {
			t.Fatalf("upgrade %s: %v", n.ID, err)
		}
		if err := c.WaitReady(ctx, time.Minute); err != nil {
			t.Fatalf("after upgrading %s: %v", n.ID, err)
		}
		ready := time.Since(start)
		flowing("after upgrading " + n.ID)
		t.Logf("%s upgraded: stopped in %v, cluster ready %v after the SIGTERM, traffic acked again after %v", n.ID,
			stopped.Round(time.Millisecond), ready.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	}
	t.Logf("rolling upgrade of %d nodes took %v", len(nodes), time.Since(upgradeStart).Round(time.Millisecond))
	stopTraffic()

	// Every message queued is acked, none failed.
	testkit.Wait(t, time.Minute, "every queued message to be acked", func() (bool, string) {
		var state []string
		ok := true
		for _, s := range senders {
			if failed := s.failures(); len(failed) > 0 {
				t.Fatalf("%s: %d messages failed, the first: %s", s.user, len(failed), failed[0])
			}
			ids, _ := s.queued()
			n := s.ackCount()
			ok = ok && n >= len(ids)
			state = append(state, fmt.Sprintf("%s: %d of %d acked", s.user, n, len(ids)))
		}
		return ok, strings.Join(state, ", ")
	})
	for _, s := range senders {
		ids, _ := s.queued()
		s.mu.Lock()
		for _, id := range ids {
			if !s.acked[id] {
				t.Errorf("%s: message %s was queued but never acked", s.user, id)
			}
		}
		if len(s.acked) != len(ids) {
			t.Errorf("%s: %d messages acked, %d queued", s.user, len(s.acked), len(ids))
		}
		s.mu.Unlock()
	}
	// Both devices of each conversation store exactly its sender's messages, once each, in order.
	testkit.Wait(t, time.Minute, "every device to store every message once, in order", func() (bool, string) {
		for _, s := range senders {
			_, want := s.queued()
			for _, d := range []*device{s.d, s.to} {
				if got := bodies(t, d, s.conv); !slices.Equal(got, want) {
					return false, fmt.Sprintf("%s's store of %s: %s", d.User(), s.conv, storeDiff(got, want))
				}
			}
		}
		return true, ""
	})
	total := 0
	for _, s := range senders {
		_, sent := s.queued()
		total += len(sent)
	}
	t.Logf("%d messages sent during the upgrade, all acked and stored once, in order", total)

	// Every node runs the new build.
	for _, n := range nodes {
		if err := checkBuildInfo(ctx, n, newBuild); err != nil {
			t.Errorf("after the upgrade: %v", err)
		}
		if n.Starts() != 2 {
			t.Errorf("%s was started %d times, want 2 (the old build, then the new)", n.ID, n.Starts())
		}
		if runtime.GOOS == "linux" {
			if err := checkExecutable(n.PID(), newBins.Syncd); err != nil {
				t.Errorf("%s: %v", n.ID, err)
			}
		}
	}
}

// upgradeRetry is the devices' retry schedule: the SDK's default gives up after about a minute of
// failures, longer than a slow upgrade step may keep a message waiting; a failed message is still
// reported.
var upgradeRetry = func() []time.Duration {
	out := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second}
	for range 60 {
		out = append(out, 2*time.Second)
	}
	return out
}()

// stopAtCleanup stops c's nodes with SIGTERM when the test ends (what must exit cleanly) and, if
// the test failed, logs the tail of each node's log.
func stopAtCleanup(t *testing.T, c *proccluster.Cluster, what string) {
	t.Cleanup(func() {
		if err := c.Stop(15 * time.Second); err != nil {
			t.Errorf("stop %s: %v", what, err)
		}
		if t.Failed() {
			for _, n := range c.Nodes() {
				t.Logf("%s's log (%s):\n%s", n.ID, n.Log, n.LogTail(60))
			}
		}
	})
}

// dialClusterDevice connects user's device to node home of c, with c's other nodes as its
// fallbacks, its store in store, and a retry schedule patient enough for a node's restart.
func dialClusterDevice(t *testing.T, c *proccluster.Cluster, user, dev, store string, home int) *device {
	t.Helper()
	token, err := c.Token(user, dev, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	nodes := c.Nodes()
	var others []string
	for i := range nodes {
		if j := (home + i) % len(nodes); j != home {
			others = append(others, nodes[j].ClientAddr)
		}
	}
	return dialDeviceWith(t, client.Config{Addr: nodes[home%len(nodes)].ClientAddr, Addrs: others, Token: token, Device: dev,
		Fingerprint: c.Fingerprint(), StoreDir: store, Logger: quiet(t), Retry: upgradeRetry,
		RequestTimeout: 5 * time.Second, HeadCheck: 5 * time.Second})
}

// keepSending makes each sender queue a message ("<user>-<n>") every interval until the returned
// function is called, which waits for them to stop.
func keepSending(t *testing.T, senders []*upgradeSender, interval time.Duration) (stop func()) {
	quit := make(chan struct{})
	var traffic sync.WaitGroup
	for _, s := range senders {
		traffic.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-quit:
					return
				case <-time.After(interval):
				}
				body := fmt.Sprintf("%s-%d", s.user, i)
				id, err := s.d.Send(s.conv, s.peer, []byte(body))
				if err != nil {
					t.Errorf("%s: Send %s: %v", s.user, body, err)
					return
				}
				s.mu.Lock()
				s.sent, s.ids = append(s.sent, body), append(s.ids, id)
				s.mu.Unlock()
			}
		})
	}
	return sync.OnceFunc(func() { close(quit); traffic.Wait() })
}

// upgradeSender is one conversation of TestRollingUpgrade: d (user) sends to to (peer).
type upgradeSender struct {
	user, peer, conv string
	d, to            *device

	quit, drained chan struct{} // drain's stop and end

	mu     sync.Mutex
	sent   []string        // the bodies queued (Send returned), in order
	ids    []string        // their client_msg_ids
	acked  map[string]bool // client_msg_ids reported Sent
	failed []string        // Failed ones, described
}

// start begins draining the devices' events (drain), once d and to are set.
func (s *upgradeSender) start() {
	s.acked = map[string]bool{}
	s.quit, s.drained = make(chan struct{}), make(chan struct{})
	go s.drain()
}

// stop stops draining and waits for it.
func (s *upgradeSender) stop() {
	close(s.quit)
	<-s.drained
}

// drain reads d's outbox outcomes (and its rebase and epoch events, which nothing else reads)
// until quit, so that a long run never fills the device's channels.
func (s *upgradeSender) drain() {
	defer close(s.drained)
	for {
		select {
		case e := <-s.d.statuses:
			s.mu.Lock()
			if e.Status == client.StatusSent {
				s.acked[e.ClientMsgID] = true
			} else {
				s.failed = append(s.failed, fmt.Sprintf("%s: %v", e.ClientMsgID, e.Err))
			}
			s.mu.Unlock()
		case <-s.to.statuses: // the receiver queues nothing; drained all the same
		case <-s.d.rebases:
		case <-s.d.epochs:
		case <-s.to.rebases:
		case <-s.to.epochs:
		case <-s.quit:
			return
		}
	}
}

func (s *upgradeSender) ackCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.acked)
}

func (s *upgradeSender) failures() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.failed)
}

// queued returns the client_msg_ids and bodies queued so far.
func (s *upgradeSender) queued() (ids, bodies []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ids), slices.Clone(s.sent)
}

// storeDiff says how a store's bodies got differ from want: what is missing, duplicated, not
// sent, and where the order first differs.
func storeDiff(got, want []string) string {
	count := map[string]int{}
	for _, b := range got {
		count[b]++
	}
	sent := map[string]bool{}
	var missing, dups, extra []string
	for _, b := range want {
		sent[b] = true
		if count[b] == 0 {
			missing = append(missing, b)
		}
	}
	seen := map[string]bool{}
	var order []string // got without duplicates or bodies not sent, to compare orders
	for _, b := range got {
		switch {
		case !sent[b]:
			extra = append(extra, b)
		case seen[b]:
			dups = append(dups, b)
		default:
			order = append(order, b)
		}
		seen[b] = true
	}
	first := func(s []string) string {
		if len(s) > 5 {
			return fmt.Sprintf("%v… (%d)", s[:5], len(s))
		}
		return fmt.Sprint(s)
	}
	out := fmt.Sprintf("%d messages of the %d sent", len(got), len(want))
	if len(missing) > 0 {
		out += "; missing " + first(missing)
	}
	if len(dups) > 0 {
		out += "; duplicated " + first(dups)
	}
	if len(extra) > 0 {
		out += "; never sent " + first(extra)
	}
	present := slices.DeleteFunc(slices.Clone(want), func(b string) bool { return count[b] == 0 })
	for i := range min(len(order), len(present)) {
		if order[i] != present[i] {
			out += fmt.Sprintf("; out of order at %d: %s where %s was sent", i, order[i], present[i])
			break
		}
	}
	return out
}

// syncdBuild is what `syncd -version` prints: "syncd <version> (commit <12 hex>[ with local
// changes], <go>)", or "commit unknown" for a build without VCS information.
type syncdBuild struct {
	line      string // the whole line, without "syncd "
	version   string
	commit    string // the first 12 characters of the revision; "" if unknown
	goVersion string
}

var versionLine = regexp.MustCompile(`^syncd (\S+) \(commit (?:unknown|([0-9a-f]+)(?: with local changes)?), (\S+)\)$`)

// syncdVersion runs bin -version and parses its line.
func syncdVersion(bin string) (syncdBuild, error) {
	out, err := exec.Command(bin, "-version").CombinedOutput()
	line := strings.TrimSpace(string(out))
	if err != nil {
		return syncdBuild{line: "no -version"}, fmt.Errorf("%s -version: %v: %s", bin, err, line)
	}
	m := versionLine.FindStringSubmatch(line)
	if m == nil {
		return syncdBuild{line: line}, fmt.Errorf("%s -version printed %q, not syncd <version> (commit <hash>, <go>)", bin, line)
	}
	return syncdBuild{line: strings.TrimPrefix(line, "syncd "), version: m[1], commit: m[2], goVersion: m[3]}, nil
}

// sameMetric reports whether b and o have the same syncd_build_info labels.
func (b syncdBuild) sameMetric(o syncdBuild) bool {
	return b.version == o.version && b.commit == o.commit && b.goVersion == o.goVersion
}

// checkBuildInfo checks that n's /metrics has one syncd_build_info series and that its labels
// are want's: the same version and Go release, and a revision starting with want's commit (the
// metric has the whole hash).
func checkBuildInfo(ctx context.Context, n *proccluster.Node, want syncdBuild) error {
	code, body, err := n.AdminDo(ctx, "GET", "/metrics")
	if err != nil {
		return fmt.Errorf("%s /metrics: %v", n.ID, err)
	}
	if code != 200 {
		return fmt.Errorf("%s /metrics: status %d", n.ID, code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s /metrics: %v", n.ID, err)
	}
	series := families["syncd_build_info"].GetMetric()
	if len(series) != 1 {
		return fmt.Errorf("%s /metrics: %d syncd_build_info series, want 1", n.ID, len(series))
	}
	labels := map[string]string{}
	for _, l := range series[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	rev := labels["revision"]
	revOK := rev == "" && want.commit == "" || want.commit != "" && strings.HasPrefix(rev, want.commit)
	if labels["version"] != want.version || labels["goversion"] != want.goVersion || !revOK {
		return fmt.Errorf("%s runs version %q, revision %q, %s; want the build %s", n.ID, labels["version"], rev, labels["goversion"], want.line)
	}
	return nil
}

// checkExecutable checks that process pid runs the binary bin (Linux: /proc/<pid>/exe).
func checkExecutable(pid int, bin string) error {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return err
	}
	want, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return err
	}
	if got, err := filepath.EvalSymlinks(exe); err == nil {
		exe = got
	}
	if exe != want {
		return fmt.Errorf("process %d runs %s, want %s", pid, exe, want)
	}
	return nil
}

func short12(rev string) string { return rev[:min(12, len(rev))] }
