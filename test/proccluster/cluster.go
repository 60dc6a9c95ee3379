package proccluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/test/testkit"
)

// Config describes a cluster for New. Zero fields take the documented defaults.
type Config struct {
	// Syncd is the syncd binary the nodes run (see Build): a path, or a name looked up in PATH
	// as exec.Command does. Required. Node.SetSyncd gives one node another, for a rolling upgrade.
	Syncd string
	// Dir holds the token secret (token.key), the admin token (admin.token), the certificate
	// (tls.crt, tls.key), the node plane's cluster CA (ca.crt, ca.key) with each node's
	// certificate in Dir/certs/<id>, and one directory per node, Dir/<id>, with its data and its
	// log file syncd.log. Required; created if missing. A later New on the same Dir reuses the
	// secrets, the certificates and the nodes' data.
	Dir string
	// Nodes is the number of founding nodes n1…n<Nodes>: the voters of the new cluster (given to
	// each other with -peers when there is more than one), started by Cluster.Start. Default 3.
	Nodes int
	// Spares is the number of further nodes laid out after the founding ones but left out of
	// -peers and of Cluster.Start (Node.Spare): such a node is started with Node.Start, and its
	// extra flags (Node.SetArgs) must make it join an existing node (-join). Default 0.
	Spares int
	// Shards is every node's -shards. Default 8.
	Shards int
	// BasePort, if not zero, lays the nodes out at fixed addresses: node i on NodeIP(i), clients
	// on BasePort, admin HTTP on BasePort+AdminPortOffset, Raft on BasePort+RaftPortOffset (what
	// localcluster prints and a later run finds again). Zero: every node on 127.0.0.1, on ports
	// picked free below the kernel's ephemeral range.
	BasePort int
	// Args are extra flags for every node, after the ones the harness sets (so a flag given here
	// overrides the harness's) and before the node's own (Node.SetArgs). Default none.
	Args []string
	// OnExit, if set, is called once for every exit of a node's process, with exec.Cmd.Wait's
	// error (nil for exit status 0) and whether the harness caused the exit on purpose (Kill, Stop).
	// It runs on the goroutine that waited for the process, before the methods waiting for that
	// exit return, so it must not wait for the node itself. Default none.
	OnExit func(n *Node, err error, expected bool)
}

// Cluster is a cluster of syncd processes laid out by New. Its methods are safe for concurrent
// use, except that Start, Kill and Stop (of the cluster or of one node) must not overlap for the
// same node.
type Cluster struct {
	cfg   Config
	cred  credentials
	nodes []*Node
	peers []string // id=raft address of the founding nodes, for -peers
	http  *http.Client
}

// New lays out the cluster cfg describes, starting nothing: it picks the nodes' addresses,
// creates Dir, every node's directory, and on first use the shared token secret and certificate.
// It fails if a required field is missing, a count is negative, or a file cannot be created.
func New(cfg Config) (*Cluster, error) {
	var problems []error
	if cfg.Syncd == "" {
		problems = append(problems, errors.New("proccluster: Config.Syncd is required"))
	}
	if cfg.Dir == "" {
		problems = append(problems, errors.New("proccluster: Config.Dir is required"))
	}
	if cfg.Nodes < 0 || cfg.Spares < 0 || cfg.Shards < 0 || cfg.BasePort < 0 || cfg.BasePort+RaftPortOffset > 65535 {
		problems = append(problems, fmt.Errorf("proccluster: Config: Nodes %d, Spares %d, Shards %d, BasePort %d out of range",
			cfg.Nodes, cfg.Spares, cfg.Shards, cfg.BasePort))
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.Shards == 0 {
		cfg.Shards = 8
	}
	var err error
	if cfg.Dir, err = filepath.Abs(cfg.Dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, http: &http.Client{Timeout: 5 * time.Second,
		// No idle connections: nothing lingers after a test (goleak), and a restarted node is
		// never asked over a connection to its previous run.
		Transport: &http.Transport{DisableKeepAlives: true}}}
	var ips []string
	for i := range cfg.Nodes + cfg.Spares {
		n := &Node{ID: fmt.Sprintf("n%d", i+1), Spare: i >= cfg.Nodes, c: c}
		n.Dir = filepath.Join(cfg.Dir, n.ID)
		n.Log = filepath.Join(n.Dir, "syncd.log")
		if cfg.BasePort != 0 {
			ip := NodeIP(i)
			n.ClientAddr = net.JoinHostPort(ip, strconv.Itoa(cfg.BasePort))
			n.WebAddr = net.JoinHostPort(ip, strconv.Itoa(cfg.BasePort+1)) // syncd's own default
			n.AdminAddr = net.JoinHostPort(ip, strconv.Itoa(cfg.BasePort+AdminPortOffset))
			n.RaftAddr = net.JoinHostPort(ip, strconv.Itoa(cfg.BasePort+RaftPortOffset))
			ips = append(ips, ip)
		} else {
			for _, a := range []*string{&n.ClientAddr, &n.WebAddr, &n.AdminAddr, &n.RaftAddr} {
				// Ports below the kernel's ephemeral range: an outgoing connection cannot take one
				// while its node is down between a kill and a restart.
				if *a, err = testkit.PickAddr(); err != nil {
					return nil, err
				}
			}
			ips = append(ips, "127.0.0.1")
		}
		if err := os.MkdirAll(n.Dir, 0o700); err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, n)
		if !n.Spare {
			c.peers = append(c.peers, n.ID+"="+n.RaftAddr)
		}
	}
	if c.cred, err = loadOrCreateCredentials(cfg.Dir, ips); err != nil {
		return nil, err
	}
	if err := createNodeCerts(cfg.Dir, c.nodes); err != nil {
		return nil, err
	}
	return c, nil
}

