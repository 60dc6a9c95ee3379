package cluster_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/test/testkit"
)

const managedShards = 4

// message is alice's message to bob with client id cmid.
func message(cmid string) raftstore.Command {
	return raftstore.AppendCommand(&log.Append{Conv: "d:alice:bob", Sender: "alice", ClientMsgID: cmid,
		Kind: log.KindMessage, Body: []byte("x"), Members: []string{"alice", "bob"}})
}

// managedNodes is a managed cluster of test nodes: the raftstore harness (relays, certificates,
// stop and start) with a cluster.Cluster per running node.
type managedNodes struct {
	*raftstoretest.Cluster
	members []*cluster.Cluster // nil while stopped
}

// Member returns node i's part of the cluster, nil while it is stopped.
func (c *managedNodes) Member(i int) *cluster.Cluster {
	if c.Node(i) == nil {
		return nil
	}
	return c.members[i]
}

// managedCluster starts n nodes of a managed cluster; the first `first` of them create it (their
// Peers), the others join it through the first node. tweak, if set, changes each node's config.
func managedCluster(t *testing.T, n, first int, tweak func(*raftstore.Config)) *managedNodes {
	t.Helper()
	c := &managedNodes{members: make([]*cluster.Cluster, n)}
	var joinAddr string
	open := func(i int, cfg raftstore.Config) (*raftstore.Node, io.Closer, error) {
		ccfg := cluster.Config{Node: cfg, ShardCount: managedShards, ReplicationFactor: 3,
			ReconcileInterval: 100 * time.Millisecond, DeadAfter: 2 * time.Second}
		if i < first {
			ccfg.Node.Peers = cfg.Peers[:first]
		} else {
			ccfg.Node.Peers, ccfg.Join = nil, joinAddr
		}
		m, err := cluster.Start(ccfg)
		if err != nil {
			return nil, nil, err
		}
		c.members[i] = m
		return m.Node(), m, nil
	}
	c.Cluster = raftstoretest.NewClusterWith(t, n, nil, func(cfg *raftstore.Config) {
		if joinAddr == "" {
			joinAddr = cfg.PeerAddr(cfg.Peers[0].ID) // through the relay, like all traffic
		}
		cfg.Shards, cfg.BalanceInterval = nil, 200*time.Millisecond
		if tweak != nil {
			tweak(cfg)
		}
	}, open)
	return c
}

// placementSettled waits until the cluster map is the same on every running node, every data
// shard has exactly the map's members as voters, and each running node's load is within one of
// the others', and returns the map.
func placementSettled(t *testing.T, c *managedNodes, what string) cluster.ClusterMap {
	t.Helper()
	var m cluster.ClusterMap
	testkit.WaitTrue(t, 60*time.Second, what, func() bool {
		var maps []cluster.ClusterMap
		for i := range c.Size() {
			if n := c.Member(i); n != nil {
				mm, _ := n.Map()
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
	c := managedCluster(t, 4, 3, nil)

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
				if _, err := c.Propose(ctx, s, message(fmt.Sprint("m", i))); err != nil {
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
	if err := c.Member(3).RemoveNode(ctx, "n1"); err != nil { // asked through another node
		t.Fatal(err)
	}
	testkit.WaitTrue(t, 60*time.Second, "n1 to be forgotten and to host nothing", func() bool {
		m, _ := c.Member(1).Map()
		_, still := m.Nodes["n1"]
		return !still && len(c.Node(0).Shards()) == 0
	})
	m = placementSettled(t, c, "the placement without n1")
	stopOnce.Do(func() { close(stop) })
	wg.Wait()
	for _, s := range m.DataShards() {
		c.WaitConverged(s)
		c.CheckConv(t, s, "d:alice:bob", sent[s])
	}
	t.Logf("final placement %v; sent %v", m.Replicas, sent)
}

// TestManagedClusterDeadNode: when a node of four stops answering, its replicas are placed on
// the three others after DeadAfter; when it comes back, its stale replicas are dropped and it
// takes its share again.
func TestManagedClusterDeadNode(t *testing.T) {
	c := managedCluster(t, 4, 4, nil)
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
	c := managedCluster(t, 4, 4, nil)
	before := placementSettled(t, c, "the first placement")
	asker := 0
	for i := range c.Size() {
		if !c.Member(i).LeadsMeta() {
			asker = i
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := c.Member(asker).AddShard(ctx)
	if err != nil || id != managedShards+1 {
		t.Fatalf("AddShard: shard %d, %v; want %d", id, err, managedShards+1)
	}
	m := placementSettled(t, c, "the new shard's group to be created and placed")
	if m.Shards != managedShards+1 || len(m.Replicas[id]) != 3 || !slices.Equal(m.Slots, before.Slots) {
		t.Fatalf("after adding shard %d: %d shards, members %v, slots changed %v", id, m.Shards, m.Replicas[id], !slices.Equal(m.Slots, before.Slots))
	}
	// Asking again for the same id (a resent request) adds nothing.
	if err := c.Member(asker).ResendAddShard(ctx, id); err != nil {
		t.Fatal(err)
	}
	if m2, _ := c.Member(asker).Map(); m2.Shards != managedShards+1 {
		t.Fatalf("a resent add-shard made %d shards", m2.Shards)
	}
	for i := range 20 {
		if _, err := c.Propose(ctx, id, message(fmt.Sprint("m", i))); err != nil {
			t.Fatalf("send %d to the new shard: %v", i, err)
		}
	}
	c.WaitConverged(id)
	c.CheckConv(t, id, "d:alice:bob", 20)
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
	if _, err := c.Propose(ctx, id, message("m20")); err != nil {
		t.Fatalf("send after the restarts: %v", err)
	}
	c.WaitConverged(id)
	c.CheckConv(t, id, "d:alice:bob", 21)
}
