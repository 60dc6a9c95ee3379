package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestTooOldCursorRebases: retention trims bob's log while his new device has never synced; the
// device is told "too old" (never silently moved forward), rebases to the head — loading the
// conversation's state and recent history, which retention of user logs leaves whole — and
// receives what comes next.
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
	state, err := srv.Node().State(cluster.Even(len(srv.Node().Shards())).UserShard("bob"))
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitTrue(t, 20*time.Second, "bob's log to be delivered and trimmed", func() bool {
		info, err := state.UserInfo("bob")
		return err == nil && info.Head == 20 && info.First == 16
	})

	bob := dialDevice(t, srv, "bob", "tablet", t.TempDir())
	defer bob.Close()
	select {
	case r := <-bob.rebases:
		if r.Head != 20 || !slices.Equal(r.Convs, []string{"d:alice:bob"}) {
			t.Fatalf("rebase to %d loading %v, want the head 20 and d:alice:bob", r.Head, r.Convs)
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
	want := make([]string, 0, 21)
	for i := range 20 {
		want = append(want, fmt.Sprint("old", i))
	}
	waitBodies(t, "d:alice:bob", append(want, "new"), bob)
}

// TestEpochChangeResyncs: an operator resets bob's user log (admin HTTP, as syncctl reset-user
// does). His connected device is told "epoch changed" at once, resyncs the new epoch from its
// start and keeps its local history; what comes next arrives exactly once; a new device sees only
// the new epoch; the device's stored cursor moves to the new epoch.
func TestEpochChangeResyncs(t *testing.T) {
	srv := startServer(t)
	alice := dialDevice(t, srv, "alice", "phone", t.TempDir())
	defer alice.Close()
	bob := dialDevice(t, srv, "bob", "laptop", t.TempDir())
	defer bob.Close()
	for i := range 3 {
		if _, err := alice.Send("d:alice:bob", "bob", []byte(fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
	}
	waitBodies(t, "d:alice:bob", []string{"m0", "m1", "m2"}, bob)
	state, err := srv.Node().State(cluster.Even(len(srv.Node().Shards())).UserShard("bob"))
	if err != nil {
		t.Fatal(err)
	}
	before, err := state.UserInfo("bob")
	if err != nil {
		t.Fatal(err)
	}

	code, body := testkit.HTTP(t, http.MethodPost, "http://"+srv.AdminAddr().String()+"/v1/users/bob/reset",
		testkit.Bearer(srv.AdminToken()))
	var reset struct {
		Epoch uint64 `json:"epoch"`
	}
	if err := json.Unmarshal([]byte(body), &reset); err != nil || code != http.StatusOK || reset.Epoch <= uint64(before.Epoch) {
		t.Fatalf("reset: HTTP %d %s, %+v, %v (old epoch %d)", code, body, reset, err, before.Epoch)
	}
	select {
	case e := <-bob.epochs:
		if uint64(e.Epoch) != reset.Epoch {
			t.Fatalf("epoch event %d, want %d", e.Epoch, reset.Epoch)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connected device was not told that the epoch changed")
	}

	if _, err := alice.Send("d:alice:bob", "bob", []byte("after")); err != nil {
		t.Fatal(err)
	}
	waitBodies(t, "d:alice:bob", []string{"m0", "m1", "m2", "after"}, bob)
	tablet := dialDevice(t, srv, "bob", "tablet", t.TempDir())
	defer tablet.Close()
	waitBodies(t, "d:alice:bob", []string{"after"}, tablet)
	testkit.WaitTrue(t, 10*time.Second, "bob's laptop cursor in the new epoch", func() bool {
		cs, err := state.Cursors("bob")
		for _, c := range cs {
			if c.Device == "laptop" {
				return err == nil && uint64(c.Cursor.Epoch) == reset.Epoch && c.Cursor.Pos == 1
			}
		}
		return false
	})
}
