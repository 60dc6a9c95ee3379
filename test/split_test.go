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
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestSplitShardUnderTraffic: on a three-node cluster an operator splits a shard in two (one
// request: a new shard, then a move of the upper half of the shard's slots) while a user of the
// moving half keeps receiving — a 1:1 conversation and a group whose home is in the moving half
// too — and a user of the staying half keeps sending in the group. Every message reaches every
// device exactly once, in order, with no rebase; the slot table gives the upper half to the new
// shard; the moved user's log and the group are whole there, and the old shard answers that they
// moved, while it keeps the staying half's keys.
func TestSplitShardUnderTraffic(t *testing.T) {
	// Delivery reports off: the moved user's acks would add delivered entries to his log and the
	// group's, and the heads this test expects on the new shard must not depend on when they come.
	c := syncdtest.StartCluster(t, 3, noDeliveryReports)
	m, _ := c.Server(0).Cluster().Map()
	from := m.Slots[0].Shard
	upper := log.SlotSpan{First: m.Slots[0].First + (m.Slots[0].Last-m.Slots[0].First+1)/2, Last: m.Slots[0].Last}
	lower := log.SlotSpan{First: m.Slots[0].First, Last: upper.First - 1}
	pick := func(prefix string, slot func(string) int, span log.SlotSpan) string {
		for i := 0; ; i++ {
			if id := fmt.Sprint(prefix, i); span.Contains(slot(id)) {
				return id
			}
		}
	}
	bob, stays, group := pick("bob", log.UserSlot, upper), pick("stay", log.UserSlot, lower), pick("g:crew", log.ConvSlot, upper)
	devs := dialSpread(t, c, bob, "alice", stays)
	bobDev, alice, staysDev := devs[0], devs[1], devs[2]
	direct := "d:alice:" + bob
	if _, err := staysDev.CreateGroup(group, []string{bob}); err != nil {
		t.Fatal(err)
	}
	waitMember(t, group, bobDev, staysDev)

	var mu sync.Mutex
	var sentDirect, sentGroup []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	record := func(sent *[]string) func(body, _ string) {
		return func(body, _ string) { mu.Lock(); defer mu.Unlock(); *sent = append(*sent, body) }
	}
	wg.Go(func() { sendUntil(t, alice, direct, bob, direct, stop, record(&sentDirect)) })
	wg.Go(func() { sendUntil(t, staysDev, group, "", group, stop, record(&sentGroup)) })
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(sentDirect) + len(sentGroup) }
	testkit.WaitTrue(t, 20*time.Second, "traffic before the split", func() bool { return count() >= 40 })

	admin := "http://" + c.Server(1).AdminAddr().String()
	var started adminapi.MoveStarted
	code, body := testkit.HTTP(t, http.MethodPost, fmt.Sprintf("%s/v1/shards/%d/split", admin, from), testkit.Bearer(c.Server(1).AdminToken()))
	if err := json.Unmarshal([]byte(body), &started); err != nil || code != http.StatusOK ||
		started.From != uint32(from) || started.To != uint32(m.Shards+1) || started.Slots != upper.String() {
		t.Fatalf("POST /v1/shards/%d/split: HTTP %d %s", from, code, body)
	}
	to := raftstore.ShardID(started.To)
	testkit.WaitTrue(t, 90*time.Second, "the split to finish", func() bool {
		m, _ := c.Server(2).Cluster().Map()
		return len(m.Moves) == 0 && m.Slots[0] == cluster.SlotRange{First: lower.First, Last: lower.Last, Shard: from} &&
			m.Slots[1] == cluster.SlotRange{First: upper.First, Last: upper.Last, Shard: to}
	})
	sentAt := count()
	testkit.WaitTrue(t, 20*time.Second, "traffic after the split", func() bool { return count() >= sentAt+40 })
	close(stop)
	wg.Wait()

	for conv, sent := range map[string][]string{direct: sentDirect, group: sentGroup} {
		var got []string
		testkit.Wait(t, 20*time.Second, bob+" to store every message of "+conv, func() (bool, string) {
			got = bodies(t, bobDev, conv)
			return slices.Equal(got, sent), fmt.Sprintf("%s stores %d of %d: %s", bob, len(got), len(sent), diffBodies(got, sent))
		})
	}
	waitBodies(t, direct, sentDirect, alice)
	waitBodies(t, group, sentGroup, staysDev)
	for _, d := range []*device{bobDev, staysDev} {
		select {
		case e := <-d.rebases:
			t.Fatalf("%s's device was told to rebase: %+v", d.User(), e)
		case e := <-d.epochs:
			t.Fatalf("%s's device was told the epoch changed: %+v", d.User(), e)
		default:
		}
	}

	// Every replica: the moving half's keys are whole on the new shard and gone from the old one,
	// which keeps the staying half's.
	want := log.Position(len(sentDirect) + len(sentGroup) + 1) // the group's creation is an entry too
	for i := range c.Size() {
		node := c.Server(i).Node()
		dst, err := node.State(to)
		if err != nil {
			t.Fatalf("node %d: shard %d: %v", i, to, err)
		}
		src, err := node.State(from)
		if err != nil {
			t.Fatal(err)
		}
		testkit.WaitTrue(t, 10*time.Second, fmt.Sprintf("node %d's replicas to hold the moved keys on shard %d only", i, to), func() bool {
			info, err := dst.UserInfo(bob)
			ginfo, gerr := dst.ConvInfo(group)
			_, oldErr := src.UserInfo(bob)
			_, oldGErr := src.ConvInfo(group)
			return err == nil && info.Head == want && info.First == 1 && gerr == nil && ginfo.Head == log.Position(len(sentGroup)+1) &&
				errors.Is(oldErr, log.ErrMoved) && errors.Is(oldGErr, log.ErrMoved)
		})
		users, convs, err := src.KeysInSlots(upper)
		if err != nil || len(users)+len(convs) > 0 {
			t.Fatalf("node %d: shard %d still holds %v %v of the moved slots (%v)", i, from, users, convs, err)
		}
		if info, err := src.UserInfo(stays); err != nil || info.Head == 0 {
			t.Fatalf("node %d: %s, of the staying half, on shard %d: %+v %v", i, stays, from, info, err)
		}
	}
	checkMoveMetrics(t, c)
	if view, _ := testkit.GetJSON[adminapi.ClusterView](t, admin+"/v1/cluster", testkit.Bearer(c.Server(1).AdminToken())); !strings.Contains(fmt.Sprint(view.Shards), upper.String()) {
		t.Errorf("the cluster view does not show the new shard's slots %s: %+v", upper, view.Shards)
	}
	t.Logf("split shard %d: slots %s to shard %d under %d sends (%d after the switch)", from, upper, to, count(), count()-sentAt)
}

