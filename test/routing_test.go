package test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// Every node routes keys by the cluster map's slot table, whatever its own -shards says: a node
// that joins a 4-shard cluster configured for 8 shards serves a device whose messages reach the
// recipient and the sender's other device, on other nodes, exactly once.
func TestJoinerRoutesByTheClusterMap(t *testing.T) {
	c := syncdtest.StartCluster(t, 3, nil) // 4 shards
	j := c.Join(func(cfg *syncd.Config) { cfg.Shards = 8 })
	joiner := c.Server(j)
	testkit.WaitTrue(t, 30*time.Second, "the joiner to be ready", func() bool { return joiner.Ready() == nil })
	if got, want := joiner.Cluster().SlotTable().Ranges(), c.Server(0).Cluster().SlotTable().Ranges(); !slices.Equal(got, want) {
		t.Fatalf("the joiner routes by %v, the cluster by %v", got, want)
	}

	phone := dialDevice(t, joiner, "alice", "phone", t.TempDir())
	defer phone.Close()
	tablet := dialDevice(t, c.Server(0), "alice", "tablet", t.TempDir())
	defer tablet.Close()
	bob := dialDevice(t, c.Server(1), "bob", "phone", t.TempDir())
	defer bob.Close()
	const conv = "d:alice:bob"
	var want []string
	for i := range 5 {
		body := fmt.Sprint("through the joiner ", i)
		if _, err := phone.Send(conv, "bob", []byte(body)); err != nil {
			t.Fatal(err)
		}
		want = append(want, body)
	}
	sameEverywhere(t, conv, want, phone, tablet, bob)
}

// A node restarted on its data with another -shards keeps the cluster's shard count and slot
// table, so every user's history is still where routing looks for it.
func TestRestartWithOtherShardCountKeepsRouting(t *testing.T) {
	c := syncdtest.StartCluster(t, 1, nil) // 4 shards
	const conv = "d:alice:bob"
	var want []string
	alice := dialDevice(t, c.Server(0), "alice", "phone", t.TempDir())
	for i := range 10 {
		body := fmt.Sprint("before the restart ", i)
		if _, err := alice.Send(conv, "bob", []byte(body)); err != nil {
			t.Fatal(err)
		}
		want = append(want, body)
	}
	waitBodies(t, conv, want, alice)
	alice.Close()

	c.Stop(0)
	c.StartWith(0, func(cfg *syncd.Config) { cfg.Shards = 2 })
	srv := c.Server(0)
	testkit.WaitTrue(t, 20*time.Second, "the restarted node to be ready", func() bool { return srv.Ready() == nil })
	if m, _ := srv.Cluster().Map(); m.Shards != 4 || len(srv.Cluster().SlotTable().Shards()) != 4 {
		t.Fatalf("after a restart with -shards 2 the cluster has %d shards, routing names %v", m.Shards, srv.Cluster().SlotTable().Shards())
	}
	bob := dialDevice(t, srv, "bob", "laptop", t.TempDir()) // a new device: all of bob's history
	defer bob.Close()
	body := "after the restart"
	if _, err := bob.Send(conv, "alice", []byte(body)); err != nil {
		t.Fatal(err)
	}
	want = append(want, body)
	waitBodies(t, conv, want, bob)
}
