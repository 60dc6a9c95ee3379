// Package proccluster runs a syncd cluster as child processes of the load generator, for
// syncbench's cluster scenarios: real cmd/syncd binaries on 127.0.0.1 ports, each with its own
// data directory and log file, sharing one token secret and one certificate, so that a node can
// be killed with SIGKILL and restarted on its data and ports.
//
// It is a package of its own because it reads the server's layout (the slot table, the admin
// endpoints, the token format) while package bench speaks only the protocol. A *Cluster
// implements bench.Cluster.
package proccluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/syncd-dev/syncd/bench"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd"
	shardmetrics "github.com/syncd-dev/syncd/test/proccluster"
)

// Config describes a cluster to start. Zero fields take the documented defaults.
type Config struct {
	// Syncd is the path of a syncd binary (see Build). Required.
	Syncd string
	// Dir holds the token secret, the certificate and one directory per node (data and
	// syncd.log). Required; created if missing.
	Dir string
	// Nodes is the number of nodes. Default 3. With one node there are no peers: the node runs
	// exactly as `syncd` does alone.
	Nodes int
	// Shards is every node's -shards. Default 8.
	Shards int
	// Args are extra flags for every node, after the ones Start sets.
	Args []string
	// SettleTimeout bounds each wait for the cluster to settle (Start, Restart). Default 90 s.
	SettleTimeout time.Duration
}

// Cluster is a running cluster of syncd processes. Its methods are safe for concurrent use,
// except that Kill, Restart and Close must not overlap for the same node.
type Cluster struct {
	cfg         Config
	secret      []byte
	fingerprint string
	slots       *syncd.SlotTable
	nodes       []*node
	http        *http.Client
}

// node is one syncd process; cmd and done are replaced by every start.
type node struct {
	id, dir, log        string
	client, admin, raft string
	args                []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been waited for
}

// Build compiles github.com/syncd-dev/syncd/cmd/syncd into dir/syncd with `go build` (run in the
// current directory, which must be inside the syncd module) and returns the binary's path.
func Build(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "syncd")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/syncd-dev/syncd/cmd/syncd")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("proccluster: go build ./cmd/syncd (run inside the syncd repository, or give a binary): %v\n%s", err, b)
	}
	return out, nil
}

// Start starts the nodes of cfg and returns once the cluster has settled (see WaitSettled).
// On error, the nodes started are stopped again.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Syncd == "" || cfg.Dir == "" {
		return nil, errors.New("proccluster: Config.Syncd and Config.Dir are required")
	}
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.Shards == 0 {
		cfg.Shards = 8
	}
	if cfg.SettleTimeout == 0 {
		cfg.SettleTimeout = 90 * time.Second
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	secret, err := syncd.LoadOrCreateSecret(cfg.Dir)
	if err != nil {
		return nil, err
	}
	_, fp, err := syncd.SelfSignedCert(cfg.Dir, nil)
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, secret: secret, fingerprint: fp, slots: syncd.NewSlotTable(cfg.Shards),
		http: &http.Client{Timeout: 5 * time.Second}}
	var peers []string
	for i := range cfg.Nodes {
		n := &node{id: fmt.Sprintf("n%d", i+1)}
		n.dir = filepath.Join(cfg.Dir, n.id)
		n.log = filepath.Join(n.dir, "syncd.log")
		if n.client, err = freeAddr(); err == nil {
			if n.admin, err = freeAddr(); err == nil {
				n.raft, err = freeAddr()
			}
		}
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, n)
		peers = append(peers, n.id+"="+n.raft)
	}
	for _, n := range c.nodes {
		n.args = []string{"-data-dir", n.dir, "-node-id", n.id, "-listen", n.client, "-admin", n.admin,
			"-raft-addr", n.raft, "-shards", strconv.Itoa(cfg.Shards),
			"-token-secret-file", filepath.Join(cfg.Dir, syncd.TokenKeyFile),
			"-cert", filepath.Join(cfg.Dir, syncd.TLSCertFile), "-key", filepath.Join(cfg.Dir, syncd.TLSKeyFile),
			"-send-rate", "1000000", "-send-burst", "1000000", // the bench measures the server, not the per-device limit
			"-log-level", "warn"}
		if cfg.Nodes > 1 {
			n.args = append(n.args, "-peers", strings.Join(peers, ","))
		}
		n.args = append(n.args, cfg.Args...)
	}
	for _, n := range c.nodes {
		if err := c.start(n); err != nil {
			return nil, errors.Join(err, c.Close())
		}
	}
	if err := c.WaitSettled(ctx); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

