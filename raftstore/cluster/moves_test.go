package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/syncd-dev/syncd/log"
)

// TestMetaMoves drives the cluster map's moves through their commands: a move routes its user
// only once it has switched, its steps only go forward, a cancel is taken only while it copies,
// and the overrides survive a snapshot.
func TestMetaMoves(t *testing.T) {
	a := newMetaApplier(t, 4)
	f, apply := a.f, a.apply
	start := func(user string, from, to ShardID) (uint64, error) {
		err := apply(metaCommand{Op: "move-start", Move: &MoveInfo{User: user, From: from, To: to}})
		return a.index, err
	}
	for _, bad := range []struct {
		user     string
		from, to ShardID
	}{{"", 1, 2}, {"bob", 1, 1}, {"bob", 0, 2}, {"bob", 1, 5}} {
		if _, err := start(bad.user, bad.from, bad.to); !errors.Is(err, ErrMetaRefused) {
			t.Errorf("move-start %+v: %v, want refused", bad, err)
		}
	}
	id, err := start("bob", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := start("bob", 1, 2); !errors.Is(err, ErrMetaRefused) {
		t.Fatalf("a second move of bob: %v", err)
	}
	if _, pinned := f.slots.Load().UserOverride("bob"); pinned || !slices.Contains(f.slots.Load().Shards(), 3) {
		t.Fatal("a move in progress must not route its user, but must count its destination")
	}
	for _, c := range []metaCommand{
		{Op: "move-switch", MoveID: id},                 // still copying
		{Op: "move-end", MoveID: id},                    // not switched
		{Op: "move-step", MoveID: id, Step: PhaseDrop},  // the drop comes with the switch
		{Op: "move-step", MoveID: id, Step: "sideways"}, // no such step
		{Op: "move-cancel", MoveID: id + 100},           // no such move
	} {
		if err := apply(c); !errors.Is(err, ErrMetaRefused) {
			t.Errorf("%s %s: %v, want refused", c.Op, c.Step, err)
		}
	}
	if err := apply(metaCommand{Op: "move-step", MoveID: id, Step: PhaseCutover}); err != nil {
		t.Fatal(err)
	}
	if err := apply(metaCommand{Op: "move-step", MoveID: id, Step: PhaseCopy}); err != nil || f.snapshot().Moves[id].Step != PhaseCutover {
		t.Fatalf("a step back: %v, step %s", err, f.snapshot().Moves[id].Step)
	}
	if err := apply(metaCommand{Op: "move-cancel", MoveID: id}); !errors.Is(err, ErrMetaRefused) {
		t.Fatalf("a cancel after the cutover: %v", err)
	}
	if err := apply(metaCommand{Op: "move-step", MoveID: id, Step: PhaseFence, Cutovers: map[ShardID]uint64{1: 9}}); err != nil {
		t.Fatal(err)
	}
	if err := apply(metaCommand{Op: "move-switch", MoveID: id}); err != nil {
		t.Fatal(err)
	}
	if s, ok := f.slots.Load().UserOverride("bob"); !ok || s != 3 {
		t.Fatalf("after the switch bob routes to %d (%v)", s, ok)
	}
	if err := apply(metaCommand{Op: "move-end", MoveID: id}); err != nil || len(f.snapshot().Moves) != 0 {
		t.Fatalf("move-end: %v, moves %v", err, f.snapshot().Moves)
	}

	// A canceled move: only while it copies, and then it can only end.
	id2, err := start("ann", 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := apply(metaCommand{Op: "move-cancel", MoveID: id2}); err != nil || f.snapshot().Moves[id2].Step != PhaseCanceled {
		t.Fatalf("cancel: %v", err)
	}
	if err := apply(metaCommand{Op: "move-step", MoveID: id2, Step: PhaseCutover}); !errors.Is(err, ErrMetaRefused) {
		t.Fatalf("a canceled move went on: %v", err)
	}
	if err := apply(metaCommand{Op: "move-end", MoveID: id2}); err != nil {
		t.Fatal(err)
	}
	if _, pinned := f.slots.Load().UserOverride("ann"); pinned {
		t.Fatal("a canceled move pinned its user")
	}

	// A conversation's move: it has no cutover step, and its switch pins the conversation (not
	// a user of the same id).
	if err := apply(metaCommand{Op: "move-start", Move: &MoveInfo{User: "g", Conv: "g", From: 1, To: 2}}); !errors.Is(err, ErrMetaRefused) {
		t.Fatalf("a move of a user and a conversation at once: %v", err)
	}
	if err := apply(metaCommand{Op: "move-start", Move: &MoveInfo{Conv: "g", From: 1, To: 2}}); err != nil {
		t.Fatal(err)
	}
	id3 := a.index
	if err := apply(metaCommand{Op: "move-start", Move: &MoveInfo{Conv: "g", From: 1, To: 4}}); !errors.Is(err, ErrMetaRefused) {
		t.Fatalf("a second move of g: %v", err)
	}
	if _, err := start("g", 1, 2); err != nil { // the user g is another key
		t.Fatalf("moving user g while conversation g moves: %v", err)
	}
	if err := apply(metaCommand{Op: "move-step", MoveID: id3, Step: PhaseCutover}); !errors.Is(err, ErrMetaRefused) {
		t.Fatalf("a cutover of a conversation's move: %v", err)
	}
	for _, c := range []metaCommand{{Op: "move-step", MoveID: id3, Step: PhaseFence}, {Op: "move-switch", MoveID: id3}} {
		if err := apply(c); err != nil {
			t.Fatal(err)
		}
	}
	if s, ok := f.slots.Load().ConvOverride("g"); !ok || s != 2 {
		t.Fatalf("after the switch conversation g routes to %d (%v)", s, ok)
	}
	if _, pinned := f.slots.Load().UserOverride("g"); pinned {
		t.Fatal("the conversation's switch pinned the user of the same id")
	}
	if err := apply(metaCommand{Op: "move-start", Move: &MoveInfo{Conv: "g", From: 1, To: 3}}); !errors.Is(err, ErrMetaRefused) {
		t.Fatalf("a move of g from a shard it is not on: %v", err)
	}

	// The overrides survive a snapshot.
	restored := restoredCopy(t, f).slots.Load()
	if s, ok := restored.UserOverride("bob"); !ok || s != 3 {
		t.Fatalf("restored: bob routes to %d (%v)", s, ok)
	}
	if s, ok := restored.ConvOverride("g"); !ok || s != 2 {
		t.Fatalf("restored: conversation g routes to %d (%v)", s, ok)
	}
}

// TestMetaSlotMoves: a slot move is refused unless its source owns the whole range and nothing
// else moving touches it (an overlapping range, a key of its slots), and its switch gives the
// range to the destination in the slot table, dropping the overrides that pinned keys of it to
// the source while keeping those that pin them elsewhere.
func TestMetaSlotMoves(t *testing.T) {
	a := newMetaApplier(t, 3)
	f, apply, must := a.f, a.apply, a.must
	// Shard 1 owns 0-1365. Pin a user of its upper half to shard 1 and another to shard 2.
	userIn := func(prefix string, r log.SlotSpan) string {
		for i := 0; ; i++ {
			if u := fmt.Sprint(prefix, i); r.Contains(log.UserSlot(u)) {
				return u
			}
		}
	}
	upper := log.SlotSpan{First: 683, Last: 1365}
	pinnedHere, pinnedAway, moving := userIn("a", upper), userIn("b", upper), userIn("c", upper)
	for _, u := range []struct {
		uid  string
		from ShardID
		to   ShardID
	}{{pinnedHere, 1, 3}, {pinnedAway, 1, 2}} {
		must(metaCommand{Op: "move-start", Move: &MoveInfo{User: u.uid, From: u.from, To: u.to}})
		id := a.index
		must(metaCommand{Op: "move-step", MoveID: id, Step: PhaseFence})
		must(metaCommand{Op: "move-switch", MoveID: id})
		must(metaCommand{Op: "move-end", MoveID: id})
	}
	must(metaCommand{Op: "move-start", Move: &MoveInfo{User: pinnedHere, From: 3, To: 1}}) // back to 1
	back := a.index
	must(metaCommand{Op: "move-step", MoveID: back, Step: PhaseFence})
	must(metaCommand{Op: "move-switch", MoveID: back})
	must(metaCommand{Op: "move-end", MoveID: back})
	// A user of the range moving on its own.
	must(metaCommand{Op: "move-start", Move: &MoveInfo{User: moving, From: 1, To: 2}})
	own := a.index
	for _, bad := range []*MoveInfo{
		{Slots: &log.SlotSpan{First: 683, Last: 1400}, From: 1, To: 3}, // 1366- are shard 2's
		{Slots: &log.SlotSpan{First: 683, Last: 4096}, From: 1, To: 3}, // no slot 4096
		{Slots: &upper, User: "x", From: 1, To: 3},                     // two kinds
		{Slots: &upper, From: 1, To: 3},                                // a user of it is moving
	} {
		if err := apply(metaCommand{Op: "move-start", Move: bad}); !errors.Is(err, ErrMetaRefused) {
			t.Errorf("move-start of slots %v from %d: %v, want refused", bad.Slots, bad.From, err)
		}
	}
	must(metaCommand{Op: "move-cancel", MoveID: own})
	must(metaCommand{Op: "move-end", MoveID: own})
	must(metaCommand{Op: "move-start", Move: &MoveInfo{Slots: &upper, From: 1, To: 3}})
	id := a.index
	if err := apply(metaCommand{Op: "move-start", Move: &MoveInfo{Slots: &log.SlotSpan{First: 1000, Last: 1001}, From: 1, To: 2}}); !errors.Is(err, ErrMetaRefused) {
		t.Fatalf("an overlapping slot move: %v", err)
	}
	if err := apply(metaCommand{Op: "move-start", Move: &MoveInfo{User: moving, From: 1, To: 2}}); !errors.Is(err, ErrMetaRefused) {
		t.Fatalf("a move of a user of slots moving: %v", err)
	}
	if got := f.slots.Load().Shard(1000); got != 1 {
		t.Fatalf("slot 1000 routes to %d before the switch, want 1", got)
	}
	must(metaCommand{Op: "move-step", MoveID: id, Step: PhaseCutover})
	must(metaCommand{Op: "move-step", MoveID: id, Step: PhaseFence, Cutovers: map[ShardID]uint64{1: 5, 2: 6, 3: 7}})
	must(metaCommand{Op: "move-switch", MoveID: id})
	must(metaCommand{Op: "move-end", MoveID: id})
	m := f.snapshot()
	want := []SlotRange{{0, 682, 1}, {683, 1365, 3}, {1366, 2730, 2}, {2731, 4095, 3}}
	if !slices.Equal(m.Slots, want) {
		t.Fatalf("slot table after the switch: %v, want %v", m.Slots, want)
	}
	if _, ok := m.Overrides[pinnedHere]; ok {
		t.Errorf("the override pinning %s to the source stayed", pinnedHere)
	}
	if m.Overrides[pinnedAway] != 2 {
		t.Errorf("the override pinning %s to shard 2 went: %v", pinnedAway, m.Overrides)
	}
	if got := f.slots.Load().Shard(1000); got != 3 {
		t.Fatalf("slot 1000 routes to %d after the switch, want 3", got)
	}
}

// TestMetaSplits: a split of a user's stream is a move of the user that stays on its shard. It
// waits for the moves in progress and keeps the user's own log from moving away while it runs
// (on its own or with a range), but lets other keys move; its fence step needs every data shard
// cut over; its switch records the split with its gate, after which the user cannot be split
// again; the slot table routes by it.
func TestMetaSplits(t *testing.T) {
	a := newMetaApplier(t, 3)
	f, apply, must := a.f, a.apply, a.must
	refused := func(what string, c metaCommand) {
		t.Helper()
		if err := apply(c); !errors.Is(err, ErrMetaRefused) {
			t.Errorf("%s: %v, want refused", what, err)
		}
	}
	table := func() *SlotTable { return f.slots.Load() }
	home := table().Shard(log.UserSlot("bot"))
	other := home%3 + 1

	refused("a split into 1 sub-log", metaCommand{Op: "move-start", Move: &MoveInfo{User: "bot", Subs: 1, From: home, To: home}})
	refused("a split into 17", metaCommand{Op: "move-start", Move: &MoveInfo{User: "bot", Subs: 17, From: home, To: home}})
	refused("a split to another shard", metaCommand{Op: "move-start", Move: &MoveInfo{User: "bot", Subs: 4, From: home, To: other}})
	refused("a split on a shard not the user's", metaCommand{Op: "move-start", Move: &MoveInfo{User: "bot", Subs: 4, From: other, To: other}})
	refused("a split of a sub-log", metaCommand{Op: "move-start", Move: &MoveInfo{User: "bot 1", Subs: 4, From: home, To: home}})

	must(metaCommand{Op: "move-start", Move: &MoveInfo{User: "alice", From: table().Shard(log.UserSlot("alice")), To: other}})
	alice := a.index
	refused("a split while a move runs", metaCommand{Op: "move-start", Move: &MoveInfo{User: "bot", Subs: 4, From: home, To: home}})
	must(metaCommand{Op: "move-cancel", MoveID: alice})
	must(metaCommand{Op: "move-end", MoveID: alice})

	must(metaCommand{Op: "move-start", Move: &MoveInfo{User: "bot", Subs: 4, From: home, To: home}})
	split := a.index
	refused("the split user's move during the split", metaCommand{Op: "move-start", Move: &MoveInfo{User: "bot", From: home, To: other}})
	botSlot := log.UserSlot("bot")
	refused("a range with the split user during the split", metaCommand{Op: "move-start", Move: &MoveInfo{Slots: &log.SlotSpan{First: botSlot, Last: botSlot}, From: home, To: other}})
	must(metaCommand{Op: "move-start", Move: &MoveInfo{User: "carol", From: table().Shard(log.UserSlot("carol")), To: home%3 + 1}}) // other keys move on
	carol := a.index
	must(metaCommand{Op: "move-cancel", MoveID: carol})
	must(metaCommand{Op: "move-end", MoveID: carol})

	must(metaCommand{Op: "move-step", MoveID: split, Step: PhaseCutover})
	refused("a fence without every shard cut over", metaCommand{Op: "move-step", MoveID: split, Step: PhaseFence, Cutovers: map[ShardID]uint64{1: 5, 2: 7}})
	must(metaCommand{Op: "move-step", MoveID: split, Step: PhaseFence, Cutovers: map[ShardID]uint64{1: 5, 2: 7, 3: 0}})
	refused("a switch without the gate", metaCommand{Op: "move-switch", MoveID: split})
	gate := SplitInfo{Subs: 4, Gate: 40, Epoch: 99}
	must(metaCommand{Op: "move-switch", MoveID: split, Split: &gate})
	must(metaCommand{Op: "move-end", MoveID: split})
	if m := f.snapshot(); m.Splits["bot"] != gate || len(m.Moves) != 0 {
		t.Fatalf("after the split: splits %v, moves %v", m.Splits, m.Moves)
	}
	if got, ok := table().Split("bot"); !ok || got != gate {
		t.Errorf("the slot table's split of bot: %+v, %v", got, ok)
	}
	refused("a second split", metaCommand{Op: "move-start", Move: &MoveInfo{User: "bot", Subs: 8, From: home, To: home}})
	// A sub-log moves like a user's log.
	sub := log.SubLog("bot", 2)
	must(metaCommand{Op: "move-start", Move: &MoveInfo{User: sub, From: table().Shard(log.UserSlot(sub)), To: other}})
}

// metaApplier applies meta commands to a new meta state machine as its Raft log would, each at
// the next index (the index of a move-start is the move's id).
type metaApplier struct {
	t     *testing.T
	f     *metaFSM
	index uint64
}

// newMetaApplier returns an applier whose map has shards data shards and one node.
func newMetaApplier(t *testing.T, shards int) *metaApplier {
	a := &metaApplier{t: t, f: newMetaFSM()}
	a.must(metaCommand{Op: "init", Map: &ClusterMap{Shards: shards, RF: 1, Nodes: map[string]NodeInfo{"n1": {ID: "n1", RaftAddr: "x"}}}})
	return a
}

func (a *metaApplier) apply(c metaCommand) error {
	a.index++
	c.V = metaCommandV1
	b, _ := json.Marshal(c)
	err, _ := a.f.Apply(&raft.Log{Type: raft.LogCommand, Index: a.index, Data: b}).(error)
	return err
}

// must applies c and fails the test if it is refused.
func (a *metaApplier) must(c metaCommand) {
	a.t.Helper()
	if err := a.apply(c); err != nil {
		a.t.Fatalf("%s: %v", c.Op, err)
	}
}
