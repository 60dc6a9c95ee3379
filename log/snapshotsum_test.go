package log

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestSnapshotStateChecksum: a snapshot's checksum is the shard's StateChecksum at the moment it
// was captured, whatever is written afterwards, and a scan whose context ends stops with its
// error instead of reading on.
func TestSnapshotStateChecksum(t *testing.T) {
	s := newMemShard(t, testShardID)
	baseScript(s).run(t, s, 1)
	sn := s.NewSnapshot()
	defer sn.Close()
	want := stateSum(t, s)
	n := uint64(len(baseScript(s)))
	moreScript(s).run(t, s, n+1)
	if stateSum(t, s) == want {
		t.Fatal("the later commands changed nothing: the test proves nothing")
	}
	sum, keys, err := sn.StateChecksum(context.Background())
	if err != nil || [2]uint64{sum, keys} != want {
		t.Fatalf("snapshot checksum (%x, %d, %v), want %x", sum, keys, err, want)
	}

	// Enough keys for the scan to look at its context at least once.
	first := n + uint64(len(moreScript(s))) + 1
	for i := range checksumCheckEvery / 4 {
		appendOK(t, s, Stamp{Index: first + uint64(i), Time: 5000}, Append{Conv: "d:alice:carol", Sender: "alice",
			ClientMsgID: fmt.Sprintf("bulk-%d", i), Kind: KindMessage, Body: []byte("x"), Members: []string{"alice", "carol"}})
	}
	big := s.NewSnapshot()
	defer big.Close()
	if _, keys, err := big.StateChecksum(context.Background()); err != nil || keys < checksumCheckEvery {
		t.Fatalf("%d keys (%v): too few for the scan to look at its context", keys, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := big.StateChecksum(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a canceled scan returned %v", err)
	}
}
