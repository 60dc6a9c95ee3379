package syncd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestRetainShard: a retention pass trims exactly the logs over the limit — by count, keeping the
// newest MaxCount entries, and by age, dropping entries older than MaxAge — and only moves their
// first retained position: heads stay, and a log within the limits is left alone. It runs on real
// Pebble shards without Raft (raftstoretest.Local).
func TestRetainShard(t *testing.T) {
	node := raftstoretest.OpenLocal(t, t.TempDir(), 1)
	defer node.Close()
	ctx := context.Background()
	const shard = raftstore.ShardID(1)
	now := time.Now()
	// deliver appends n entries to uid's log, the first of them born at from, one second apart.
	pos := uint64(0)
	deliver := func(uid string, n int, from time.Time) {
		t.Helper()
		b := &log.DeliveryBatch{Source: 9, Prev: pos}
		for i := range n {
			pos++
			b.Items = append(b.Items, log.Delivery{Pos: pos, Users: []string{uid}, Entry: log.Entry{
				Kind: log.KindMessage, MsgID: log.MsgID{Shard: 9, Index: pos}, Conv: "g:" + uid, ConvSeq: log.Position(i + 1),
				Sender: "x", Time: from.Add(time.Duration(i) * time.Second).UnixNano(), Body: []byte(fmt.Sprint(i))}})
		}
		b.Last = pos
		if _, err := node.Propose(ctx, shard, raftstore.DeliverCommand(b)); err != nil {
			t.Fatal(err)
		}
	}
	deliver("many", 10, now)                 // over the count limit
	deliver("old", 4, now.Add(-2*time.Hour)) // every entry over the age limit…
	deliver("old", 2, now)                   // …but these two
	deliver("fine", 3, now)                  // within both

	if err := retainShard(ctx, node, shard, log.TrimUserLog, log.Retention{MaxCount: 5, MaxAge: int64(time.Hour)}, nil); err != nil {
		t.Fatal(err)
	}
	state, _ := node.State(shard)
	for uid, want := range map[string][2]log.Position{"many": {6, 10}, "old": {5, 6}, "fine": {1, 3}} {
		info, err := state.UserInfo(uid)
		if err != nil || info.First != want[0] || info.Head != want[1] {
			t.Errorf("%s: first %d head %d (%v), want first %d head %d", uid, info.First, info.Head, err, want[0], want[1])
		}
	}
}

