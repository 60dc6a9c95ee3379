package syncdtest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/nodecert"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/auth"
	"github.com/syncd-dev/syncd/test/testkit"
)

// Cluster is a static cluster of in-process servers on loopback, each with its own data
// directory, Raft, QUIC and admin ports, forming a managed cluster (replication factor 3). They
// share one token secret and one certificate, as a real cluster would, so a token and a pinned
// fingerprint are valid on any node. Every port comes from testkit.FreeAddr and a restarted
// node binds the same ones, so peers and devices find it again: a port from ":0" lies in the
// ephemeral range, where any outgoing socket may take it while the node is down. The node plane
// runs mutual TLS under one cluster CA, each node's certificate in its data directory, as
// `syncctl cert create-node -dir <data dir>` leaves it. Started with StartClusterThroughRelays,
// the nodes reach each other through relays a test can cut (Mesh). Methods must be called from
// the test goroutine.
type Cluster struct {
	t       testing.TB
	mesh    *testkit.Mesh // the relays node-to-node traffic goes through; nil: none
	caDir   string        // the cluster CA (ca.crt, ca.key)
	cfgs    []syncd.Config
	servers []*syncd.Server
	stops   []func()
}

// StartCluster runs n servers and returns once every node has the cluster map, listing every
// node, and knows a leader for every shard it hosts. tweak, if not nil,
// adjusts each node's config (index i) first. Everything is stopped when the test ends.
func StartCluster(t testing.TB, n int, tweak func(i int, c *syncd.Config)) *Cluster {
	t.Helper()
	return startCluster(t, n, tweak, false)
}

// StartClusterThroughRelays is StartCluster with every node-to-node connection (Raft, forwarded
// proposals, calls) going through a relay of a testkit.Mesh (Mesh), so a test can cut links:
// each node's PeerDial names the relays.
func StartClusterThroughRelays(t testing.TB, n int, tweak func(i int, c *syncd.Config)) *Cluster {
	t.Helper()
	return startCluster(t, n, tweak, true)
}

// Mesh returns the relays of a cluster started with StartClusterThroughRelays, else nil.
func (c *Cluster) Mesh() *testkit.Mesh { return c.mesh }

func startCluster(t testing.TB, n int, tweak func(i int, c *syncd.Config), relays bool) *Cluster {
	t.Helper()
	secret := make([]byte, 32)
	rand.Read(secret)
	dir := t.TempDir()
	if _, _, err := auth.SelfSignedCert(dir, nil); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, auth.TLSCertFile), filepath.Join(dir, auth.TLSKeyFile)
	peers := make([]raftstore.Peer, n)
	for i := range peers {
		peers[i] = raftstore.Peer{ID: fmt.Sprintf("n%d", i+1), Addr: testkit.FreeAddr(t)}
	}
	c := &Cluster{t: t, caDir: filepath.Join(dir, "ca"), servers: make([]*syncd.Server, n), stops: make([]func(), n)}
	if err := nodecert.CreateCA(c.caDir); err != nil {
		t.Fatal(err)
	}
	if relays {
		addrs := map[string]string{}
		for _, p := range peers {
			addrs[p.ID] = p.Addr
		}
		var err error
		if c.mesh, err = testkit.NewMesh(addrs); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.mesh.Close) // after the servers' cleanup below: cleanups run last first
	}
	for i := range n {
		cfg := syncd.Config{Dir: filepath.Join(dir, peers[i].ID), NodeID: peers[i].ID, RaftAddr: peers[i].Addr, Peers: peers,
			ListenAddr: testkit.FreeAddr(t), WebAddr: testkit.FreeAddr(t), AdminAddr: testkit.FreeAddr(t), Shards: 4, TokenSecret: secret, Logger: Logger(t),
			CertFile: certFile, KeyFile: keyFile}
		if c.mesh != nil {
			cfg.PeerDial = c.mesh.DialMap(peers[i].ID)
		}
		if tweak != nil {
			tweak(i, &cfg)
		}
		c.cfgs = append(c.cfgs, cfg)
	}
	t.Cleanup(func() {
		for i := range c.servers {
			c.Stop(i)
		}
	})
	for i := range n {
		c.create(i)
	}
	for i := range n {
		c.run(i)
	}
	testkit.WaitTrue(t, 30*time.Second, "every node to have the cluster map", func() bool {
		for _, srv := range c.servers {
			if m, _ := srv.Cluster().Map(); m.Shards == 0 || len(m.Nodes) != n {
				return false
			}
		}
		return true
	})
	c.WaitLeaders()
	return c
}

