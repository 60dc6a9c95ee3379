package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/syncd"
)

// TestTooOldCursorRebases: retention trims bob's log while his new device has never synced; the
// device is told "too old" (never silently moved forward), rebases to the head, and receives what
// comes next.
func TestTooOldCursorRebases(t *testing.T) {
	srv := startServerWith(t, func(c *syncd.Config) {
		c.Retention = log.Retention{MaxCount: 5}
		c.RetentionInterval = 50 * time.Millisecond
	})
	alice := dialDevice(t, srv, "alice", "phone", t.TempDir())
	defer alice.Close()
	for i := range 20 {
		if _, err := alice.Send("d:alice:bob", "bob", []byte(fmt.Sprint("old", i))); err != nil {
			t.Fatal(err)
		}
	}
	state, err := srv.Node().State(syncd.NewSlotTable(srv.Node().Shards()).UserShard("bob"))
	if err != nil {
		t.Fatal(err)
	}
	raftstoretest.Eventually(t, 20*time.Second, "bob's log to be delivered and trimmed", func() bool {
		info, err := state.UserInfo("bob")
		return err == nil && info.Head == 20 && info.First == 16
	})

	bob := dialDevice(t, srv, "bob", "tablet", t.TempDir())
	defer bob.Close()
	select {
	case r := <-bob.rebases:
		if r.Head != 20 {
			t.Fatalf("rebase to %d, want the head 20", r.Head)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a device behind retention was not told to rebase")
	}
	// After a rebase the app refreshes its conversations and pages history from the server.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	convs, more, err := bob.Conversations(ctx, "", 10)
	if err != nil || more || len(convs) != 1 || convs[0].Conv != "d:alice:bob" || convs[0].Head != 20 {
		t.Fatalf("conversations after rebase: %+v %v %v", convs, more, err)
	}
	page, err := bob.History(ctx, "d:alice:bob", 0, 3)
	if err != nil || len(page.Entries) != 3 || string(page.Entries[2].Body) != "old19" {
		t.Fatalf("latest history: %+v %v", page, err)
	}
	if _, err := alice.Send("d:alice:bob", "bob", []byte("new")); err != nil {
		t.Fatal(err)
	}
	waitBodies(t, "d:alice:bob", []string{"new"}, bob)
}
