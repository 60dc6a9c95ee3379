package test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/routing"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestMoveUserUnderTraffic: on a three-node cluster, bob's log moves to a shard of its own (one
// operator request: a new shard, then the move) while alice and carol keep sending to him — a 1:1
// conversation and a group — and his device keeps syncing, connected to another node than the
// one driving the move. Every message reaches his device exactly once, in order; his log on the
// new shard has his positions, epoch and device cursor; no device is told to rebase or that its
// epoch changed; the old shard answers that the log moved.
func TestMoveUserUnderTraffic(t *testing.T) {
	c := syncdtest.StartCluster(t, 3, nil)
	bob := dialDevice(t, c.Server(0), "bob", "phone", t.TempDir())
	defer bob.Close()
	alice := dialDevice(t, c.Server(1), "alice", "phone", t.TempDir())
	defer alice.Close()
	carol := dialDevice(t, c.Server(2), "carol", "phone", t.TempDir())
	defer carol.Close()
	const direct, group = "d:alice:bob", "g:crew"
	if _, err := carol.CreateGroup(group, []string{"bob"}); err != nil {
		t.Fatal(err)
	}
	waitMember(t, group, bob, carol)
	m, _ := c.Server(0).Node().ClusterMap()
	from := routing.Even(m.Shards).UserShard("bob")

	var mu sync.Mutex
	var sentDirect, sentGroup []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	sender := func(d *device, conv, peer string, sent *[]string) {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			body := fmt.Sprintf("%s %d", conv, i)
			if _, err := d.Send(conv, peer, []byte(body)); err != nil {
				t.Errorf("send %q: %v", body, err)
				return
			}
			mu.Lock()
			*sent = append(*sent, body)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}
	wg.Add(2)
	go sender(alice, direct, "bob", &sentDirect)
	go sender(carol, group, "", &sentGroup)
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(sentDirect) + len(sentGroup) }
	testkit.WaitTrue(t, 20*time.Second, "traffic before the move", func() bool { return count() >= 40 })

	admin := "http://" + c.Server(1).AdminAddr().String()
	var started adminapi.MoveStarted
	code, body := testkit.HTTP(t, http.MethodPost, admin+"/v1/moves?user=bob&new_shard=1", testkit.Bearer(c.Server(1).AdminToken()))
	if err := json.Unmarshal([]byte(body), &started); err != nil || code != http.StatusOK ||
		started.From != uint32(from) || started.To != uint32(m.Shards+1) {
		t.Fatalf("POST /v1/moves: HTTP %d %s", code, body)
	}
	to := raftstore.ShardID(started.To)
	testkit.WaitTrue(t, 60*time.Second, "the move to finish", func() bool {
		m, _ := c.Server(2).Node().ClusterMap()
		return len(m.Moves) == 0 && m.Overrides["bob"] == to
	})
	sentAt := count()
	testkit.WaitTrue(t, 20*time.Second, "traffic after the move", func() bool { return count() >= sentAt+40 })
	close(stop)
	wg.Wait()

	for conv, sent := range map[string][]string{direct: sentDirect, group: sentGroup} {
		var got []string
		testkit.Wait(t, 20*time.Second, "bob to store every message of "+conv, func() (bool, string) {
			got = bodies(t, bob, conv)
			return slices.Equal(got, sent), fmt.Sprintf("bob stores %d of %d: %s", len(got), len(sent), diffBodies(got, sent))
		})
	}
	waitBodies(t, direct, sentDirect, alice)
	waitBodies(t, group, sentGroup, carol)
	select {
	case e := <-bob.rebases:
		t.Fatalf("bob's device was told to rebase: %+v", e)
	case e := <-bob.epochs:
		t.Fatalf("bob's device was told his epoch changed: %+v", e)
	default:
	}

	// The log is whole on the new shard, and the old one answers that it moved.
	want := len(sentDirect) + len(sentGroup) + 1 // the group's creation is an entry too
	for i := range c.Size() {
		node := c.Server(i).Node()
		dst, err := node.State(to)
		if err != nil {
			t.Fatalf("node %d: shard %d: %v", i, to, err)
		}
		testkit.WaitTrue(t, 10*time.Second, fmt.Sprintf("node %d's replica of shard %d to hold bob's log", i, to), func() bool {
			info, err := dst.UserInfo("bob")
			return err == nil && info.Head == log.Position(want) && info.First == 1
		})
		src, err := node.State(from)
		if err != nil {
			t.Fatal(err)
		}
		testkit.WaitTrue(t, 10*time.Second, fmt.Sprintf("node %d's replica of shard %d to answer that bob moved", i, from), func() bool {
			_, err := src.UserInfo("bob")
			return errors.Is(err, log.ErrMoved)
		})
	}
	var cur adminapi.CursorReport
	testkit.WaitTrue(t, 15*time.Second, "bob's device cursor stored on the new shard at his head", func() bool {
		cur, _ = testkit.GetJSON[adminapi.CursorReport](t, admin+"/v1/cursors?user=bob", testkit.Bearer(c.Server(1).AdminToken()))
		return cur.Head == uint64(want) && len(cur.Devices) == 1 && cur.Devices[0].Pos == uint64(want)
	})
	var metrics string
	for i := range c.Size() { // the move's pause is counted by the node that drove it
		_, b := testkit.HTTP(t, http.MethodGet, "http://"+c.Server(i).AdminAddr().String()+"/metrics")
		metrics += b
	}
	if !strings.Contains(metrics, "syncd_move_pause_seconds_count 1") || !strings.Contains(metrics, "syncd_moves_in_progress 0") {
		t.Errorf("move metrics missing:\n%s", grepLines(metrics, "syncd_move"))
	}
	t.Logf("moved bob from shard %d to %d under %d sends (%d after the switch)", from, to, count(), count()-sentAt)
}

// diffBodies says where got and want first differ.
func diffBodies(got, want []string) string {
	for i := range max(len(got), len(want)) {
		if i >= len(got) || i >= len(want) || got[i] != want[i] {
			return fmt.Sprintf("first difference at %d: got %v, want %v", i, got[i:min(i+3, len(got))], want[i:min(i+3, len(want))])
		}
	}
	return "equal"
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
