package test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
)

// TestDevicesOnDifferentNodes: three users of a group, each device connected to a different node
// of a three-node cluster. Sends are forwarded to the home shard's leader, fan-out crosses nodes,
// and every node pushes what its replicas apply. Then the node leading the group's home shard is
// stopped while the others keep sending, and restarted: every device ends with every message
// exactly once, all in the same order.
func TestDevicesOnDifferentNodes(t *testing.T) {
	c := syncdtest.StartCluster(t, 3, nil)
	users := []string{"alice", "bob", "carol"}
	devices := make([]*device, 3)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()} // kept across a redial, as an app's
	dial := func(i int) {
		devices[i] = dialDevice(t, c.Server(i), users[i], "phone", dirs[i])
	}
	for i := range devices {
		dial(i)
	}
	defer func() {
		for _, d := range devices {
			d.Close()
		}
	}()
	const conv = "g:trio"
	if _, err := devices[0].CreateGroup(conv, []string{"bob", "carol"}); err != nil {
		t.Fatal(err)
	}
	var want []string
	send := func(i int, round string) {
		body := fmt.Sprintf("%s from %s", round, users[i])
		if _, err := devices[i].Send(conv, "", []byte(body)); err != nil {
			t.Fatal(err)
		}
		want = append(want, body)
	}
	for i := range devices {
		send(i, "hello")
	}
	sameEverywhere(t, conv, want, devices...)

	home := syncd.NewSlotTable(c.Server(0).Node().Shards()).ConvShard(conv)
	down := c.LeaderOf(home)
	if down < 0 {
		t.Fatal("no leader for the group's home shard")
	}
	t.Logf("stopping node %d, leader of shard %d", down, home)
	devices[down].Close()
	c.Stop(down)
	for i := range devices {
		if i != down {
			send(i, "while one node is down")
		}
	}
	var up []*device
	for i, d := range devices {
		if i != down {
			up = append(up, d)
		}
	}
	sameEverywhere(t, conv, want, up...)

	c.Start(down)
	c.WaitLeaders()
	dial(down) // the app comes back with its store
	send(down, "back")
	sameEverywhere(t, conv, want, devices...)
}

// sameEverywhere waits until every device stores exactly the bodies of want (each once, in any
// order) for conv, all devices in the same order.
func sameEverywhere(t *testing.T, conv string, want []string, devices ...*device) {
	t.Helper()
	sorted := slices.Sorted(slices.Values(want))
	var got [][]string
	raftstoretest.Eventually(t, 30*time.Second, fmt.Sprintf("every device to store the %d messages", len(want)), func() bool {
		got = got[:0]
		for _, d := range devices {
			b := bodies(t, d, conv)
			if !slices.Equal(slices.Sorted(slices.Values(b)), sorted) {
				return false
			}
			got = append(got, b)
		}
		return true
	})
	for _, g := range got[1:] {
		if !slices.Equal(g, got[0]) {
			t.Fatalf("devices disagree on the conversation's order:\n%v\n%v", got[0], g)
		}
	}
}
