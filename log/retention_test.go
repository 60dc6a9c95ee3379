package log

import (
	"fmt"
	"path/filepath"
	"testing"
)

// TestRetentionDueAgreesWithTrim: the leader's question (Shard.RetentionDue, a few reads, its own
// clock) and the state machine's answer (Tx.TrimUser at the same time) agree on every
// combination of bounds, min-age, inactivity and time: a pass proposes a trim exactly when the
// trim would move the log's first retained position. Were they to disagree one way, logs would
// never be trimmed; the other way, every pass would replicate no-op commands.
func TestRetentionDueAgreesWithTrim(t *testing.T) {
	s := newMemShard(t, testShardID)
	idx := uint64(0)
	at := func(time int64) Stamp { idx++; return Stamp{Index: idx, Time: time} }
	for i := range 10 { // entries 1..10 of bob's log, at 100, 200, … 1000
		appendOK(t, s, at(int64(100*(i+1))), Append{Conv: "d:alice:bob", Sender: "alice", ClientMsgID: fmt.Sprint("m", i),
			Kind: KindMessage, Body: []byte("x"), Members: []string{"alice", "bob"}})
	}
	mustApply(t, s, at(1000), func(tx *Tx) error { _, err := tx.Deliver(Stamp{Time: 1000}, outboxBatch(t, s, 0, 10)); return err })
	info, err := s.UserInfo("bob")
	if err != nil {
		t.Fatal(err)
	}
	for dev, c := range map[string]struct {
		pos  Position
		seen int64
	}{"phone": {10, 1000}, "tablet": {4, 1000}, "old-pc": {2, 100}} {
		st := at(c.seen)
		mustApply(t, s, st, func(tx *Tx) error { return tx.SetCursor(st, "bob", dev, Cursor{Epoch: info.Epoch, Pos: c.pos}) })
	}

	moved := 0
	for _, maxCount := range []uint64{0, 3, 8} {
		for _, maxAge := range []int64{0, 250, 5000} {
			for _, minAge := range []int64{0, 50, 400} {
				for _, inactive := range []int64{0, 300, 3000} {
					for _, now := range []int64{1000, 1500, 4000} {
						r := Retention{MaxCount: maxCount, MaxAge: maxAge, MinAge: minAge, InactiveAfter: inactive}
						due, err := s.RetentionDue(TrimUserLog, "bob", now, r)
						if err != nil {
							t.Fatal(err)
						}
						tx := s.Begin() // never committed: each combination starts from the same state
						first, err := tx.TrimUser(Stamp{Index: idx + 1, Time: now}, "bob", r)
						tx.Close()
						if err != nil {
							t.Fatal(err)
						}
						if due != (first > info.First) {
							t.Errorf("%+v at %d: due %v, but the trim keeps from %d (first %d)", r, now, due, first, info.First)
						}
						if first > info.First {
							moved++
						}
					}
				}
			}
		}
	}
	if moved == 0 || moved == 3*3*3*3*3 {
		t.Fatalf("%d of the combinations trim: the grid tests nothing", moved)
	}
}

