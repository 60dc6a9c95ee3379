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
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/adminapi"
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
	// Delivery reports off: bob's acks would add delivered entries to his log, and the head and
	// cursor this test expects on the new shard must not depend on when they come (the fault
	// suite's moves run with them).
	c := syncdtest.StartCluster(t, 3, noDeliveryReports)
	devs := dialSpread(t, c, "bob", "alice", "carol")
	bob, alice, carol := devs[0], devs[1], devs[2]
	const direct, group = "d:alice:bob", "g:crew"
	if _, err := carol.CreateGroup(group, []string{"bob"}); err != nil {
		t.Fatal(err)
	}
	waitMember(t, group, bob, carol)
	m, _ := c.Server(0).Cluster().Map()
	from := cluster.Even(m.Shards).UserShard("bob")

	var mu sync.Mutex
	var sentDirect, sentGroup []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	record := func(sent *[]string) func(body, _ string) {
		return func(body, _ string) { mu.Lock(); defer mu.Unlock(); *sent = append(*sent, body) }
	}
	wg.Go(func() { sendUntil(t, alice, direct, "bob", direct, stop, record(&sentDirect)) })
	wg.Go(func() { sendUntil(t, carol, group, "", group, stop, record(&sentGroup)) })
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
		m, _ := c.Server(2).Cluster().Map()
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
	checkMoveMetrics(t, c)
	t.Logf("moved bob from shard %d to %d under %d sends (%d after the switch)", from, to, count(), count()-sentAt)
}

// noDeliveryReports is a StartCluster tweak that turns delivery reports off on every node, for
// tests that count the entries of logs which the devices' acks would add delivered entries to.
func noDeliveryReports(_ int, c *syncd.Config) { c.DisableDeliveryReports = true }

// sendUntil queues messages "<prefix> <n>" from d to conv (peer: the other user of a direct
// one), 5 ms apart, until stop is closed, passing each body and its client_msg_id to sent.
func sendUntil(t *testing.T, d *device, conv, peer, prefix string, stop <-chan struct{}, sent func(body, cmid string)) {
	sendEvery(t, d, conv, peer, prefix, 5*time.Millisecond, stop, sent)
}

// sendEvery is sendUntil with messages every apart.
func sendEvery(t *testing.T, d *device, conv, peer, prefix string, every time.Duration, stop <-chan struct{}, sent func(body, cmid string)) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		body := fmt.Sprintf("%s %d", prefix, i)
		cmid, err := d.Send(conv, peer, []byte(body))
		if err != nil {
			t.Errorf("send %q: %v", body, err)
			return
		}
		sent(body, cmid)
		time.Sleep(every)
	}
}

// dialSpread connects a phone for each of users, user i to the cluster's node i mod its size;
// each closes when the test ends.
func dialSpread(t *testing.T, c *syncdtest.Cluster, users ...string) []*device {
	t.Helper()
	var out []*device
	for i, u := range users {
		d := dialDevice(t, c.Server(i%c.Size()), u, "phone", t.TempDir())
		t.Cleanup(func() { d.Close() })
		out = append(out, d)
	}
	return out
}

