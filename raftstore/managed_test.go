package raftstore_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/test/testkit"
)

const managedShards = 4

// managedCluster starts n nodes of a managed cluster; the first `first` of them create it (their
// Peers), the others join it through the first node.
func managedCluster(t *testing.T, n, first int) *raftstoretest.Cluster {
	t.Helper()
	var joinAddr string
	return raftstoretest.NewCluster(t, n, nil, func(cfg *raftstore.Config) {
		peers := cfg.Peers
		cfg.Shards = nil
		cfg.Managed, cfg.ShardCount, cfg.ReplicationFactor = true, managedShards, 3
		cfg.ReconcileInterval, cfg.DeadAfter, cfg.BalanceInterval = 100*time.Millisecond, 2*time.Second, 200*time.Millisecond
		if joinAddr == "" {
			joinAddr = peers[0].Addr
		}
		i := slices.IndexFunc(peers, func(p raftstore.Peer) bool { return p.ID == cfg.NodeID })
		if i < first {
			cfg.Peers = peers[:first]
		} else {
			cfg.Peers, cfg.Join = nil, cfg.PeerAddr(peers[0].ID) // through the relay, like all traffic
		}
	})
}

// placementSettled waits until the cluster map is the same on every running node, every data
// shard has exactly the map's members as voters, and each running node's load is within one of
// the others', and returns the map.
func placementSettled(t *testing.T, c *raftstoretest.Cluster, what string) raftstore.ClusterMap {
	t.Helper()
	var m raftstore.ClusterMap
	testkit.WaitTrue(t, 60*time.Second, what, func() bool {
		var maps []raftstore.ClusterMap
		for i := range c.Size() {
			if n := c.Node(i); n != nil {
				mm, _ := n.ClusterMap()
				maps = append(maps, mm)
			}
		}
		m = maps[0]
		if m.Shards < managedShards || len(m.Creating) > 0 {
			return false
		}
		for _, o := range maps[1:] {
			if o.Index != m.Index {
				return false
			}
		}
		load := map[string]int{}
		for _, s := range m.DataShards() {
			for _, id := range m.Replicas[s] {
				load[id]++
			}
			hosts := 0
			for i := range c.Size() {
				n := c.Node(i)
				if n == nil {
					continue
				}
				st, err := n.ShardStatus(s)
				if err != nil {
					continue
				}
				hosts++
				if st.State == "leader" {
					var voters []string
					for _, v := range st.Voters {
						voters = append(voters, v.ID)
					}
					slices.Sort(voters)
					if len(st.Nonvoters) > 0 || !slices.Equal(voters, m.Replicas[s]) {
						return false
					}
				}
			}
			if hosts != len(m.Replicas[s]) {
				return false // a replica not yet started or not yet dropped
			}
		}
		lo, hi := 1<<30, 0
		for i := range c.Size() { // the running nodes that are not being removed
			id := c.Config(i).NodeID
			if node, ok := m.Nodes[id]; c.Node(i) == nil || !ok || node.Removing {
				continue
			}
			lo, hi = min(lo, load[id]), max(hi, load[id])
		}
		return hi-lo <= 1
	})
	return m
}

