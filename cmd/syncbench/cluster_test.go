package main

import (
	"context"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/bench"
	"github.com/syncd-dev/syncd/test/proccluster"
)

// TestClusterScenarios runs the cluster scenarios end to end with tiny parameters against three
// syncd child processes built from this checkout: sends from devices spread over the nodes,
// delivery across nodes, catch-up through the leader's and a follower's node, and one leader
// kill with nothing acked lost. It lives here, beside procCluster (the bench.Cluster of child
// processes), because package bench itself speaks only the protocol.
func TestClusterScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/syncd and runs three processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bins, err := proccluster.Build(ctx, proccluster.BuildConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	c, err := startProcCluster(ctx, bins.Syncd, dir, 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})

	s, err := bench.Sends(ctx, c.Target(), 6, 3, time.Second, 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sends: %.0f acked/s, p50 %v, p99 %v", s.PerSec, s.P50, s.P99)

	// The peers' spread, measured as -scenario peers does: every send is at least its append's
	// Raft entry and its delivery's, and the nodes wrote to disk for it.
	spread := measureSends(ctx, options{repeat: 1, senders: 3, duration: time.Second, body: 64}, "3 nodes", c, 50)
	if len(spread) != 1 || spread[0].res.Acked == 0 || spread[0].entriesPerAck < 1 || spread[0].diskPerAck <= 0 {
		t.Fatalf("sends on the peers' spread: %+v", spread)
	}
	t.Logf("peers' spread: %.0f acked/s; %v", spread[0].res.PerSec, spread[0].cpuUse)

	d, err := bench.Delivery(ctx, c.Target(), 50, 4, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("delivery: %d entries, p99 %v", d.Count, d.P99)

	cu, err := bench.CatchUpReplicas(ctx, c, 300, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(cu.Leader) != 1 || len(cu.Follower) != 1 || cu.Leader[0].Entries < 300 || cu.Follower[0].Entries != cu.Leader[0].Entries {
		t.Fatalf("catch-up: %+v", cu)
	}
	t.Logf("catch-up: leader %.0f, follower %.0f entries/s", cu.Leader[0].PerSec, cu.Follower[0].PerSec)

	f, err := bench.Failover(ctx, c, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover: %+v", f)
	if f.Failover <= 0 || f.Acked == 0 || f.Lost != 0 || f.Duplicates != 0 {
		t.Fatalf("failover: %+v", f)
	}

	// A hot user's phases, and a hot group's (-hot-group: eight members all writing to it), each
	// with its move to a shard of its own in the middle (-scenario hot).
	for _, hot := range []struct {
		name, kind, key string
		cfg             bench.HotConfig
	}{
		{"hot user", "user", "hot", bench.HotConfig{User: "hot", Senders: 8, Workers: 4}},
		{"hot group", "conv", "g:hot", bench.HotConfig{User: "owner", Group: "g:hot", Senders: 8, Workers: 4}},
	} {
		var pause time.Duration
		phases, err := bench.Hot(ctx, c.Target(), hot.cfg, []bench.HotStep{
			{Name: "before", D: 500 * time.Millisecond},
			{Name: "move", Action: func(ctx context.Context) error {
				var err error
				pause, _, err = moveKey(ctx, c, hot.kind, hot.key)
				return err
			}},
			{Name: "after", D: 500 * time.Millisecond},
		}, c.CPUTime)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range phases {
			if p.Acked == 0 || p.CPU <= 0 || p.PushP99 <= 0 {
				t.Fatalf("%s, phase %s: %+v", hot.name, p.Name, p)
			}
		}
		if pause <= 0 {
			t.Fatalf("%s: the move's pause was not counted: %v", hot.name, pause)
		}
		t.Logf("%s: %+v; the move paused writes %v", hot.name, phases, pause)
	}
}