// TestRetainShardFollowsCursors: with MinAge set, a pass trims what every active device of a
// user has acked and is older than MinAge, keeps what an active device lacks, and lets the bound
// pass an active device; a device unseen for longer than InactiveAfter holds nothing. Real
// Pebble shards without Raft (raftstoretest.Local), whose commands carry the proposer's clock.
func TestRetainShardFollowsCursors(t *testing.T) {
	node := raftstoretest.OpenLocal(t, t.TempDir(), 1)
	defer node.Close()
	ctx := context.Background()
	const shard = raftstore.ShardID(1)
	old := time.Now().Add(-2 * time.Hour) // every entry is older than MinAge
	pos := uint64(0)
	for _, uid := range []string{"held", "acked", "bound"} {
		b := &log.DeliveryBatch{Source: 9, Prev: pos}
		for i := range 6 {
			pos++
			b.Items = append(b.Items, log.Delivery{Pos: pos, Users: []string{uid}, Entry: log.Entry{
				Kind: log.KindMessage, MsgID: log.MsgID{Shard: 9, Index: pos}, Conv: "g:" + uid, ConvSeq: log.Position(i + 1),
				Sender: "x", Time: old.Add(time.Duration(i) * time.Second).UnixNano(), Body: []byte("x")}})
		}
		b.Last = pos
		if _, err := node.Propose(ctx, shard, raftstore.DeliverCommand(b)); err != nil {
			t.Fatal(err)
		}
	}
	state, _ := node.State(shard)
	cursor := func(uid, device string, p log.Position) {
		t.Helper()
		info, _ := state.UserInfo(uid)
		cmd := raftstore.CursorCommand(&log.CursorUpdate{UID: uid, Device: device, Cursor: log.Cursor{Epoch: info.Epoch, Pos: p}})
		if _, err := node.Propose(ctx, shard, cmd); err != nil {
			t.Fatal(err)
		}
	}
	cursor("held", "phone", 6)
	cursor("held", "tablet", 2) // lacks 3..6
	cursor("acked", "phone", 6)
	cursor("bound", "phone", 6)
	cursor("bound", "tablet", 1) // lacks 2..6, but the bound keeps only 3
	check := func(what string, want map[string]log.Position) {
		t.Helper()
		for uid, first := range want {
			if info, err := state.UserInfo(uid); err != nil || info.First != first || info.Head != 6 {
				t.Errorf("%s: %s first %d head %d (%v), want first %d head 6", what, uid, info.First, info.Head, err, first)
			}
		}
	}
	r := log.Retention{MinAge: int64(time.Hour), InactiveAfter: int64(time.Hour)}
	if err := retainShard(ctx, node, shard, log.TrimUserLog, r, nil); err != nil {
		t.Fatal(err)
	}
	check("without a bound", map[string]log.Position{"held": 3, "acked": 7, "bound": 2})
	r.MaxCount = 3
	if err := retainShard(ctx, node, shard, log.TrimUserLog, r, nil); err != nil {
		t.Fatal(err)
	}
	check("keeping at most 3", map[string]log.Position{"held": 4, "acked": 7, "bound": 4})
	// The tablets were seen a moment ago; with InactiveAfter shorter than that they hold nothing.
	time.Sleep(10 * time.Millisecond)
	r.InactiveAfter = int64(time.Millisecond)
	if err := retainShard(ctx, node, shard, log.TrimUserLog, r, nil); err != nil {
		t.Fatal(err)
	}
	check("inactive tablets", map[string]log.Position{"held": 7, "acked": 7, "bound": 7})
}

// TestConvRetention: with conversation retention set, each shard leader trims conversation logs
// too, keeping the newest entries; a large group's member whose device follows it from before
// what is kept is told TooOld for that source (PROTOCOL §6), never skipped ahead silently.
func TestConvRetention(t *testing.T) {
	ts := startServer(t, func(c *Config) {
		c.LargeGroupThreshold, c.ConvRetention, c.RetentionInterval = 3, log.Retention{MaxCount: 4}, 50*time.Millisecond
		c.SendRate, c.SendBurst = 1e6, 1e6
	})
	ann := connect(t, ts, "ann", "phone")
	ann.Ack(&proto.CreateGroup{ID: ann.ID(), Conv: "g", ClientMsgID: "c", Members: []string{"bob", "cat", "dan"}})
	for i := range 10 {
		ann.Ack(&proto.Send{ID: ann.ID(), Conv: "g", ClientMsgID: fmt.Sprint("m", i), Body: []byte("x")}) // 2..11
	}
	testkit.WaitTrue(t, 10*time.Second, "the group's log trimmed to its newest 4 entries", func() bool {
		st, ok := ann.Do(&proto.ConvState{ID: ann.ID(), Conv: "g"}).(*proto.ConvStateResult)
		return ok && st.Conv.First == 8 && st.Conv.Head == 11
	})
	bob := connect(t, ts, "bob", "phone")
	bob.StartSync(0, 0)
	for {
		switch f := bob.NextSync().(type) {
		case *proto.TooOld:
			if f.Source != "g" || f.First != 8 || f.Head != 11 {
				t.Fatalf("TooOld %+v, want the source g, first 8, head 11", f)
			}
			return
		case *proto.Batch:
			if f.Source == "g" {
				t.Fatalf("a batch of the trimmed source: %+v", f)
			}
		}
	}
}