// start starts n's process, its output appended to n.log.
func (c *Cluster) start(n *node) error {
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	fmt.Fprintf(logf, "=== proccluster: starting %s at %s\n", n.id, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(c.cfg.Syncd, n.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("proccluster: start %s: %w", n.id, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
	return nil
}

// running returns n's process and its done channel, or nil when it has exited.
func (n *node) running() (*exec.Cmd, chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return nil, nil
	}
	select {
	case <-n.done:
		return nil, nil
	default:
		return n.cmd, n.done
	}
}

// Size returns the number of nodes.
func (c *Cluster) Size() int { return len(c.nodes) }

// Target returns a target whose devices are spread over every node.
func (c *Cluster) Target() bench.Target {
	t := c.NodeTarget(0)
	for _, n := range c.nodes {
		t.Addrs = append(t.Addrs, n.client)
	}
	return t
}

// NodeTarget returns a target whose devices connect to node i.
func (c *Cluster) NodeTarget(i int) bench.Target {
	return bench.Target{Addr: c.nodes[i].client, Fingerprint: c.fingerprint, Token: c.token}
}

// token mints a one-hour token for user's device with the cluster's secret.
func (c *Cluster) token(user, device string) (string, error) {
	now := time.Now()
	return syncd.MintToken(c.secret, syncd.TokenClaims{User: user, Device: device, Issued: now, Expires: now.Add(time.Hour)})
}

// AdminAddr returns node i's admin HTTP address (metrics, pprof).
func (c *Cluster) AdminAddr(i int) string { return c.nodes[i].admin }

// LogFile returns the file holding node i's output.
func (c *Cluster) LogFile(i int) string { return c.nodes[i].log }

// ConvLeader returns the node leading conversation conv's home shard, waiting up to 10 s for
// one.
func (c *Cluster) ConvLeader(ctx context.Context, conv string) (int, error) {
	return c.leaderOf(ctx, c.slots.ConvShard(conv))
}

// UserLeader returns the node leading the shard of user's log, waiting up to 10 s for one.
func (c *Cluster) UserLeader(ctx context.Context, user string) (int, error) {
	return c.leaderOf(ctx, c.slots.UserShard(user))
}

func (c *Cluster) leaderOf(ctx context.Context, shard raftstore.ShardID) (int, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if i, ok := c.leaders(ctx)[shard]; ok {
			return i, nil
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("proccluster: no leader for shard %d", shard)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return -1, err
		}
	}
}

// scrape reads node i's per-shard series from /metrics.
func (c *Cluster) scrape(ctx context.Context, i int) (map[raftstore.ShardID]*shardmetrics.ShardStat, error) {
	body, err := c.get(ctx, i, "/metrics")
	if err != nil {
		return nil, err
	}
	return shardmetrics.ParseShardMetrics(body)
}

// leaders returns, per shard, the running node that claims to lead it in the highest term.
func (c *Cluster) leaders(ctx context.Context) map[raftstore.ShardID]int {
	out := map[raftstore.ShardID]int{}
	terms := map[raftstore.ShardID]uint64{}
	for i, n := range c.nodes {
		if cmd, _ := n.running(); cmd == nil {
			continue
		}
		stats, err := c.scrape(ctx, i)
		if err != nil {
			continue
		}
		for shard, st := range stats {
			if st.Leader && st.Term >= terms[shard] {
				out[shard], terms[shard] = i, st.Term
			}
		}
	}
	return out
}

// get returns the body of node i's admin path, or an error for a status other than 200.
func (c *Cluster) get(ctx context.Context, i int, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.nodes[i].admin+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s %s: %d %s", c.nodes[i].id, path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// WaitSettled waits (up to Config.SettleTimeout) until the cluster is fit to measure: every
// node runs and answers /readyz; every node's cluster view lists every node as reachable and
// gives every shard a leader and min(3, nodes) voters; on every shard, every replica has applied
// the highest commit index any reports; no node leads more than its share of the shards (the
// nodes' leader balancing has finished); and the shard leaders are the same at two checks a
// second apart.
func (c *Cluster) WaitSettled(ctx context.Context) error {
	deadline := time.Now().Add(c.cfg.SettleTimeout)
	var prev map[raftstore.ShardID]int
	for {
		why := c.unsettled(ctx)
		var cur map[raftstore.ShardID]int
		if why == "" {
			cur = c.leaders(ctx)
			if !maps.Equal(cur, prev) {
				why = "leaders changing"
			}
		}
		if why == "" {
			return nil
		}
		prev = cur
		if time.Now().After(deadline) {
			return fmt.Errorf("proccluster: not settled after %v: %s (node logs in %s)", c.cfg.SettleTimeout, why, c.cfg.Dir)
		}
		if err := sleep(ctx, time.Second); err != nil {
			return err
		}
	}
}

// unsettled returns why the cluster is not settled yet (leader stability aside), or "".
func (c *Cluster) unsettled(ctx context.Context) string {
	voters := min(3, len(c.nodes))
	stats := make([]map[raftstore.ShardID]*shardmetrics.ShardStat, len(c.nodes))
	for i, n := range c.nodes {
		if cmd, _ := n.running(); cmd == nil {
			return n.id + " is not running"
		}
		if _, err := c.get(ctx, i, "/readyz"); err != nil {
			return err.Error()
		}
		body, err := c.get(ctx, i, "/v1/cluster")
		if err != nil {
			return err.Error()
		}
		var view syncd.ClusterView
		if err := json.Unmarshal([]byte(body), &view); err != nil {
			return fmt.Sprintf("%s /v1/cluster: %v", n.id, err)
		}
		if len(view.Nodes) != len(c.nodes) {
			return fmt.Sprintf("%s sees %d nodes", n.id, len(view.Nodes))
		}
		for _, vn := range view.Nodes {
			if !vn.Reachable {
				return fmt.Sprintf("%s cannot reach %s", n.id, vn.ID)
			}
		}
		if len(view.Shards) < c.cfg.Shards {
			return fmt.Sprintf("%s sees %d shards", n.id, len(view.Shards))
		}
		for _, s := range view.Shards {
			if s.Leader == "" || len(s.Voters) != voters {
				return fmt.Sprintf("%s: shard %d has leader %q and voters %v", n.id, s.Shard, s.Leader, s.Voters)
			}
		}
		if stats[i], err = c.scrape(ctx, i); err != nil {
			return err.Error()
		}
	}
	commit := map[raftstore.ShardID]uint64{}
	leads := make([]int, len(c.nodes))
	for i := range stats {
		for shard, st := range stats[i] {
			commit[shard] = max(commit[shard], st.Commit)
			if st.Leader {
				leads[i]++
			}
		}
	}
	for i := range stats {
		for shard, st := range stats[i] {
			if st.Applied < commit[shard] {
				return fmt.Sprintf("%s has applied shard %d to %d of %d", c.nodes[i].id, shard, st.Applied, commit[shard])
			}
		}
	}
	if share := (len(commit) + len(c.nodes) - 1) / len(c.nodes); slices.Max(leads) > share {
		return fmt.Sprintf("leaders unbalanced: %v shards led per node", leads)
	}
	return ""
}

// CPUTime returns the CPU time (user and system) the running nodes have used since they
// started, read from /proc (Linux; elsewhere it is zero). A node restarted since counts from its
// restart.
func (c *Cluster) CPUTime() time.Duration {
	var total time.Duration
	for _, n := range c.nodes {
		if cmd, _ := n.running(); cmd != nil {
			total += ProcessCPU(cmd.Process.Pid)
		}
	}
	return total
}

// ProcessCPU returns the CPU time (user and system) process pid has used, from /proc/<pid>/stat,
// or zero if it cannot be read (not Linux, process gone). It assumes the usual 100 clock ticks
// per second.
func ProcessCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, rest, ok := strings.Cut(string(b), ") ") // the command name may hold spaces
	if !ok {
		return 0
	}
	f := strings.Fields(rest) // from field 3 (state) on: utime and stime are fields 14 and 15
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// Kill sends SIGKILL to node i and returns once the process is gone.
func (c *Cluster) Kill(i int) error {
	cmd, done := c.nodes[i].running()
	if cmd == nil {
		return fmt.Errorf("proccluster: %s is not running", c.nodes[i].id)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-done
	return nil
}

// Restart starts node i again on its data and ports and waits for the cluster to settle.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	if cmd, _ := c.nodes[i].running(); cmd != nil {
		return fmt.Errorf("proccluster: %s is running", c.nodes[i].id)
	}
	if err := c.start(c.nodes[i]); err != nil {
		return err
	}
	return c.WaitSettled(ctx)
}

// Profile takes a CPU profile of every running node for d (its /debug/pprof/profile) and writes
// them to dir as <prefix><node id>.pprof, returning the files written.
func (c *Cluster) Profile(ctx context.Context, d time.Duration, dir, prefix string) ([]string, error) {
	secs := max(1, int(d.Seconds()))
	files := make([]string, len(c.nodes))
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", n.admin, secs), nil)
			if err != nil {
				errs[i] = err
				return
			}
			resp, err := (&http.Client{Timeout: time.Duration(secs)*time.Second + 30*time.Second}).Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errs[i] = fmt.Errorf("proccluster: %s profile: %s", n.id, resp.Status)
				return
			}
			path := filepath.Join(dir, prefix+n.id+".pprof")
			f, err := os.Create(path)
			if err != nil {
				errs[i] = err
				return
			}
			if _, err := io.Copy(f, resp.Body); err != nil {
				errs[i] = errors.Join(err, f.Close())
				return
			}
			if errs[i] = f.Close(); errs[i] == nil {
				files[i] = path
			}
		})
	}
	wg.Wait()
	return slices.DeleteFunc(files, func(s string) bool { return s == "" }), errors.Join(errs...)
}

