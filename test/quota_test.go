package test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
)

// TestGroupsPerUserAcrossNodes: the cap on the groups a user is in holds when the node the adder
// is connected to has no replica of the user's shard: the count is read from a node that has one.
func TestGroupsPerUserAcrossNodes(t *testing.T) {
	c := syncdtest.StartCluster(t, 4, func(_ int, cfg *syncd.Config) { cfg.MaxGroupsPerUser = 1 })
	srv := c.Server(0)
	m, ok := srv.Cluster().Map()
	if !ok {
		t.Fatal("node 0 has no cluster map")
	}
	slots := cluster.Even(m.Shards)
	var victim string
	for i := 0; victim == "" && i < 10000; i++ {
		if id := fmt.Sprint("victim", i); !hosts(srv, slots.UserShard(id)) {
			victim = id
		}
	}
	if victim == "" {
		t.Fatal("node 0 hosts every shard; the test needs one it does not")
	}
	conn := func(user string) *prototest.Conn {
		token, err := srv.MintToken(user, "laptop", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return prototest.Connect(t, srv.Addr().String(), srv.Fingerprint(), token, user, "laptop")
	}
	mallory, trudy, v := conn("mallory"), conn("trudy"), conn(victim)
	mallory.Ack(&proto.CreateGroup{ID: mallory.ID(), Conv: "g1", ClientMsgID: "m1", Members: []string{victim}})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if h, ok := v.Do(&proto.HeadCheck{ID: v.ID()}).(*proto.Head); ok && h.Head >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the group creation never reached the victim's log")
		}
	}
	e, ok := trudy.Do(&proto.CreateGroup{ID: trudy.ID(), Conv: "g2", ClientMsgID: "t1", Members: []string{victim}}).(*proto.Error)
	if !ok || e.Code != proto.CodeTooManyGroups || !strings.Contains(e.Message, victim) {
		t.Fatalf("a second group for %s (shard %d, not on node 0): %#v", victim, slots.UserShard(victim), e)
	}
	trudy.Ack(&proto.CreateGroup{ID: trudy.ID(), Conv: "g3", ClientMsgID: "t2", Members: []string{"carol"}})
}

// hosts reports whether srv's node has a replica of shard.
func hosts(srv *syncd.Server, shard raftstore.ShardID) bool {
	_, err := srv.Node().State(shard)
	return !errors.Is(err, raftstore.ErrNoShard)
}
