package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/bench"
	"github.com/syncd-dev/syncd/bench/procstat"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/test/proccluster"
)

// Timeouts of the process cluster.
const (
	settleTimeout = 90 * time.Second // each wait for the cluster to settle (start, restart)
	stopGrace     = 10 * time.Second // SIGTERM to SIGKILL when the cluster is closed
)

// procCluster is a syncd cluster of child processes (test/proccluster) as the cluster scenarios
// see it: it implements bench.Cluster, and adds the CPU accounting and profiles of the runs.
// Node i of bench.Cluster is the harness's node i. Its methods are safe for concurrent use,
// except that Kill, Restart and Close must not overlap for the same node.
type procCluster struct {
	pc    *proccluster.Cluster
	slots *cluster.Routing // a new cluster's routing, to find a key's shard
}

// startProcCluster starts nodes syncd processes of bin with shards shards in dir and returns once
// the cluster has settled (proccluster.Cluster.WaitSettled). With one node there are no peers:
// the node runs exactly as `syncd` does alone. extra are further flags for every node (after the
// harness's and the bench's own, so they override them). On error the nodes started are stopped
// again.
func startProcCluster(ctx context.Context, bin, dir string, nodes, shards int, extra ...string) (*procCluster, error) {
	pc, err := proccluster.New(proccluster.Config{Syncd: bin, Dir: dir, Nodes: nodes, Shards: shards,
		Args: append([]string{"-send-rate", "1000000", "-send-burst", "1000000", // the bench measures the server, not the per-device limit
			"-log-level", "warn"}, extra...)})
	if err != nil {
		return nil, err
	}
	c := &procCluster{pc: pc, slots: cluster.Even(pc.Shards())}
	if err := pc.Start(); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	if err := pc.WaitSettled(ctx, settleTimeout); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

// Size returns the number of nodes.
func (c *procCluster) Size() int { return c.pc.Size() }

// Target returns a target whose devices are spread over every node.
func (c *procCluster) Target() bench.Target {
	t := c.NodeTarget(0)
	for _, n := range c.pc.Nodes() {
		t.Addrs = append(t.Addrs, n.ClientAddr)
	}
	return t
}

// NodeTarget returns a target whose devices connect to node i, with one-hour tokens.
func (c *procCluster) NodeTarget(i int) bench.Target {
	return bench.Target{Addr: c.pc.Node(i).ClientAddr, Fingerprint: c.pc.Fingerprint(),
		Token: func(user, device string) (string, error) { return c.pc.Token(user, device, time.Hour) }}
}

// ConvLeader returns the node leading conversation conv's home shard, waiting up to 10 s for
// one.
func (c *procCluster) ConvLeader(ctx context.Context, conv string) (int, error) {
	return c.leaderOf(ctx, c.slots.ConvShard(conv))
}

// UserLeader returns the node leading the shard of user's log, waiting up to 10 s for one.
func (c *procCluster) UserLeader(ctx context.Context, user string) (int, error) {
	return c.leaderOf(ctx, c.slots.UserShard(user))
}

func (c *procCluster) leaderOf(ctx context.Context, shard raftstore.ShardID) (int, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if n, ok := c.pc.Leaders(ctx)[shard]; ok {
			return slices.Index(c.pc.Nodes(), n), nil
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("syncbench: no leader for shard %d", shard)
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Kill sends SIGKILL to node i and returns once the process is gone.
func (c *procCluster) Kill(i int) error { return c.pc.Node(i).Kill() }

// Restart starts node i again on its data and ports and waits for the cluster to settle.
func (c *procCluster) Restart(ctx context.Context, i int) error {
	if err := c.pc.Node(i).Start(); err != nil {
		return err
	}
	return c.pc.WaitSettled(ctx, settleTimeout)
}

// Close stops every running node with SIGTERM, kills those still running 10 s later, and returns
// once all have exited. Its error names the nodes that were killed or did not exit cleanly.
func (c *procCluster) Close() error { return c.pc.Stop(stopGrace) }

// CPUTime returns the CPU time (user and system) the running nodes have used since they
// started, read from /proc (Linux; elsewhere it is zero). A node restarted since counts from its
// restart.
func (c *procCluster) CPUTime() time.Duration {
	var total time.Duration
	for _, n := range c.pc.Nodes() {
		if n.Running() {
			total += procstat.CPU(n.PID())
		}
	}
	return total
}

// WriteBytes returns the bytes the running nodes have caused to be written to disk since they
// started (/proc/<pid>/io write_bytes; zero elsewhere).
func (c *procCluster) WriteBytes() int64 {
	var total int64
	for _, n := range c.pc.Nodes() {
		if n.Running() {
			total += procstat.WriteBytes(n.PID())
		}
	}
	return total
}

// RaftEntries returns the Raft entries the data shards have committed so far: per shard the
// highest commit index any running node reports, summed. A node that does not answer counts
// nothing for its shards.
func (c *procCluster) RaftEntries(ctx context.Context) uint64 {
	commit := map[raftstore.ShardID]uint64{}
	for _, n := range c.pc.Nodes() {
		if !n.Running() {
			continue
		}
		stats, err := n.Metrics(ctx)
		if err != nil {
			continue
		}
		for id, st := range stats {
			if id != raftstore.MetaShard {
				commit[id] = max(commit[id], st.Commit)
			}
		}
	}
	var total uint64
	for _, v := range commit {
		total += v
	}
	return total
}

// Profile takes a CPU profile of every running node for d (its /debug/pprof/profile) and writes
// them to dir as <prefix><node id>.pprof, returning the files written.
func (c *procCluster) Profile(ctx context.Context, d time.Duration, dir, prefix string) ([]string, error) {
	secs := max(1, int(d.Seconds()))
	// The profile takes secs to answer: longer than the harness's admin timeout.
	client := &http.Client{Timeout: time.Duration(secs)*time.Second + 30*time.Second}
	nodes := c.pc.Nodes()
	files := make([]string, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		if !n.Running() {
			continue
		}
		wg.Go(func() {
			req, err := n.AdminRequest(ctx, http.MethodGet, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs))
			if err != nil {
				errs[i] = err
				return
			}
			resp, err := client.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errs[i] = fmt.Errorf("syncbench: %s profile: %s", n.ID, resp.Status)
				return
			}
			path := filepath.Join(dir, prefix+n.ID+".pprof")
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
