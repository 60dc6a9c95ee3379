package test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
	"github.com/syncd-dev/syncd/test/testkit"
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
	waitMember(t, conv, devices...)
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

	m, _ := c.Server(0).Cluster().Map()
	home := cluster.Even(m.Shards).ConvShard(conv)
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
	testkit.WaitTrue(t, 30*time.Second, fmt.Sprintf("every device to store the %d messages", len(want)), func() bool {
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

// TestManagedClusterServesFromAnyNode: four nodes, each shard on three of them. Every device is
// connected to the node that holds no replica of its user's log, so its sync stream and queries
// read another node's replica. Under traffic a fifth node joins and takes replicas, then a node
// is removed and its replicas move away. Every device ends with every message exactly once, all
// in the same order.
func TestManagedClusterServesFromAnyNode(t *testing.T) {
	c := syncdtest.StartCluster(t, 4, nil)
	m, _ := c.Server(0).Cluster().Map()
	slots := cluster.Even(m.Shards)
	users := []string{"alice", "bob", "carol", "dave"}
	devices := make([]*device, len(users))
	on := make([]int, len(users)) // the node each device is connected to
	dirs := make([]string, len(users))
	for k, u := range users {
		home := m.Replicas[slots.UserShard(u)]
		on[k] = slices.IndexFunc([]string{"n1", "n2", "n3", "n4"}, func(id string) bool { return !slices.Contains(home, id) })
		dirs[k] = t.TempDir()
		devices[k] = dialDevice(t, c.Server(on[k]), u, "phone", dirs[k])
	}
	defer func() {
		for _, d := range devices {
			d.Close()
		}
	}()
	const conv = "g:four"
	if _, err := devices[0].CreateGroup(conv, users[1:]); err != nil {
		t.Fatal(err)
	}
	waitMember(t, conv, devices...)
	var want []string
	round := func(name string) {
		for i, d := range devices {
			body := fmt.Sprintf("%s from %s", name, users[i])
			if _, err := d.Send(conv, "", []byte(body)); err != nil {
				t.Fatal(err)
			}
			want = append(want, body)
		}
	}
	round("hello")
	sameEverywhere(t, conv, want, devices...)

	c.Join(nil)
	for i := range 5 {
		round(fmt.Sprint("while n5 joins ", i))
		time.Sleep(100 * time.Millisecond)
	}
	sameEverywhere(t, conv, want, devices...)
	testkit.WaitTrue(t, 60*time.Second, "n5 to hold replicas", func() bool {
		m, _ := c.Server(0).Cluster().Map()
		placed := 0
		for _, r := range m.Replicas {
			if slices.Contains(r, "n5") {
				placed++
			}
		}
		return placed >= 2
	})

	for k := range devices { // an app on n4 moves to another node before n4 goes
		if on[k] == 3 {
			devices[k].Close()
			devices[k] = dialDevice(t, c.Server(0), users[k], "phone", dirs[k])
		}
	}
	if code, body := testkit.HTTP(t, http.MethodPost, "http://"+c.Server(0).AdminAddr().String()+"/v1/nodes/n4/remove",
		testkit.Bearer(c.Server(0).AdminToken())); code != http.StatusOK {
		t.Fatalf("remove n4: HTTP %d %s", code, body)
	}
	for i := range 5 {
		round(fmt.Sprint("while n4 leaves ", i))
		time.Sleep(100 * time.Millisecond)
	}
	testkit.WaitTrue(t, 60*time.Second, "n4 to hold nothing and leave the map", func() bool {
		m, _ := c.Server(0).Cluster().Map()
		_, still := m.Nodes["n4"]
		return !still && len(c.Server(3).Node().Shards()) == 0
	})
	round("after")
	sameEverywhere(t, conv, want, devices...)
}

// waitMember waits until every device has synced its membership of conv, so that members send
// only to a group that exists.
func waitMember(t *testing.T, conv string, devices ...*device) {
	t.Helper()
	testkit.WaitTrue(t, 20*time.Second, "every device to know the group "+conv, func() bool {
		for _, d := range devices {
			if m, err := d.Members(conv); err != nil || len(m) == 0 {
				return false
			}
		}
		return true
	})
}

// TestDeviceFailsOverToAnotherNode: a device given the addresses of several nodes keeps working
// when its node stops: it reconnects to another node and resumes from its cursor, and nothing is
// lost or duplicated either way.
func TestDeviceFailsOverToAnotherNode(t *testing.T) {
	c := syncdtest.StartCluster(t, 3, nil)
	alice := dialDevice(t, c.Server(2), "alice", "phone", t.TempDir())
	defer alice.Close()
	bob := dialDeviceAt(t, c.Server(0), c.Server(0).Addr().String(), "bob", "laptop", t.TempDir(),
		c.Server(1).Addr().String(), c.Server(2).Addr().String())
	defer bob.Close()
	const conv = "d:alice:bob"
	var want []string
	send := func(d *device, body string) {
		if _, err := d.Send(conv, map[*device]string{alice: "bob", bob: "alice"}[d], []byte(body)); err != nil {
			t.Fatal(err)
		}
		want = append(want, body)
	}
	send(alice, "before")
	sameEverywhere(t, conv, want, alice, bob)
	c.Stop(0) // bob's node
	send(alice, "while bob's node is down")
	send(bob, "bob through another node")
	sameEverywhere(t, conv, want, alice, bob)
}