// Join starts one more node that joins the cluster through node 0, and returns its index.
func (c *Cluster) Join(tweak func(c *syncd.Config)) int {
	c.t.Helper()
	i := len(c.cfgs)
	id := fmt.Sprintf("n%d", i+1)
	first := c.cfgs[0]
	cfg := syncd.Config{Dir: filepath.Join(filepath.Dir(first.Dir), id), NodeID: id, RaftAddr: testkit.FreeAddr(c.t),
		Join: first.RaftAddr, ListenAddr: testkit.FreeAddr(c.t), WebAddr: testkit.FreeAddr(c.t), AdminAddr: testkit.FreeAddr(c.t), Shards: first.Shards,
		TokenSecret: first.TokenSecret, Logger: first.Logger, CertFile: first.CertFile, KeyFile: first.KeyFile}
	if tweak != nil {
		tweak(&cfg)
	}
	c.cfgs = append(c.cfgs, cfg)
	c.servers = append(c.servers, nil)
	c.stops = append(c.stops, nil)
	c.create(i)
	c.run(i)
	return i
}

// Server returns node i, or nil while it is stopped.
func (c *Cluster) Server(i int) *syncd.Server { return c.servers[i] }

// Size returns the number of nodes.
func (c *Cluster) Size() int { return len(c.servers) }

func (c *Cluster) create(i int) {
	cfg := c.cfgs[i]
	if _, err := os.Stat(filepath.Join(cfg.Dir, nodecert.CertFile)); errors.Is(err, fs.ErrNotExist) {
		err := nodecert.Create(cfg.Dir, filepath.Join(c.caDir, nodecert.CAFile), filepath.Join(c.caDir, nodecert.CAKeyFile), cfg.NodeID, nil)
		if err != nil {
			c.t.Fatalf("node %d: %v", i, err)
		}
	}
	srv, err := syncd.NewServer(cfg)
	if err != nil {
		c.t.Fatalf("node %d: %v", i, err)
	}
	c.servers[i] = srv
}

func (c *Cluster) run(i int) {
	srv := c.servers[i]
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	c.stops[i] = func() {
		cancel()
		if err := awaitShutdown(c.t, done); err != nil {
			c.t.Errorf("node %d shutdown: %v", i, err)
		}
	}
}

// Stop shuts node i down gracefully (crash tests use real processes).
func (c *Cluster) Stop(i int) {
	if c.stops[i] != nil {
		c.stops[i]()
		c.stops[i], c.servers[i] = nil, nil
	}
}

// Start restarts a stopped node i on its data, on the same ports.
func (c *Cluster) Start(i int) { c.StartWith(i, nil) }

// StartWith restarts a stopped node i like Start, with its config adjusted by tweak first.
func (c *Cluster) StartWith(i int, tweak func(*syncd.Config)) {
	if tweak != nil {
		tweak(&c.cfgs[i])
	}
	c.create(i)
	c.run(i)
}

// WaitLeaders waits until every running node knows a leader for every shard.
func (c *Cluster) WaitLeaders() {
	c.t.Helper()
	for i, srv := range c.servers {
		if srv == nil {
			continue
		}
		for _, id := range srv.Node().Shards() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			_, _, err := srv.Node().WaitLeader(ctx, id)
			cancel()
			if err != nil {
				c.t.Fatalf("node %d, shard %d: %v", i, id, err)
			}
		}
	}
}

// LeaderOf returns the index of the running node that leads shard, or -1.
func (c *Cluster) LeaderOf(shard raftstore.ShardID) int {
	for i, srv := range c.servers {
		if srv == nil {
			continue
		}
		if st, err := srv.Node().ShardStatus(shard); err == nil && st.State == "leader" {
			return i
		}
	}
	return -1
}
