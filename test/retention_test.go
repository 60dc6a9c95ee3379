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

// bobsCursors returns a function that reads the stored cursor and last sighting of one of bob's
// devices on srv (position 0 if it has none).
// tabletScene is where both cursor-retention tests start: a server trimming with r every 50 ms,
// alice's phone and bob's connected, and bob's tablet, which stored bob's first three messages
// and went offline; held is bob's log's first position then.
type tabletScene struct {
	srv          *syncd.Server
	cursor       func(dev string) (log.Position, time.Time)
	info         func() log.LogInfo
	alice, phone *device
	tabletDir    string
	held         log.Position
}

// offlineTablet sets the scene up; the devices close when the test ends.
func offlineTablet(t *testing.T, r log.Retention) tabletScene {
	t.Helper()
	sc := tabletScene{srv: startServerWith(t, func(c *syncd.Config) {
		c.Retention = r
		c.RetentionInterval = 50 * time.Millisecond
	}), tabletDir: t.TempDir()}
	sc.cursor, sc.info = bobsCursors(t, sc.srv)
	sc.alice = dialDevice(t, sc.srv, "alice", "phone", t.TempDir())
	t.Cleanup(func() { sc.alice.Close() })
	sc.phone = dialDevice(t, sc.srv, "bob", "phone", t.TempDir())
	t.Cleanup(func() { sc.phone.Close() })
	tablet := dialDevice(t, sc.srv, "bob", "tablet", sc.tabletDir)
	waitBodies(t, "d:alice:bob", sendBodies(t, sc.alice, 0, 3), sc.phone, tablet)
	sc.held = settled(t, sc.cursor, sc.info, "phone", "tablet")
	tablet.Close()
	return sc
}

func bobsCursors(t *testing.T, srv *syncd.Server) (cursor func(dev string) (log.Position, time.Time), info func() log.LogInfo) {
	t.Helper()
	state, err := srv.Node().State(cluster.Even(len(srv.Node().Shards())).UserShard("bob"))
	if err != nil {
		t.Fatal(err)
	}
	cursor = func(dev string) (log.Position, time.Time) {
		cs, err := state.Cursors("bob")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.Device == dev {
				return c.Cursor.Pos, time.Unix(0, c.Seen)
			}
		}
		return 0, time.Time{}
	}
	info = func() log.LogInfo {
		i, err := state.UserInfo("bob")
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	return cursor, info
}