// Start starts every founding node that is not running, and returns without waiting for them to
// be ready (see WaitReady, WaitSettled). On error, the nodes it started keep running: stop them
// (Stop, Kill).
func (c *Cluster) Start() error {
	for _, n := range c.nodes {
		if n.Spare || n.Running() {
			continue
		}
		if err := n.Start(); err != nil {
			return err
		}
	}
	return nil
}

// Nodes returns the nodes, founding ones first, in id order. The caller owns the slice; the
// nodes are the cluster's.
func (c *Cluster) Nodes() []*Node { return slices.Clone(c.nodes) }

// Node returns node i (0-based: node i has id n<i+1>).
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// Size returns the number of nodes, spares included.
func (c *Cluster) Size() int { return len(c.nodes) }

// Shards returns the number of shards every node runs.
func (c *Cluster) Shards() int { return c.cfg.Shards }

// Dir returns the cluster directory (absolute).
func (c *Cluster) Dir() string { return c.cfg.Dir }

// Fingerprint returns the fingerprint of the certificate every node serves, for clients to pin.
func (c *Cluster) Fingerprint() string { return c.cred.fingerprint }

// Secret returns the token-signing secret every node uses. The caller must not modify it.
func (c *Cluster) Secret() []byte { return c.cred.secret }

// AdminToken returns the admin token every node requires on its admin HTTP API (Node.AdminDo
// sends it).
func (c *Cluster) AdminToken() string { return c.cred.adminToken }

// AdminTokenFile returns the file holding the admin token (Dir/admin.token, which every node is
// started with as -admin-token-file, and the file the admin commands of `syncctl -data-dir Dir`
// read).
func (c *Cluster) AdminTokenFile() string { return c.cred.adminTokenFile }

// SecretFile returns the file holding the token secret (Dir/token.key, the file `syncctl token
// -data-dir Dir` reads).
func (c *Cluster) SecretFile() string { return c.cred.secretFile }

// ExitError is the error of WaitReady and WaitSettled when a node exits without the harness
// having stopped or killed it.
type ExitError struct {
	Node *Node
	PID  int   // the process that exited
	Err  error // exec.Cmd.Wait's: nil for exit status 0
}

// Error names the node and its process, says how it exited and shows the tail of its log.
func (e *ExitError) Error() string {
	status := "exit status 0"
	if e.Err != nil {
		status = e.Err.Error()
	}
	return fmt.Sprintf("%s (pid %d) exited (%s); last lines of %s:\n%s", e.Node.ID, e.PID, status, e.Node.Log, indent(e.Node.LogTail(30)))
}

// exited returns an *ExitError if n's current run exited without the harness causing it.
func (n *Node) exited() error {
	if started, exited, expected, err := n.exitState(); started && exited && !expected {
		return &ExitError{Node: n, PID: n.PID(), Err: err}
	}
	return nil
}

