package raftstoretest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/test/testkit"
)

// Cluster is a static cluster of in-process nodes. Node i dials node j through a relay of a
// testkit.Mesh, which Partition, Heal and Cut block and unblock. The nodes speak mutual TLS under
// one cluster CA (ClusterTLS), as real ones do; the relays pass the TLS bytes through.
// Methods must be called from the test goroutine unless noted.
type Cluster struct {
	t     testing.TB
	cfgs  []raftstore.Config
	nodes []*raftstore.Node // nil while stopped
	// open opens node i from its config and returns what closes it (Opener); nil: raftstore.New.
	open    Opener
	closers []io.Closer
	ids     []string      // node ids, n1…
	mesh    *testkit.Mesh // relay (ids[i], ids[j]) carries i's connections to j
	// certDir holds the cluster CA (certDir/ca) and the nodes' certificates (certDir/<id>).
	certDir string
}

// NewCluster starts n nodes hosting shards, each shard bootstrapped with all n nodes as voters.
// tweak, if not nil, adjusts each node's config before start. Everything is stopped at test end.
func NewCluster(t testing.TB, n int, shards []raftstore.ShardID, tweak func(*raftstore.Config)) *Cluster {
	t.Helper()
	return NewClusterWith(t, n, shards, tweak, nil)
}

// Opener opens node i of a cluster from cfg and returns it and what closes it: a layer above
// raftstore that opens its nodes itself (the control plane, raftstore/cluster) plugs in here.
type Opener func(i int, cfg raftstore.Config) (*raftstore.Node, io.Closer, error)

// NewClusterWith is NewCluster whose nodes open (at start and at every Start) through open; nil
// means raftstore.New.
func NewClusterWith(t testing.TB, n int, shards []raftstore.ShardID, tweak func(*raftstore.Config), open Opener) *Cluster {
	t.Helper()
	c := &Cluster{t: t, nodes: make([]*raftstore.Node, n), ids: make([]string, n), open: open, closers: make([]io.Closer, n)}
	dir := t.TempDir()
	peers := make([]raftstore.Peer, n)
	addrs := map[string]string{}
	for i := range n {
		c.ids[i] = fmt.Sprintf("n%d", i+1)
		peers[i] = raftstore.Peer{ID: c.ids[i], Addr: testkit.FreeAddr(t)}
		addrs[c.ids[i]] = peers[i].Addr
	}
	mesh, err := testkit.NewMesh(addrs)
	if err != nil {
		t.Fatal(err)
	}
	c.certDir = filepath.Join(dir, "certs")
	certs := ClusterTLS(t, c.certDir, c.ids...)
	c.mesh = mesh
	t.Cleanup(c.Close) // registered now, so the relays are closed even if a start fails
	for i := range n {
		cfg := raftstore.Config{
			NodeID:   peers[i].ID,
			Dir:      filepath.Join(dir, peers[i].ID),
			RaftAddr: peers[i].Addr,
			TLS:      certs[peers[i].ID],
			Shards:   shards,
			Peers:    peers,
			PeerAddr: func(id string) string {
				if r := mesh.Relay(peers[i].ID, id); r != nil {
					return r.Addr()
				}
				return ""
			},
			Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		}
		if n == 1 {
			cfg.Peers = nil
		}
		if tweak != nil {
			tweak(&cfg)
		}
		c.cfgs = append(c.cfgs, cfg)
	}
	for i := range n {
		c.Start(i)
	}
	return c
}

// Size returns the number of nodes.
func (c *Cluster) Size() int { return len(c.nodes) }

// Node returns node i, or nil if it is stopped.
func (c *Cluster) Node(i int) *raftstore.Node { return c.nodes[i] }

// Config returns node i's configuration.
func (c *Cluster) Config(i int) raftstore.Config { return c.cfgs[i] }

// Start starts (or restarts) node i on its existing data.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	if c.nodes[i] != nil {
		return
	}
	var n *raftstore.Node
	var closer io.Closer
	var err error
	if c.open != nil {
		n, closer, err = c.open(i, c.cfgs[i])
	} else {
		n, err = raftstore.New(c.cfgs[i])
		closer = n
	}
	if err != nil {
		c.t.Fatalf("start node %d: %v", i, err)
	}
	c.nodes[i], c.closers[i] = n, closer
}

// Stop shuts node i down (gracefully; crash tests use real processes).
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	if c.nodes[i] == nil {
		return
	}
	if err := c.closers[i].Close(); err != nil {
		c.t.Errorf("stop node %d: %v", i, err)
	}
	c.nodes[i], c.closers[i] = nil, nil
}

// Partition cuts node i off from every other node (both directions); Heal restores it.
func (c *Cluster) Partition(i int) { c.mesh.Partition(c.ids[i]) }

// Heal reconnects node i.
func (c *Cluster) Heal(i int) { c.mesh.Reconnect(c.ids[i]) }

// Cut blocks (or, with blocked false, restores) only the connections node i dials to node j:
// j's connections to i keep working, an asymmetric fault.
func (c *Cluster) Cut(i, j int, blocked bool) {
	r := c.mesh.Relay(c.ids[i], c.ids[j])
	if blocked {
		r.Block()
	} else {
		r.Unblock()
	}
}