// TestMovingSlotsOnTheWire: while a range of slots is fenced on its shard (a slot move's last
// steps), a send to a conversation of the range, the creation of a group in it and a read mark
// are answered unavailable with retry_after_ms 200 over QUIC, a resend of an acked message is
// still answered with its Ack, and a conversation of the shard outside the range is served.
func TestMovingSlotsOnTheWire(t *testing.T) {
	srv := syncdtest.Start(t, nil)
	token, err := srv.MintToken("alice", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	alice := prototest.Connect(t, srv.Addr().String(), srv.Fingerprint(), token, "alice", "phone")
	m, _ := srv.Cluster().Map()
	r := m.Slots[0] // shard 1's range
	span := log.SlotSpan{First: r.First, Last: r.First + (r.Last-r.First)/2}
	pick := func(prefix string, in bool) string {
		for i := 0; ; i++ {
			id := fmt.Sprint(prefix, i)
			if s := log.ConvSlot(id); r.First <= s && s <= r.Last && span.Contains(s) == in {
				return id
			}
		}
	}
	moving, staying, created := pick("g:in", true), pick("g:out", false), pick("g:new", true)
	first := alice.Ack(&proto.CreateGroup{ID: alice.ID(), Conv: moving, ClientMsgID: "c1", Members: []string{"bob"}})
	alice.Ack(&proto.CreateGroup{ID: alice.ID(), Conv: staying, ClientMsgID: "c2", Members: []string{"bob"}})
	if _, err := srv.Node().Propose(t.Context(), r.Shard, raftstore.MoveCommand(&log.MoveStep{Op: log.MoveFence, Move: 7, Slots: &span})); err != nil {
		t.Fatal(err)
	}
	for _, f := range []proto.Frame{
		&proto.Send{ID: alice.ID(), Conv: moving, ClientMsgID: "m1", Body: []byte("hi")},
		&proto.CreateGroup{ID: alice.ID(), Conv: created, ClientMsgID: "c3", Members: []string{"bob"}},
		&proto.MarkRead{ID: alice.ID(), Conv: moving, ClientMsgID: "r1", UpTo: 1},
	} {
		e, ok := alice.Do(f).(*proto.Error)
		if !ok || e.Code != proto.CodeUnavailable || e.RetryAfterMs != 200 {
			t.Fatalf("%v in fenced slots: %+v, want unavailable with retry_after_ms 200", f.FrameType(), e)
		}
	}
	if a := alice.Ack(&proto.CreateGroup{ID: alice.ID(), Conv: moving, ClientMsgID: "c1", Members: []string{"bob"}}); a.MsgID != first.MsgID {
		t.Fatalf("a resend to the fenced slots: %+v, want the original %+v", a, first)
	}
	alice.Ack(&proto.Send{ID: alice.ID(), Conv: staying, ClientMsgID: "m2", Body: []byte("served")})
}

// TestSlotMoveCancelWhileCopying: an operator cancels a slot move while its copy runs (a slot
// holding a 200,000-entry log, so the copy lasts seconds): the driver has the destination drop
// each key's copy and ends the move; the slot stays with its shard, which serves the log whole;
// a later move of the same slot runs to its end.
func TestSlotMoveCancelWhileCopying(t *testing.T) {
	srv := syncdtest.Start(t, nil)
	node := srv.Node()
	const user = "big"
	slot := log.UserSlot(user)
	m, _ := srv.Cluster().Map()
	from := raftstore.ShardID(0)
	for _, r := range m.Slots {
		if r.First <= slot && slot <= r.Last {
			from = r.Shard
		}
	}
	const entries = 200_000
	fillLog(t, node, from, user, entries)
	admin := "http://" + srv.AdminAddr().String()
	auth := testkit.Bearer(srv.AdminToken())
	span := fmt.Sprint(slot, "-", slot)
	var started adminapi.MoveStarted
	code, body := testkit.HTTP(t, http.MethodPost, admin+"/v1/moves?slots="+span+"&new_shard=1", auth)
	if err := json.Unmarshal([]byte(body), &started); err != nil || code != http.StatusOK || started.Slots != span {
		t.Fatalf("POST /v1/moves?slots=%s: HTTP %d %s", span, code, body)
	}
	to := raftstore.ShardID(started.To)
	cancelMidCopy(t, srv, user, started)
	if m, _ := srv.Cluster().Map(); slotOwner(m, slot) != from {
		t.Fatalf("after the cancel, slot %d is shard %d's, not %d's", slot, slotOwner(m, slot), from)
	}
	src, _ := node.State(from)
	if info, err := src.UserInfo(user); err != nil || info.Head != entries || info.First != 1 {
		t.Fatalf("the user's log on its shard after the cancel: %+v, %v", info, err)
	}
	dst, _ := node.State(to)
	if info, err := dst.UserInfo(user); err != nil || info.Head != 0 {
		t.Fatalf("the destination after the cancel: %+v, %v; want nothing of the user and no refusal", info, err)
	}
	// The slot moves for real afterwards.
	code, body = testkit.HTTP(t, http.MethodPost, fmt.Sprintf("%s/v1/moves?slots=%s&to=%d", admin, span, to), auth)
	if err := json.Unmarshal([]byte(body), &started); err != nil || code != http.StatusOK {
		t.Fatalf("the second move: HTTP %d %s", code, body)
	}
	testkit.WaitTrue(t, 60*time.Second, "the second move to end", func() bool {
		m, _ := srv.Cluster().Map()
		return len(m.Moves) == 0 && slotOwner(m, slot) == to
	})
	if info, err := dst.UserInfo(user); err != nil || info.Head != entries {
		t.Fatalf("the user's log after the second move: %+v, %v", info, err)
	}
	if _, err := src.UserInfo(user); !errors.Is(err, log.ErrMoved) {
		t.Fatalf("the old shard after the second move: %v, want ErrMoved", err)
	}
}

// slotOwner returns the shard m's slot table gives slot.
func slotOwner(m cluster.ClusterMap, slot int) raftstore.ShardID {
	for _, r := range m.Slots {
		if r.First <= slot && slot <= r.Last {
			return r.Shard
		}
	}
	return 0
}