// checkMoveMetrics checks that the cluster's metrics count one move's pause and none in progress.
func checkMoveMetrics(t *testing.T, c *syncdtest.Cluster) {
	t.Helper()
	var metrics string
	for i := range c.Size() { // the move's pause is counted by the node that drove it
		_, b := testkit.HTTP(t, http.MethodGet, "http://"+c.Server(i).AdminAddr().String()+"/metrics")
		metrics += b
	}
	if !strings.Contains(metrics, "syncd_move_pause_seconds_count 1") || !strings.Contains(metrics, "syncd_moves_in_progress 0") {
		t.Errorf("move metrics missing:\n%s", grepLines(metrics, "syncd_move"))
	}
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

// TestMoveConvUnderTraffic: on a three-node cluster a group moves to a shard of its own (one
// operator request) while two members keep sending to it and a third reads; every member's
// device stores every message exactly once, in send order, with no rebase. On the new shard the
// group has its whole log, conv_seqs continuing, its members and read marks; messages sent before
// the move keep their msg_ids (naming the old shard), and a resend of one of them to the new
// shard is answered from the dedup record that moved with it; the old shard answers that the
// group moved.
func TestMoveConvUnderTraffic(t *testing.T) {
	// Delivery reports off: the members' acks would add delivered entries to the group's log,
	// and the head this test expects on the new shard must not depend on when they come.
	c := syncdtest.StartCluster(t, 3, noDeliveryReports)
	devs := dialSpread(t, c, "alice", "bob", "carol")
	alice, bob, carol := devs[0], devs[1], devs[2]
	const group = "g:all-hands"
	if _, err := carol.CreateGroup(group, []string{"alice", "bob"}); err != nil {
		t.Fatal(err)
	}
	waitMember(t, group, alice, bob, carol)
	m, _ := c.Server(0).Cluster().Map()
	from := cluster.Even(m.Shards).ConvShard(group)

	var mu sync.Mutex
	var sent []string            // in the order the sends were queued; each sender's are in its order
	cmids := map[string]string{} // body → client_msg_id
	stop := make(chan struct{})
	var wg sync.WaitGroup
	record := func(body, cmid string) {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, body)
		cmids[body] = cmid
	}
	wg.Go(func() { sendUntil(t, alice, group, "", "alice", stop, record) })
	wg.Go(func() { sendUntil(t, carol, group, "", "carol", stop, record) })
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(sent) }
	testkit.WaitTrue(t, 20*time.Second, "traffic before the move", func() bool { return count() >= 40 })

	admin := "http://" + c.Server(1).AdminAddr().String()
	var started adminapi.MoveStarted
	code, body := testkit.HTTP(t, http.MethodPost, admin+"/v1/moves?conv="+group+"&new_shard=1", testkit.Bearer(c.Server(1).AdminToken()))
	if err := json.Unmarshal([]byte(body), &started); err != nil || code != http.StatusOK ||
		started.Conv != group || started.From != uint32(from) || started.To != uint32(m.Shards+1) {
		t.Fatalf("POST /v1/moves: HTTP %d %s", code, body)
	}
	to := raftstore.ShardID(started.To)
	testkit.WaitTrue(t, 60*time.Second, "the move to finish", func() bool {
		m, _ := c.Server(2).Cluster().Map()
		return len(m.Moves) == 0 && m.ConvOverrides[group] == to
	})
	sentAt := count()
	testkit.WaitTrue(t, 20*time.Second, "traffic after the move", func() bool { return count() >= sentAt+40 })
	close(stop)
	wg.Wait()

	// Every device stores every message once; each sender's in its order. Across senders the
	// order is the conversation's, which every device shares.
	mine := func(got []string, who string) []string {
		return slices.DeleteFunc(slices.Clone(got), func(b string) bool { return !strings.HasPrefix(b, who+" ") })
	}
	var first []string
	for _, d := range []*device{alice, bob, carol} {
		var got []string
		testkit.Wait(t, 20*time.Second, "every message of the group on "+d.User(), func() (bool, string) {
			got = bodies(t, d, group)
			ok := len(got) == len(sent)
			for _, who := range []string{"alice", "carol"} {
				ok = ok && slices.Equal(mine(got, who), mine(sent, who))
			}
			return ok, fmt.Sprintf("%s stores %d of %d", d.User(), len(got), len(sent))
		})
		if first == nil {
			first = got
		} else if !slices.Equal(got, first) {
			t.Fatalf("%s stores the group in another order than alice: %s", d.User(), diffBodies(got, first))
		}
		select {
		case e := <-d.rebases:
			t.Fatalf("%s's device was told to rebase: %+v", d.User(), e)
		default:
		}
	}

	// The group is whole on the new shard, on every replica; the old shard answers that it moved.
	want := log.Position(len(sent) + 1) // the group's creation is an entry too
	for i := range c.Size() {
		node := c.Server(i).Node()
		dst, err := node.State(to)
		if err != nil {
			t.Fatalf("node %d: shard %d: %v", i, to, err)
		}
		testkit.WaitTrue(t, 10*time.Second, fmt.Sprintf("node %d's replica of shard %d to hold the group", i, to), func() bool {
			info, err := dst.ConvInfo(group)
			return err == nil && info.Head == want && info.First == 1
		})
		src, err := node.State(from)
		if err != nil {
			t.Fatal(err)
		}
		testkit.WaitTrue(t, 10*time.Second, fmt.Sprintf("node %d's replica of shard %d to answer that the group moved", i, from), func() bool {
			_, err := src.ConvInfo(group)
			return errors.Is(err, log.ErrMoved)
		})
	}
	dst, _ := c.Server(0).Node().State(to)
	r, err := dst.ReadConv(group, 0, 1, log.Limit{Count: int(want)})
	if err != nil || len(r.Entries) != int(want) {
		t.Fatalf("reading the group on shard %d: %d entries, %v", to, len(r.Entries), err)
	}
	var before *log.Entry
	shards := map[log.ShardID]int{}
	for i := range r.Entries {
		e := &r.Entries[i]
		shards[e.MsgID.Shard]++
		if e.MsgID.Shard == log.ShardID(from) && e.Kind == log.KindMessage {
			before = e
		}
	}
	if shards[log.ShardID(from)] == 0 || shards[log.ShardID(to)] == 0 || len(shards) != 2 {
		t.Fatalf("msg_ids by shard: %v, want some of shard %d (before the move) and some of %d", shards, from, to)
	}
	// A resend of a message sent before the move, now to the new shard: the original answer.
	res, err := c.Server(0).Node().Propose(t.Context(), to, raftstore.AppendCommand(&log.Append{
		Conv: group, Sender: before.Sender, ClientMsgID: cmids[string(before.Body)], Kind: log.KindMessage, Body: before.Body}))
	if err != nil || !res.Append.Duplicate || res.Append.MsgID != before.MsgID || res.Append.ConvSeq != before.ConvSeq {
		t.Fatalf("resend of %s (conv_seq %d) after the move: %+v, %v; want the original answer", before.MsgID, before.ConvSeq, res.Append, err)
	}
	checkMoveMetrics(t, c)
	t.Logf("moved %s from shard %d to %d under %d sends (%d after the switch)", group, from, to, count(), count()-sentAt)
}

