package test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/peer"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestAdminAnyNode: four nodes, each shard on three of them, and an operator who asks the one
// node that holds no replica of a group's home shard, nor of one member's log. Its admin views
// are still whole, read on other nodes' replicas: the member's device cursors, the trace of a
// message (delivered to every member, every device past it), and the dead letters of the
// group's home shard, which it lists (as every node does), replays and drops.
func TestAdminAnyNode(t *testing.T) {
	c := syncdtest.StartCluster(t, 4, func(_ int, cfg *syncd.Config) { cfg.ReplicationFactor = 3 })
	m, _ := c.Server(0).Cluster().Map()
	slots := cluster.Even(m.Shards)
	ids := []string{"n1", "n2", "n3", "n4"}

	// The group's home shard, the node that does not host it (the one the operator asks), bob
	// on the home shard (so his log is not on that node either), carol on a shard of her own
	// (the destination that will refuse deliveries).
	const conv = "g:ops"
	home := slots.ConvShard(conv)
	asked := slices.IndexFunc(ids, func(id string) bool { return !slices.Contains(m.Replicas[home], id) })
	if asked < 0 {
		t.Fatalf("every node hosts shard %d: %v", home, m.Replicas)
	}
	pick := func(prefix string, ok func(raftstore.ShardID) bool) string {
		for i := range 1000 {
			if u := fmt.Sprint(prefix, i); ok(slots.UserShard(u)) {
				return u
			}
		}
		t.Fatalf("no %s... on a fitting shard", prefix)
		return ""
	}
	alice := "alice"
	bob := pick("bob", func(s raftstore.ShardID) bool { return s == home })
	carol := pick("carol", func(s raftstore.ShardID) bool { return s != home && s != slots.UserShard(alice) })
	carolShard := slots.UserShard(carol)
	admin := "http://" + c.Server(asked).AdminAddr().String()
	bearer := testkit.Bearer(c.Server(asked).AdminToken()) // every node has a token of its own
	t.Logf("asking %s, which does not host shard %d (home of %s, and %s's log); %s is on shard %d",
		ids[asked], home, conv, bob, carol, carolShard)

	// Devices on the other nodes, wherever: the views do not depend on it.
	users := []string{alice, bob, carol}
	devices := make([]*device, len(users))
	for k, u := range users {
		devices[k] = dialDevice(t, c.Server((asked+1+k)%4), u, "phone", t.TempDir())
	}
	defer func() {
		for _, d := range devices {
			d.Close()
		}
	}()
	if _, err := devices[0].CreateGroup(conv, users[1:]); err != nil {
		t.Fatal(err)
	}
	waitMember(t, conv, devices...)
	if _, err := devices[0].Send(conv, "", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	sameEverywhere(t, conv, []string{"hello"}, devices...)
	msgs, err := devices[1].Messages(conv)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("bob's messages: %v %v", msgs, err)
	}
	msgID := string(msgs[0].MsgID)

	// Bob's cursors, from a node without his log: his phone, caught up (acks are asynchronous).
	var cur adminapi.CursorReport
	testkit.WaitTrue(t, 20*time.Second, "bob's phone cursor at his head", func() bool {
		var code int
		cur, code = testkit.GetJSON[adminapi.CursorReport](t, admin+"/v1/cursors?user="+bob, bearer)
		return code == http.StatusOK && len(cur.Devices) == 1 && cur.Devices[0].Behind != nil && *cur.Devices[0].Behind == 0 && cur.Head >= 2
	})
	if cur.User != bob || cur.Shard != uint32(home) || !cur.Exists || cur.Epoch == 0 || cur.Devices[0].Device != "phone" ||
		cur.Devices[0].Pos != cur.Head || !slices.Contains(m.Replicas[home], cur.Node) {
		t.Errorf("cursors of %s from %s: %+v (want an answer from a node hosting shard %d: %v)", bob, ids[asked], cur, home, m.Replicas[home])
	}

	// The trace, from a node without the home shard: every member delivered, every phone past it.
	var tr adminapi.TraceReport
	testkit.WaitTrue(t, 20*time.Second, "every member delivered and every phone past the message", func() bool {
		var code int
		if tr, code = testkit.GetJSON[adminapi.TraceReport](t, admin+"/v1/trace?msg_id="+msgID, bearer); code != http.StatusOK || tr.Outbox.Retained || len(tr.Users) != 3 {
			return false
		}
		for _, u := range tr.Users {
			if u.Status != adminapi.TraceDelivered || len(u.Devices) != 1 || !u.Devices[0].Past {
				return false
			}
		}
		return true
	})
	if tr.HomeShard != uint32(home) || tr.Conv != conv || tr.ConvKind != "group" || tr.Entry == nil || tr.Entry.Sender != alice ||
		!slices.Contains(m.Replicas[home], tr.Node) {
		t.Errorf("trace from %s: %+v", ids[asked], tr)
	}
	for _, u := range tr.Users {
		shard := slots.UserShard(u.User)
		if u.Shard != uint32(shard) || !u.Member || u.Pos == 0 || !slices.Contains(m.Replicas[shard], u.Node) || u.Devices[0].Device != "phone" {
			t.Errorf("trace of %s: %+v (want an answer from a node hosting shard %d: %v)", u.User, u, shard, m.Replicas[shard])
		}
	}

	// Dead letters: carol's shard refuses two deliveries. The fault goes on every node, since
	// whichever leads the home shard drains its outbox (and a replay applies it too).
	for i := range c.Size() {
		c.Server(i).SetDeliveryFault(func(dest raftstore.ShardID, items []log.Delivery) {
			for k := range items {
				if dest == carolShard && strings.HasPrefix(string(items[k].Entry.Body), "poison") {
					items[k].Entry.ConvSeq = 0 // the destination refuses an incomplete entry
				}
			}
		})
	}
	for _, body := range []string{"poison 1", "poison 2", "after"} {
		if _, err := devices[0].Send(conv, "", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitTrue(t, 20*time.Second, "carol to get the message after the refused ones", func() bool {
		return slices.Contains(bodies(t, devices[2], conv), "after")
	})
	var list adminapi.DeadLetterList
	for i := range c.Size() { // every node lists the cluster's dead letters, hosted or not
		testkit.WaitTrue(t, 20*time.Second, ids[i]+" to list two dead letters", func() bool {
			var code int
			list, code = testkit.GetJSON[adminapi.DeadLetterList](t, "http://"+c.Server(i).AdminAddr().String()+"/v1/deadletters",
				testkit.Bearer(c.Server(i).AdminToken()))
			return code == http.StatusOK && list.Total == 2 && len(list.Items) == 2
		})
	}
	for _, dl := range list.Items {
		if dl.Source != uint32(home) || dl.Dest != uint32(carolShard) || !slices.Equal(dl.Users, []string{carol}) || dl.Conv != conv ||
			!strings.Contains(dl.Reason, "incomplete entry") {
			t.Fatalf("dead letter: %+v", dl)
		}
	}
	for i := range c.Size() {
		c.Server(i).SetDeliveryFault(nil) // the cause is fixed
	}
	first, second := list.Items[0].ID, list.Items[1].ID
	if code, body := testkit.HTTP(t, http.MethodPost, admin+"/v1/deadletters/"+first+"/replay", bearer); code != http.StatusOK || !strings.Contains(body, `"appended": 1`) {
		t.Fatalf("replay %s through %s: HTTP %d %s", first, ids[asked], code, body)
	}
	if code, body := testkit.HTTP(t, http.MethodDelete, admin+"/v1/deadletters/"+second, bearer); code != http.StatusOK || !strings.Contains(body, `"dropped": true`) {
		t.Fatalf("drop %s through %s: HTTP %d %s", second, ids[asked], code, body)
	}
	// A replay reads its dead letter on the source shard's leader: once the drop is acknowledged
	// no node replays the dropped one, nor the replayed one again.
	for i := range c.Size() {
		for _, id := range []string{first, second} {
			if code, body := testkit.HTTP(t, http.MethodPost, "http://"+c.Server(i).AdminAddr().String()+"/v1/deadletters/"+id+"/replay",
				testkit.Bearer(c.Server(i).AdminToken())); code != http.StatusNotFound {
				t.Fatalf("replay of %s (replayed or dropped) through %s: HTTP %d %s, want 404", id, ids[i], code, body)
			}
		}
	}
	testkit.WaitTrue(t, 20*time.Second, "carol to get the replayed message", func() bool {
		return slices.Contains(bodies(t, devices[2], conv), "poison 1")
	})
	// The list is read on a replica, which may apply the drops a moment after their leader.
	testkit.WaitTrue(t, 20*time.Second, "no dead letter listed after the replay and the drop", func() bool {
		list, code := testkit.GetJSON[adminapi.DeadLetterList](t, admin+"/v1/deadletters", bearer)
		return code == http.StatusOK && list.Total == 0 && len(list.Items) == 0
	})
	if got := bodies(t, devices[2], conv); !slices.Equal(slices.Sorted(slices.Values(got)), []string{"after", "hello", "poison 1"}) {
		t.Errorf("carol's messages: %v", got)
	}

	// The leader-only inspection a replay uses, on the wire: the home shard's followers refuse
	// it, its leader answers (asked again if leadership moves while the test looks).
	call, err := peer.EncodeRequest(peer.OpDeadLetters, home, true, peer.DeadLettersArgs{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	testkit.WaitTrue(t, 20*time.Second, "only the leader to answer a leader-only inspection", func() bool {
		got = got[:0]
		for _, id := range m.Replicas[home] {
			st, err := c.Server(slices.Index(ids, id)).Node().ShardStatus(home)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = c.Server(asked).Node().Call(ctx, id, peer.Method, call)
			cancel()
			refused := err != nil && strings.Contains(err.Error(), "not its leader")
			got = append(got, fmt.Sprintf("%s %s: %v", id, st.State, err))
			if (st.State == "leader") != (err == nil) || (err != nil && !refused) {
				return false
			}
		}
		return true
	})
	t.Logf("leader-only inspection: %v", got)
}