// Close stops every running node with SIGTERM, kills those still running 10 s later, and
// returns once all have exited. Its error names the nodes that had to be killed.
func (c *Cluster) Close() error {
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, n := range c.nodes {
		cmd, done := n.running()
		if cmd == nil {
			continue
		}
		wg.Go(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-done
				mu.Lock()
				errs = append(errs, fmt.Errorf("proccluster: %s did not stop within 10s and was killed; see %s", n.id, n.log))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// usedPorts are the ports freeAddr handed out in this process.
var usedPorts struct {
	sync.Mutex
	m map[int]bool
}

// freeAddr returns a 127.0.0.1 address whose port is free for both TCP and UDP, below the
// kernel's ephemeral range where it can, so that no outgoing socket takes it while its node is
// down between a kill and a restart (the same reasoning as raftstoretest.FreeAddr).
func freeAddr() (string, error) {
	lo := 0
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			lo, _ = strconv.Atoi(f[0])
		}
	}
	const floor = 10000
	usedPorts.Lock()
	defer usedPorts.Unlock()
	if usedPorts.m == nil {
		usedPorts.m = map[int]bool{}
	}
	try := func(port int) bool {
		if usedPorts.m[port] {
			return false
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return false
		}
		defer l.Close()
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return false
		}
		pc.Close()
		usedPorts.m[port] = true
		return true
	}
	if lo > floor+1000 {
		span := lo - floor
		start := int(time.Now().UnixNano() % int64(span))
		for i := range span {
			if port := floor + (start+i)%span; try(port) {
				return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
			}
		}
	}
	for range 100 { // no range below the ephemeral one: take what the kernel gives
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if try(port) {
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
		}
	}
	return "", errors.New("proccluster: no free port")
}

// sleep waits for d or ctx.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
