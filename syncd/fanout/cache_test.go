package fanout

import (
	"context"
	"fmt"
	"testing"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/syncd/routing"
)

// TestAfterIsContiguousFromAnyPosition: the shared outbox cache answers every stream exactly the
// records after its position, contiguous, whether the position is inside the cache, ahead of
// it, or behind what the cache still holds (a stream that fell behind reads uncached), and the
// cache stays within its bound.
func TestAfterIsContiguousFromAnyPosition(t *testing.T) {
	node := raftstoretest.OpenLocal(t, t.TempDir(), 1)
	defer node.Close()
	const n = maxCache + 700
	for i := range n {
		req := &log.Append{Conv: "d:a:b", Sender: "a", ClientMsgID: fmt.Sprint("m", i), Kind: log.KindMessage,
			Members: []string{"a", "b"}, Body: []byte("hi")}
		if _, err := node.Propose(context.Background(), 1, raftstore.AppendCommand(req)); err != nil {
			t.Fatal(err)
		}
	}
	state, _ := node.State(1)
	info, _ := state.Outbox()
	if info.Head-info.First+1 != n {
		t.Fatalf("outbox %+v, want %d records", info, n)
	}
	f := New(node, routing.Even(1), Config{})
	s := &source{id: 1, dests: []raftstore.ShardID{1}, marks: map[raftstore.ShardID]uint64{1: 0}}
	check := func(from uint64) {
		t.Helper()
		recs, err := f.after(s, state, from, info.Head)
		if err != nil {
			t.Fatal(err)
		}
		want := min(f.cfg.Batch, int(info.Head-from))
		if len(recs) != want {
			t.Fatalf("after(%d): %d records, want %d", from, len(recs), want)
		}
		for i, r := range recs {
			if r.pos != from+uint64(i)+1 || len(r.byDest[1]) != 2 {
				t.Fatalf("after(%d): record %d at %d with %v", from, i, r.pos, r.byDest)
			}
		}
		if len(s.cache) > maxCache+f.cfg.Batch {
			t.Fatalf("cache holds %d records", len(s.cache))
		}
	}
	for from := uint64(0); from < info.Head; from += 100 { // a stream reading ahead
		check(from)
	}
	check(0)             // one that stayed at the start, behind what the cache holds now
	check(info.Head - 5) // and one near the head again
	check(info.Head)     // nothing after the head
}