// WaitReady polls, every 200 ms, the /readyz of every node that should be serving (started, not
// stopped or killed by the harness, not paused) until all answer 200. It returns an *ExitError
// as soon as such a node exits, an error listing the nodes not ready with the tail of their logs
// once timeout has passed, and ctx's error once ctx is done.
func (c *Cluster) WaitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var notReady []string
		for _, n := range c.nodes {
			if err := n.exited(); err != nil {
				return err
			}
			if !n.Serving() {
				continue
			}
			if err := n.Ready(ctx); err != nil {
				notReady = append(notReady, fmt.Sprintf("%s (admin %s): %v; last lines of %s:\n%s",
					n.ID, n.AdminAddr, err, n.Log, indent(n.LogTail(20))))
			}
		}
		if len(notReady) == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not every node was ready after %v:\n%s", timeout, strings.Join(notReady, "\n"))
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// Leaders returns, per shard, the serving node that claims to lead it in the highest term (a
// deposed leader may still claim an older term for a moment), from every serving node's
// /metrics. Shards without a leader are absent; a node that does not answer is left out. The
// caller owns the map.
func (c *Cluster) Leaders(ctx context.Context) map[raftstore.ShardID]*Node {
	out := map[raftstore.ShardID]*Node{}
	terms := map[raftstore.ShardID]uint64{}
	for _, n := range c.nodes {
		if !n.Serving() {
			continue
		}
		stats, err := n.Metrics(ctx)
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

// WaitSettled waits, checking every second for up to timeout, until the cluster is fit to
// measure: every node started so far runs and answers /readyz; every node's cluster view lists
// those nodes, all reachable, and gives every shard a leader and min(3, nodes) voters; on every
// shard, every replica has applied the highest commit index any reports; no node leads more than
// its share of the shards (the nodes' leader balancing has finished); and the shard leaders are
// the same at two checks a second apart. It returns an *ExitError as soon as a node exits without
// the harness causing it, and ctx's error once ctx is done.
func (c *Cluster) WaitSettled(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var prev map[raftstore.ShardID]*Node
	for {
		for _, n := range c.nodes {
			if err := n.exited(); err != nil {
				return err
			}
		}
		why := c.unsettled(ctx)
		var cur map[raftstore.ShardID]*Node
		if why == "" {
			cur = c.Leaders(ctx)
			if !maps.Equal(cur, prev) {
				why = "leaders changing"
			}
		}
		if why == "" {
			return nil
		}
		prev = cur
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("proccluster: not settled after %v: %s (node logs in %s)", timeout, why, c.cfg.Dir)
		}
		if err := sleep(ctx, time.Second); err != nil {
			return err
		}
	}
}

// unsettled returns why the cluster is not settled yet (leader stability aside), or "".
func (c *Cluster) unsettled(ctx context.Context) string {
	var members []*Node
	for _, n := range c.nodes {
		if n.Starts() > 0 {
			members = append(members, n)
		}
	}
	if len(members) == 0 {
		return "no node started"
	}
	voters := min(3, len(members))
	stats := make([]map[raftstore.ShardID]*ShardStat, len(members))
	for i, n := range members {
		if !n.Serving() {
			return n.ID + " is not serving"
		}
		if err := n.Ready(ctx); err != nil {
			return n.ID + ": " + err.Error()
		}
		view, err := n.ClusterView(ctx)
		if err != nil {
			return err.Error()
		}
		if len(view.Nodes) != len(members) {
			return fmt.Sprintf("%s sees %d nodes", n.ID, len(view.Nodes))
		}
		for _, vn := range view.Nodes {
			if !vn.Reachable {
				return fmt.Sprintf("%s cannot reach %s", n.ID, vn.ID)
			}
		}
		if len(view.Shards) < c.cfg.Shards {
			return fmt.Sprintf("%s sees %d shards", n.ID, len(view.Shards))
		}
		for _, s := range view.Shards {
			if s.Leader == "" || len(s.Voters) != voters {
				return fmt.Sprintf("%s: shard %d has leader %q and voters %v", n.ID, s.Shard, s.Leader, s.Voters)
			}
		}
		if stats[i], err = n.Metrics(ctx); err != nil {
			return err.Error()
		}
	}
	commit := map[raftstore.ShardID]uint64{}
	leads := make([]int, len(members))
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
				return fmt.Sprintf("%s has applied shard %d to %d of %d", members[i].ID, shard, st.Applied, commit[shard])
			}
		}
	}
	if share := (len(commit) + len(members) - 1) / len(members); slices.Max(leads) > share {
		return fmt.Sprintf("leaders unbalanced: %v shards led per node", leads)
	}
	return ""
}

// Stop stops every running node at once as Node.Stop does (SIGTERM, SIGKILL after timeout) and
// returns once all have exited. Its error joins the nodes' errors, in node order.
func (c *Cluster) Stop(timeout time.Duration) error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		if n.Running() {
			wg.Go(func() { errs[i] = n.Stop(timeout) })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Kill kills every running node with SIGKILL and returns once all have exited.
func (c *Cluster) Kill() error {
	var errs []error
	for _, n := range c.nodes {
		if n.Running() {
			errs = append(errs, n.Kill())
		}
	}
	return errors.Join(errs...)
}

// indent prefixes every line of s with two spaces.
func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }

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