// TestMoveConvWhileDeliveriesHeld: a conversation moves while its old home's deliveries are held
// back (a fault in the fan-out's path, as a slow or down destination shard would hold them): its
// writers wait only for the move's fence, so the switch happens and new messages are acknowledged
// by the new home at once, while the move waits in its drop step for the old home's last
// deliveries. Once they flow, every message — those acknowledged by the old home and held, and
// those written since by the new one — reaches every member once and in conversation order: the
// new home's deliveries wait at each destination behind the old home's (log.Barrier).
func TestMoveConvWhileDeliveriesHeld(t *testing.T) {
	c := syncdtest.StartCluster(t, 3, nil)
	devs := dialSpread(t, c, "alice", "bob")
	alice, bob := devs[0], devs[1]
	const group = "g:held"
	if _, err := alice.CreateGroup(group, []string{"bob"}); err != nil {
		t.Fatal(err)
	}
	waitSent(t, alice, 1)
	waitMember(t, group, alice, bob)
	var want []string
	send := func(body string) {
		t.Helper()
		if _, err := alice.Send(group, "", []byte(body)); err != nil {
			t.Fatal(err)
		}
		waitSent(t, alice, 1)
		want = append(want, body)
	}
	send("before")
	waitBodies(t, group, want, alice, bob)
	m, _ := c.Server(0).Cluster().Map()
	from := cluster.Even(m.Shards).ConvShard(group)

	// Hold back the old home's deliveries of the group.
	release := make(chan struct{})
	for i := range c.Size() {
		c.Server(i).SetDeliveryFault(func(_ raftstore.ShardID, items []log.Delivery) {
			for _, it := range items {
				if it.Entry.Conv == group && it.Entry.MsgID.Shard == log.ShardID(from) {
					<-release
					return
				}
			}
		})
	}
	unhold := sync.OnceFunc(func() { close(release) })
	defer unhold()
	send("held 1")
	send("held 2")

	admin := "http://" + c.Server(1).AdminAddr().String()
	var started adminapi.MoveStarted
	code, body := testkit.HTTP(t, http.MethodPost, admin+"/v1/moves?conv="+group+"&new_shard=1", testkit.Bearer(c.Server(1).AdminToken()))
	if err := json.Unmarshal([]byte(body), &started); err != nil || code != http.StatusOK {
		t.Fatalf("POST /v1/moves: HTTP %d %s", code, body)
	}
	testkit.WaitTrue(t, 30*time.Second, "the switch, while the old home's deliveries are held", func() bool {
		m, _ := c.Server(1).Cluster().Map()
		mv := m.Moves[started.ID]
		return m.ConvOverrides[group] == raftstore.ShardID(started.To) && mv != nil && mv.Step == cluster.PhaseDrop
	})
	for i := range 3 { // acknowledged by the new home; their deliveries wait behind the held ones
		send(fmt.Sprint("after ", i))
	}
	if got := bodies(t, bob, group); !slices.Equal(got, want[:1]) {
		t.Fatalf("bob stores %v before the old home's deliveries were released, want %v", got, want[:1])
	}
	if m, _ := c.Server(1).Cluster().Map(); m.Moves[started.ID] == nil {
		t.Fatal("the move ended before the old home had delivered its last messages")
	}

	unhold()
	waitBodies(t, group, want, alice, bob)
	testkit.WaitTrue(t, 30*time.Second, "the move to end once the old home has delivered", func() bool {
		m, _ := c.Server(2).Cluster().Map()
		return len(m.Moves) == 0
	})
	checkMoveMetrics(t, c)
}