// TestRetentionHoldsWhatActiveDevicesLack pins the rule on the numbers: max(bound, min(hold,
// young)). Without the hold of the tablet the min-age rule would drop entries it never stored.
func TestRetentionHoldsWhatActiveDevicesLack(t *testing.T) {
	s := newMemShard(t, testShardID)
	idx := uint64(0)
	at := func(time int64) Stamp { idx++; return Stamp{Index: idx, Time: time} }
	for i := range 6 { // entries 1..6 at 100 … 600
		appendOK(t, s, at(int64(100*(i+1))), Append{Conv: "d:alice:bob", Sender: "alice", ClientMsgID: fmt.Sprint("m", i),
			Kind: KindMessage, Body: []byte("x"), Members: []string{"alice", "bob"}})
	}
	mustApply(t, s, at(600), func(tx *Tx) error { _, err := tx.Deliver(Stamp{Time: 600}, outboxBatch(t, s, 0, 6)); return err })
	epoch := mustInfo(t, s).Epoch
	cursor := func(dev string, pos Position, time int64) {
		st := at(time)
		mustApply(t, s, st, func(tx *Tx) error { return tx.SetCursor(st, "bob", dev, Cursor{Epoch: epoch, Pos: pos}) })
	}
	trim := func(time int64, r Retention) Position {
		var first Position
		mustApply(t, s, at(time), func(tx *Tx) error {
			var err error
			first, err = tx.TrimUser(Stamp{Time: time}, "bob", r)
			return err
		})
		return first
	}
	cursor("phone", 6, 1000)
	cursor("tablet", 1, 1000)
	r := Retention{MaxCount: 4, MinAge: 100, InactiveAfter: 1000}
	// The bound (newest 4: from 3) passes the tablet's cursor 1: it will be told "too old".
	if got := trim(1500, r); got != 3 {
		t.Fatalf("bound: first %d, want 3", got)
	}
	// The tablet rebases to 3 and is seen again: it holds 4 on, though all are older than min-age.
	cursor("tablet", 3, 2000)
	if got := trim(2500, r); got != 4 {
		t.Fatalf("held by the tablet: first %d, want 4", got)
	}
	// The phone's sighting (1000) is old, but it has acked everything: only the tablet holds.
	// At 3001 the tablet is inactive too (last seen 2000): everything older than min-age goes.
	if got := trim(3000, r); got != 4 {
		t.Fatalf("tablet still active at 3000: first %d, want 4", got)
	}
	if got := trim(3001, r); got != 7 {
		t.Fatalf("tablet inactive: first %d, want 7 (empty)", got)
	}
}

// TestGoldenSnapshotBeforeSightings: a snapshot from before device cursors kept their last
// sighting restores; its cursor reads with Seen 0. The leader counts such a device as inactive
// and proposes a trim; the trim counts it as active, keeps what it lacks and gives it the
// trim's time, so the device ages from there and stops holding InactiveAfter later.
func TestGoldenSnapshotBeforeSightings(t *testing.T) {
	s := newMemShard(t, 4)
	if err := restore(t, s, readHex(t, filepath.Join("testdata", "golden", "snapshot.v1-cursor.v1.hex"))); err != nil {
		t.Fatalf("snapshot no longer restores: %v", err)
	}
	cs, err := s.Cursors("bob")
	if err != nil || len(cs) != 1 || cs[0] != (DeviceCursor{Device: "phone", Cursor: Cursor{Epoch: 1030, Pos: 1}}) {
		t.Fatalf("cursors of bob: %+v, %v", cs, err)
	}
	r := Retention{MaxAge: 1_000_000, MinAge: 100, InactiveAfter: 1000}
	due := func(now int64) bool {
		t.Helper()
		d, err := s.RetentionDue(TrimUserLog, "bob", now, r)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	trim := func(st Stamp) Position {
		t.Helper()
		var first Position
		mustApply(t, s, st, func(tx *Tx) error { var err error; first, err = tx.TrimUser(st, "bob", r); return err })
		return first
	}
	if !due(5000) {
		t.Fatal("a log held only by a device without a sighting is not due")
	}
	if first := trim(Stamp{Index: 10, Time: 5000}); first != 2 {
		t.Fatalf("first %d, want 2: entry 2 is not acked by the phone", first)
	}
	if cs, err = s.Cursors("bob"); err != nil || cs[0].Seen != 5000 {
		t.Fatalf("the trim did not give the phone its time: %+v, %v", cs, err)
	}
	if due(6000) {
		t.Fatal("due again while the phone is active")
	}
	if !due(6001) {
		t.Fatal("not due once the phone is inactive")
	}
	if first := trim(Stamp{Index: 11, Time: 6001}); first != 3 {
		t.Fatalf("first %d, want 3 once the phone is inactive", first)
	}
}