// TestManagedClusterJoinAndRemove: three nodes create a managed cluster and a fourth joins it
// under traffic, taking its share of replicas (one move at a time); then a first node is removed
// and its replicas move to the others. Every acknowledged entry is on every replica exactly once.
func TestManagedClusterJoinAndRemove(t *testing.T) {
	c := managedCluster(t, 4, 3)

	var mu sync.Mutex
	sent := map[raftstore.ShardID]int{}
	stop := make(chan struct{})
	var stopOnce sync.Once
	var wg sync.WaitGroup
	t.Cleanup(func() { // before the cluster's own cleanup, even when the test fails early
		stopOnce.Do(func() { close(stop) })
		wg.Wait()
	})
	for s := raftstore.ShardID(1); s <= managedShards; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.Propose(ctx, s, send("d:alice:bob", "alice", fmt.Sprint("m", i), "x", "alice", "bob")); err != nil {
					t.Errorf("shard %d send %d: %v", s, i, err)
					return
				}
				mu.Lock()
				sent[s] = i + 1
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}

	m := placementSettled(t, c, "n4 to join and take its share")
	load := 0
	for _, s := range m.DataShards() {
		if slices.Contains(m.Replicas[s], "n4") {
			load++
		}
	}
	if _, ok := m.Nodes["n4"]; !ok || load < 2 {
		t.Fatalf("after the join: %+v", m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Node(3).RemoveNode(ctx, "n1"); err != nil { // asked through another node
		t.Fatal(err)
	}
	testkit.WaitTrue(t, 60*time.Second, "n1 to be forgotten and to host nothing", func() bool {
		m, _ := c.Node(1).ClusterMap()
		_, still := m.Nodes["n1"]
		return !still && len(c.Node(0).Shards()) == 0
	})
	m = placementSettled(t, c, "the placement without n1")
	stopOnce.Do(func() { close(stop) })
	wg.Wait()
	for _, s := range m.DataShards() {
		c.WaitConverged(s)
		checkConv(t, c, s, "d:alice:bob", sent[s])
	}
	t.Logf("final placement %v; sent %v", m.Replicas, sent)
}

// TestManagedClusterDeadNode: when a node of four stops answering, its replicas are placed on
// the three others after DeadAfter; when it comes back, its stale replicas are dropped and it
// takes its share again.
func TestManagedClusterDeadNode(t *testing.T) {
	c := managedCluster(t, 4, 4)
	placementSettled(t, c, "the first placement")
	c.Stop(3)
	m := placementSettled(t, c, "n4's replicas placed elsewhere")
	for _, s := range m.DataShards() {
		if slices.Contains(m.Replicas[s], "n4") || len(m.Replicas[s]) != 3 {
			t.Fatalf("shard %d on %v with n4 dead", s, m.Replicas[s])
		}
	}
	c.Start(3)
	m = placementSettled(t, c, "n4 back with its share")
	held := 0
	for _, s := range m.DataShards() {
		if slices.Contains(m.Replicas[s], "n4") {
			held++
		}
	}
	if held < 2 {
		t.Fatalf("n4 holds %d shards after its return: %v", held, m.Replicas)
	}
	for _, s := range m.DataShards() {
		c.WaitConverged(s)
	}
}

// TestManagedClusterAddShard: a shard added online to a running cluster of four (asked through a
// node that does not lead the meta shard) gets a Raft group of three voters with a leader, is
// taken off the list of shards being created, takes writes, and survives its members' restart;
// the slot table is unchanged (the new shard owns no slot until slots are moved to it).
func TestManagedClusterAddShard(t *testing.T) {
	c := managedCluster(t, 4, 4)
	before := placementSettled(t, c, "the first placement")
	asker := 0
	for i := range c.Size() {
		if st, err := c.Node(i).ShardStatus(raftstore.MetaShard); err == nil && st.State != "leader" {
			asker = i
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := c.Node(asker).AddShard(ctx)
	if err != nil || id != managedShards+1 {
		t.Fatalf("AddShard: shard %d, %v; want %d", id, err, managedShards+1)
	}
	m := placementSettled(t, c, "the new shard's group to be created and placed")
	if m.Shards != managedShards+1 || len(m.Replicas[id]) != 3 || !slices.Equal(m.Slots, before.Slots) {
		t.Fatalf("after adding shard %d: %d shards, members %v, slots changed %v", id, m.Shards, m.Replicas[id], !slices.Equal(m.Slots, before.Slots))
	}
	// Asking again for the same id (a resent request) adds nothing.
	if err := c.Node(asker).ProposeMeta(ctx, raftstore.AddShardCommand(id)); err != nil {
		t.Fatal(err)
	}
	if m2, _ := c.Node(asker).ClusterMap(); m2.Shards != managedShards+1 {
		t.Fatalf("a resent add-shard made %d shards", m2.Shards)
	}
	for i := range 20 {
		if _, err := c.Propose(ctx, id, send("d:alice:bob", "alice", fmt.Sprint("m", i), "x", "alice", "bob")); err != nil {
			t.Fatalf("send %d to the new shard: %v", i, err)
		}
	}
	c.WaitConverged(id)
	checkConv(t, c, id, "d:alice:bob", 20)
	for _, member := range m.Replicas[id] { // every member restarts: the group is on disk, not recreated
		i := -1
		for j := range c.Size() {
			if c.Config(j).NodeID == member {
				i = j
			}
		}
		c.Stop(i)
		c.Start(i)
	}
	placementSettled(t, c, "the new shard after its members restarted")
	if _, err := c.Propose(ctx, id, send("d:alice:bob", "alice", "m20", "x", "alice", "bob")); err != nil {
		t.Fatalf("send after the restarts: %v", err)
	}
	c.WaitConverged(id)
	checkConv(t, c, id, "d:alice:bob", 21)
}