// TestMovingConvOnTheWire: while a conversation is fenced by a move, a mutation to it is answered
// as docs/PROTOCOL.md says — Error unavailable with retry_after_ms 200, nothing applied — and a
// resend of an acknowledged one is still answered with its Ack. The fence is applied here
// directly, as the move's driver applies it.
func TestMovingConvOnTheWire(t *testing.T) {
	srv := syncdtest.Start(t, nil)
	token, err := srv.MintToken("alice", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	alice := prototest.Connect(t, srv.Addr().String(), srv.Fingerprint(), token, "alice", "phone")
	const conv = "d:alice:bob"
	first := alice.Ack(&proto.Send{ID: alice.ID(), Conv: conv, ClientMsgID: "m1", Body: []byte("hi"), Peer: "bob"})
	m, _ := srv.Cluster().Map()
	shard := cluster.Even(m.Shards).ConvShard(conv)
	if _, err := srv.Node().Propose(t.Context(), shard, raftstore.MoveCommand(&log.MoveStep{Op: log.MoveFence, Move: 7, Conv: conv})); err != nil {
		t.Fatal(err)
	}
	for _, f := range []proto.Frame{
		&proto.Send{ID: alice.ID(), Conv: conv, ClientMsgID: "m2", Body: []byte("again"), Peer: "bob"},
		&proto.MarkRead{ID: alice.ID(), Conv: conv, ClientMsgID: "r1", UpTo: 1},
	} {
		e, ok := alice.Do(f).(*proto.Error)
		if !ok || e.Code != proto.CodeUnavailable || e.RetryAfterMs != 200 {
			t.Fatalf("%v to a fenced conversation: %+v, want unavailable with retry_after_ms 200", f.FrameType(), e)
		}
	}
	if a := alice.Ack(&proto.Send{ID: alice.ID(), Conv: conv, ClientMsgID: "m1", Body: []byte("hi"), Peer: "bob"}); a.MsgID != first.MsgID {
		t.Fatalf("a resend to the fenced conversation: %+v, want the original %+v", a, first)
	}
}

// fillLog writes entries entries to user's log on shard, straight through deliveries from a shard
// id no real shard has (so no real stream's mark moves), 1,000 entries a command: a log whose
// copy lasts seconds.
func fillLog(t *testing.T, node *raftstore.Node, shard raftstore.ShardID, user string, entries int) {
	t.Helper()
	const per = 1000
	for b := range entries / per {
		batch := &log.DeliveryBatch{Source: 9999, Prev: uint64(b * per), Last: uint64((b + 1) * per)}
		for i := range per {
			pos := uint64(b*per + i + 1)
			batch.Items = append(batch.Items, log.Delivery{Pos: pos, Users: []string{user}, Entry: log.Entry{
				Kind: log.KindMessage, MsgID: log.MsgID{Shard: 9999, Index: pos}, Conv: "d:big:x", ConvSeq: log.Position(pos),
				Sender: "x", Time: 1, Body: make([]byte, 64)}})
		}
		if _, err := node.Propose(t.Context(), shard, raftstore.DeliverCommand(batch)); err != nil {
			t.Fatal(err)
		}
	}
}

// cancelMidCopy waits until move started copies user's log to its destination (the destination
// refuses reads of it), cancels the move through the admin API and waits until it has ended.
func cancelMidCopy(t *testing.T, srv *syncd.Server, user string, started adminapi.MoveStarted) {
	t.Helper()
	node := srv.Node()
	testkit.WaitTrue(t, 10*time.Second, "the copy to be under way", func() bool {
		dst, err := node.State(raftstore.ShardID(started.To))
		if err != nil {
			return false
		}
		_, err = dst.UserInfo(user)
		return errors.Is(err, log.ErrMoved)
	})
	url := fmt.Sprintf("http://%s/v1/moves/%d/cancel", srv.AdminAddr(), started.ID)
	if code, body := testkit.HTTP(t, http.MethodPost, url, testkit.Bearer(srv.AdminToken())); code != http.StatusOK {
		t.Fatalf("cancel while copying: HTTP %d %s", code, body)
	}
	testkit.WaitTrue(t, 30*time.Second, "the canceled move to end", func() bool {
		m, _ := srv.Cluster().Map()
		return len(m.Moves) == 0
	})
}

// TestMoveCancelWhileCopying: an operator cancels a move while its copy runs (a log of 200,000
// entries, so the copy lasts seconds): the move's driver has the destination drop what it copied
// and ends the move; the user's log is served by its shard as before, whole, and the destination
// holds nothing of it; a later move of the user runs to its end.
func TestMoveCancelWhileCopying(t *testing.T) {
	srv := syncdtest.Start(t, nil)
	node := srv.Node()
	m, _ := srv.Cluster().Map()
	const user = "big"
	from := cluster.Even(m.Shards).UserShard(user)
	const entries = 200_000
	fillLog(t, node, from, user, entries)
	admin := "http://" + srv.AdminAddr().String()
	auth := testkit.Bearer(srv.AdminToken())
	var started adminapi.MoveStarted
	code, body := testkit.HTTP(t, http.MethodPost, admin+"/v1/moves?user="+user+"&new_shard=1", auth)
	if err := json.Unmarshal([]byte(body), &started); err != nil || code != http.StatusOK {
		t.Fatalf("POST /v1/moves: HTTP %d %s", code, body)
	}
	cancelMidCopy(t, srv, user, started)
	if m, _ := srv.Cluster().Map(); len(m.Overrides) != 0 {
		t.Fatalf("a canceled move pinned the user: %v", m.Overrides)
	}
	src, _ := node.State(from)
	if info, err := src.UserInfo(user); err != nil || info.Head != entries || info.First != 1 {
		t.Fatalf("the user's log on its shard after the cancel: %+v, %v", info, err)
	}
	dst, _ := node.State(raftstore.ShardID(started.To))
	if info, err := dst.UserInfo(user); err != nil || info.Head != 0 {
		t.Fatalf("the destination after the cancel: %+v, %v; want nothing of the user and no refusal", info, err)
	}
	// The user moves for real afterwards.
	code, body = testkit.HTTP(t, http.MethodPost, fmt.Sprintf("%s/v1/moves?user=%s&to=%d", admin, user, started.To), auth)
	if err := json.Unmarshal([]byte(body), &started); err != nil || code != http.StatusOK {
		t.Fatalf("the second move: HTTP %d %s", code, body)
	}
	testkit.WaitTrue(t, 60*time.Second, "the second move to end", func() bool {
		m, _ := srv.Cluster().Map()
		return len(m.Moves) == 0 && m.Overrides[user] == raftstore.ShardID(started.To)
	})
	if info, err := dst.UserInfo(user); err != nil || info.Head != entries {
		t.Fatalf("the user's log after the second move: %+v, %v", info, err)
	}
}