// sendBodies sends m<from>…m<to-1> from alice to bob, and returns every body up to m<to-1>.
func sendBodies(t *testing.T, alice *device, from, to int) []string {
	t.Helper()
	for i := from; i < to; i++ {
		if _, err := alice.Send("d:alice:bob", "bob", []byte(fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
	}
	all := make([]string, to)
	for i := range all {
		all[i] = fmt.Sprint("m", i)
	}
	return all
}

// settled waits until every one of bob's devices named has stored his whole log and retention
// has dropped it all (MinAge 1 ns), and returns the head. Acks make delivered entries in bob's
// log too (D60), so positions are read from the log, never counted from the sends.
func settled(t *testing.T, cursor func(string) (log.Position, time.Time), info func() log.LogInfo, devices ...string) log.Position {
	t.Helper()
	var head log.Position
	testkit.WaitTrue(t, 20*time.Second, fmt.Sprintf("%v to store bob's whole log and the log to be emptied", devices), func() bool {
		i := info()
		for _, d := range devices {
			if p, _ := cursor(d); p != i.Head {
				return false
			}
		}
		head = i.Head
		return i.First == i.Head+1
	})
	return head
}

// TestRetentionKeepsWhatActiveDevicesLack: with retention tied to device cursors (log.Retention
// MinAge), bob's log drops what both his devices stored but keeps what his tablet, offline and
// recently seen, has not: the tablet comes back and catches up from its cursor, no rebase. Then
// the count bound passes the tablet's cursor while it is offline: on its return it is told "too
// old" and rebases (G3, never moved silently), which syncd_retention_cursors_passed_total counts.
func TestRetentionKeepsWhatActiveDevicesLack(t *testing.T) {
	const bound = 30
	// MinAge 1 ns: what every active device has acked goes at the next pass.
	sc := offlineTablet(t, log.Retention{MaxCount: bound, MinAge: 1, InactiveAfter: int64(time.Hour)})
	srv, cursor, info, alice, phone, tabletDir, held := sc.srv, sc.cursor, sc.info, sc.alice, sc.phone, sc.tabletDir, sc.held
	var tablet *device

	all := sendBodies(t, alice, 3, 8)
	waitBodies(t, "d:alice:bob", all, phone)
	settledPhone := func() log.LogInfo {
		var i log.LogInfo
		testkit.WaitTrue(t, 20*time.Second, "the phone to store bob's whole log", func() bool {
			i = info()
			p, _ := cursor("phone")
			return p == i.Head
		})
		return i
	}
	settledPhone()
	// Ten passes with the phone at the head: without the tablet's hold they would empty the log.
	time.Sleep(10 * 50 * time.Millisecond)
	if i := info(); i.First != held+1 || i.Head <= held {
		t.Fatalf("bob's log keeps %d..%d, want %d..: what the active tablet lacks", i.First, i.Head, held+1)
	}

	tablet = dialDevice(t, srv, "bob", "tablet", tabletDir)
	waitBodies(t, "d:alice:bob", all, tablet)
	select {
	case r := <-tablet.rebases:
		t.Fatalf("the tablet rebased (%+v) though its entries were kept", r)
	default:
	}
	held = settled(t, cursor, info, "phone", "tablet")
	tablet.Close()

	// More than the bound while the tablet is away: the bound passes its cursor.
	all = sendBodies(t, alice, 8, 8+bound+5)
	waitBodies(t, "d:alice:bob", all, phone)
	i := settledPhone()
	testkit.WaitTrue(t, 20*time.Second, "the bound to trim bob's log past the tablet", func() bool {
		i = info()
		return i.Head-i.First+1 <= bound && i.First > held+1
	})
	// The tablet's cursor, and perhaps the phone's stored one, which trails its stream.
	if n := testkit.Metric(t, srv.AdminAddr().String(), "syncd_retention_cursors_passed_total"); n == "0" {
		t.Errorf("syncd_retention_cursors_passed_total %s, want the tablet's cursor counted", n)
	}
	tablet = dialDevice(t, srv, "bob", "tablet", tabletDir)
	defer tablet.Close()
	select {
	case r := <-tablet.rebases:
		if log.Position(r.Head) < i.Head {
			t.Fatalf("rebase to %d, want the head %d or later", r.Head, i.Head)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a device the bound passed was not told to rebase")
	}
	if _, err := alice.Send("d:alice:bob", "bob", []byte("after")); err != nil {
		t.Fatal(err)
	}
	testkit.WaitTrue(t, 20*time.Second, "the rebased tablet to receive what comes next", func() bool {
		b := bodies(t, tablet, "d:alice:bob")
		return len(b) > 0 && b[len(b)-1] == "after"
	})
}

// TestRetentionReleasesInactiveDevices: a device that stores no cursor for InactiveAfter stops
// holding bob's log. Until then what it lacks is kept; after, it goes, and the device, back, is
// told "too old" and rebases.
func TestRetentionReleasesInactiveDevices(t *testing.T) {
	const inactive = 6 * time.Second
	sc := offlineTablet(t, log.Retention{MaxCount: 1000, MinAge: 1, InactiveAfter: int64(inactive)})
	srv, cursor, info, alice, phone, tabletDir, held := sc.srv, sc.cursor, sc.info, sc.alice, sc.phone, sc.tabletDir, sc.held
	var tablet *device
	_, seen := cursor("tablet") // its last sighting: the store that moved its cursor last

	waitBodies(t, "d:alice:bob", sendBodies(t, alice, 3, 6), phone)
	testkit.WaitTrue(t, 20*time.Second, "the phone to store bob's whole log", func() bool {
		p, _ := cursor("phone")
		return p == info().Head
	})
	time.Sleep(5 * 50 * time.Millisecond) // a few passes with the phone at the head
	i := info()
	if time.Since(seen) >= inactive {
		t.Fatalf("the test took %v to get here, past the tablet's inactivity (%v): nothing shown", time.Since(seen), inactive)
	}
	if i.First != held+1 || i.Head <= held {
		t.Fatalf("bob's log keeps %d..%d while the tablet is active, want %d..", i.First, i.Head, held+1)
	}

	testkit.WaitTrue(t, 20*time.Second, "the inactive tablet to stop holding bob's log", func() bool {
		i = info()
		return i.First == i.Head+1
	})
	if since := time.Since(seen); since < inactive {
		t.Fatalf("released %v after the tablet's last cursor store, before %v", since, inactive)
	}
	tablet = dialDevice(t, srv, "bob", "tablet", tabletDir)
	defer tablet.Close()
	select {
	case r := <-tablet.rebases:
		if log.Position(r.Head) < i.Head {
			t.Fatalf("rebase to %d, want the head %d or later", r.Head, i.Head)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an inactive device behind retention was not told to rebase")
	}
}
