package syncd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
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

	if err := retainShard(ctx, node, shard, log.Retention{MaxCount: 5, MaxAge: int64(time.Hour)}); err != nil {
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