// Delay holds back everything node i sends and receives by d (0: none), on every link: with a
// d far beyond the test's timeouts the links stay up but carry nothing, a silent partition (as a
// dropped route makes) rather than the refused connections of Partition.
func (c *Cluster) Delay(i int, d time.Duration) {
	for _, id := range c.ids {
		if id == c.ids[i] {
			continue
		}
		c.mesh.Relay(c.ids[i], id).SetDelay(d)
		c.mesh.Relay(id, c.ids[i]).SetDelay(d)
	}
}

// Close stops every node and relay.
func (c *Cluster) Close() {
	for i := range c.nodes {
		c.Stop(i)
	}
	c.mesh.Close()
}

// Leader waits for a running node that leads shard and returns its index.
func (c *Cluster) Leader(shard raftstore.ShardID) int {
	c.t.Helper()
	var leader int
	testkit.WaitTrue(c.t, 10*time.Second, fmt.Sprintf("a leader for shard %d", shard), func() bool {
		for i, n := range c.nodes {
			if n == nil {
				continue
			}
			st, err := n.ShardStatus(shard)
			if err == nil && st.State == "leader" {
				leader = i
				return true
			}
		}
		return false
	})
	return leader
}

// Propose sends cmd to whichever running node leads shard, retrying while leadership moves,
// until ctx ends. A command whose outcome is unknown (leadership lost) is retried too: callers
// rely on dedup for idempotence, exactly as clients do.
func (c *Cluster) Propose(ctx context.Context, shard raftstore.ShardID, cmd raftstore.Command) (raftstore.Result, error) {
	for {
		for _, n := range c.nodes {
			if n == nil {
				continue
			}
			st, err := n.ShardStatus(shard)
			if err != nil || st.State != "leader" {
				continue
			}
			res, err := n.Propose(ctx, shard, cmd)
			if err == nil || log.Rejected(err) {
				return res, err
			}
		}
		select {
		case <-ctx.Done():
			return raftstore.Result{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WaitConverged waits until every running node that hosts shard has applied the same index of
// it, then checks their state checksums are equal and returns the applied index.
func (c *Cluster) WaitConverged(shard raftstore.ShardID) uint64 {
	c.t.Helper()
	var index uint64
	testkit.WaitTrue(c.t, 20*time.Second, fmt.Sprintf("replicas of shard %d to converge", shard), func() bool {
		index = 0
		first := true
		for _, n := range c.nodes {
			if n == nil {
				continue
			}
			st, err := n.ShardStatus(shard)
			if errors.Is(err, raftstore.ErrNoShard) {
				continue
			}
			if err != nil || st.AppliedIndex != st.CommitIndex || st.CommitIndex != st.LastIndex {
				return false
			}
			if !first && st.StateIndex != index {
				return false
			}
			index, first = st.StateIndex, false
		}
		return index > 0
	})
	var want uint64
	for i, n := range c.nodes {
		if n == nil {
			continue
		}
		state, err := n.State(shard)
		if errors.Is(err, raftstore.ErrNoShard) {
			continue
		}
		if err != nil {
			c.t.Fatal(err)
		}
		sum, _, err := state.StateChecksum()
		if err != nil {
			c.t.Fatal(err)
		}
		if want == 0 {
			want = sum
		} else if sum != want {
			c.t.Fatalf("shard %d: node %d state checksum %x differs from %x at applied index %d", shard, i, sum, want, index)
		}
	}
	return index
}

// testWriter sends log output to t.Log, so it shows only for failing tests.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// CheckConv reads conv on every running node hosting shard and checks that it holds exactly want
// entries, at positions 1..want.
func (c *Cluster) CheckConv(t testing.TB, shard raftstore.ShardID, conv string, want int) {
	t.Helper()
	for i := range c.Size() {
		n := c.Node(i)
		if n == nil {
			continue
		}
		state, err := n.State(shard)
		if errors.Is(err, raftstore.ErrNoShard) {
			continue // not a member (any more)
		}
		if err != nil {
			t.Fatal(err)
		}
		var got []log.Entry
		for from := log.Position(1); ; {
			r, err := state.ReadConv(conv, 0, from, log.Limit{Count: 100})
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != log.ReadEntries {
				break
			}
			got = append(got, r.Entries...)
			from = r.Entries[len(r.Entries)-1].Seq + 1
		}
		if len(got) != want {
			t.Fatalf("node %d: conversation %s has %d entries, want %d", i, conv, len(got), want)
		}
		for j, e := range got {
			if e.Seq != log.Position(j+1) || e.ConvSeq != e.Seq {
				t.Fatalf("node %d: entry %d at position %d", i, j, e.Seq)
			}
		}
	}
}

// DeliverOutbox delivers shard's whole outbox on node n into the shard's own user logs, as the
// fan-out does when a conversation and its members share a shard.
func DeliverOutbox(t testing.TB, ctx context.Context, n *raftstore.Node, shard raftstore.ShardID) {
	t.Helper()
	state, err := n.State(shard)
	if err != nil {
		t.Fatal(err)
	}
	for {
		mark, err := state.SourceMark(state.ID())
		if err != nil {
			t.Fatal(err)
		}
		items, err := state.ReadOutbox(mark+1, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(items) == 0 {
			return
		}
		b := &log.DeliveryBatch{Source: state.ID(), Prev: mark, Last: items[len(items)-1].Pos}
		for _, it := range items {
			b.Items = append(b.Items, log.Delivery{Pos: it.Pos, Users: it.Recipients, Entry: it.Entry})
		}
		if _, err := n.Propose(ctx, shard, raftstore.DeliverCommand(b)); err != nil {
			t.Fatal(err)
		}
	}
}
