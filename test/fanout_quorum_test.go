package test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
)

// TestFanoutShardWithoutQuorumInAProcessCluster: four syncd processes, each shard on three of
// them. Two of the nodes holding a replica of a destination shard are killed, so that shard has
// no quorum while the shards keeping two of their three replicas go on. A group homed on a shard
// with quorum has members there and one on the shard without: the members with quorum get every
// message sent during the outage, all in the same order, and the other member none of them; once
// the nodes are back it gets every message exactly once, in the same order (issue #10, point 8: a
// destination without quorum delays only its own deliveries; before, the source's fan-out waited
// on it and delivered to nobody).
func TestFanoutShardWithoutQuorumInAProcessCluster(t *testing.T) {
	skipShort(t)
	tl := newTimeline(t)
	c := startClusterWithSpares(t, 4, 0, tl)
	c.waitLeaders(60 * time.Second)
	view, err := c.clusterView(c.nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	voters := map[raftstore.ShardID][]string{}
	for _, sv := range view.Shards {
		voters[raftstore.ShardID(sv.Shard)] = sv.Voters
	}

	// The destination to take down: a data shard on three nodes; two of them go.
	var down raftstore.ShardID
	var stop []string
	for s := raftstore.ShardID(1); s <= clusterShards && down == 0; s++ {
		if len(voters[s]) == 3 {
			down, stop = s, voters[s][:2]
		}
	}
	if down == 0 {
		t.Fatalf("no data shard on three nodes: %v", voters)
	}
	quorate := func(s raftstore.ShardID) bool {
		left := 0
		for _, v := range voters[s] {
			if !slices.Contains(stop, v) {
				left++
			}
		}
		return 2*left > len(voters[s])
	}
	slots := cluster.Even(clusterShards)
	pick := func(prefix string, ok func(raftstore.ShardID) bool) string {
		for i := range 10000 {
			if id := fmt.Sprint(prefix, i); ok(slots.UserShard(id)) {
				return id
			}
		}
		t.Fatalf("no %s… on a fitting shard", prefix)
		return ""
	}
	var conv string
	for i := 0; conv == ""; i++ {
		if id := fmt.Sprintf("g:team%d", i); quorate(slots.ConvShard(id)) {
			conv = id
		}
	}
	var alive []string
	for s := raftstore.ShardID(1); s <= clusterShards; s++ {
		if quorate(s) {
			alive = append(alive, pick(fmt.Sprintf("u%d-", s), func(us raftstore.ShardID) bool { return us == s }))
		}
	}
	victim := pick("v", func(s raftstore.ShardID) bool { return s == down })
	if len(alive) < 2 {
		t.Fatalf("fewer than two shards keep their quorum without %v: %v", stop, voters)
	}
	var up []*clusterNode
	for _, n := range c.nodes {
		if !slices.Contains(stop, n.ID) {
			up = append(up, n)
		}
	}
	tl.add("voters %v; killing %v takes shard %d's quorum (%s's log); %s (home shard %d) and %v stay", voters, stop, down, victim,
		conv, slots.ConvShard(conv), alive)

	// Every device on a node that stays, the other one as its fallback.
	dial := func(i int, user string) *device {
		n, other := up[i%len(up)], up[(i+1)%len(up)]
		token, err := c.pc.Token(user, "phone", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return dialDeviceWith(t, client.Config{Addr: n.ClientAddr, Addrs: []string{other.ClientAddr}, Token: token, Device: "phone",
			Fingerprint: c.pc.Fingerprint(), StoreDir: t.TempDir(), Logger: quiet(t), RequestTimeout: 5 * time.Second,
			HeadCheck: 5 * time.Second})
	}
	var devices []*device
	for i, u := range append(slices.Clone(alive), victim) {
		devices = append(devices, dial(i, u))
	}
	defer func() {
		for _, d := range devices {
			d.Close()
		}
	}()
	alives, victimDev := devices[:len(alive)], devices[len(alive)]
	others := append(slices.Clone(alive[1:]), victim)
	if _, err := alives[0].CreateGroup(conv, others); err != nil {
		t.Fatal(err)
	}
	waitMember(t, conv, devices...)
	var want []string
	send := func(d *device, body string) {
		t.Helper()
		if _, err := d.Send(conv, "", []byte(body)); err != nil {
			t.Fatal(err)
		}
		want = append(want, body)
	}
	send(alives[0], "before the outage")
	sameEverywhere(t, conv, want, devices...)

	for _, n := range c.nodes {
		if slices.Contains(stop, n.ID) {
			if err := n.Kill(); err != nil {
				t.Fatal(err)
			}
		}
	}
	tl.add("killed %v: shard %d has no quorum", stop, down)
	before := len(want)
	for i := range 10 {
		send(alives[i%len(alives)], fmt.Sprintf("during the outage %d", i))
	}
	sameEverywhere(t, conv, want, alives...)
	tl.add("the members on shards with quorum got all %d messages", len(want))
	if got := bodies(t, victimDev, conv); len(got) > before {
		t.Fatalf("%s, on the shard without quorum, got %v", victim, got)
	}

	for _, n := range c.nodes {
		if slices.Contains(stop, n.ID) {
			if err := n.Start(); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.waitReady(60 * time.Second)
	tl.add("restarted %v", stop)
	send(alives[0], "after the outage")
	sameEverywhere(t, conv, want, devices...)
	tl.add("every member, %s too, has all %d messages once, in the same order", victim, len(want))
	c.checkLogs()
}
