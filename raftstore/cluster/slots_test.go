package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// EvenSlots is the layout every release computed before the table lived in the cluster map:
// slot i on shard i*shards/NumSlots+1. Changing it would move existing keys.
func TestEvenSlotsKeepsTheLayout(t *testing.T) {
	for _, shards := range []int{1, 3, 8, 100, NumSlots} {
		tab, err := NewSlotTable(EvenSlots(shards))
		if err != nil {
			t.Fatalf("%d shards: %v", shards, err)
		}
		for i := range NumSlots {
			if want := ShardID(i*shards/NumSlots + 1); tab.Shard(i) != want {
				t.Fatalf("%d shards: slot %d on shard %d, want %d", shards, i, tab.Shard(i), want)
			}
		}
		if got := len(tab.Shards()); got != shards {
			t.Errorf("%d shards: the table names %d", shards, got)
		}
		if got := len(EvenSlots(shards)); got != shards {
			t.Errorf("%d shards: %d ranges", shards, got)
		}
	}
}

func TestSlotTableRefusesGapsAndOverlaps(t *testing.T) {
	for name, ranges := range map[string][]SlotRange{
		"empty":      nil,
		"gap":        {{0, 99, 1}, {101, NumSlots - 1, 2}},
		"overlap":    {{0, 100, 1}, {100, NumSlots - 1, 2}},
		"short":      {{0, NumSlots - 2, 1}},
		"past end":   {{0, NumSlots, 1}},
		"meta shard": {{0, NumSlots - 1, MetaShard}},
		"backwards":  {{0, 10, 1}, {11, 5, 2}},
	} {
		if _, err := NewSlotTable(ranges); err == nil {
			t.Errorf("%s: accepted %v", name, ranges)
		}
	}
}

// The meta shard's routing: an init without a slot table (as older releases wrote it) gets the
// even table; one naming a shard the cluster does not have is refused; a restored snapshot
// without a table gets the even one too.
func TestMetaSlotTable(t *testing.T) {
	apply := func(f *metaFSM, index uint64, c metaCommand) any {
		c.V = metaCommandV1
		b, _ := json.Marshal(c)
		return f.Apply(&raft.Log{Type: raft.LogCommand, Index: index, Data: b})
	}
	f := newMetaFSM()
	if f.slots.Load() != nil {
		t.Fatal("a map that is not initialized routes")
	}
	bad := ClusterMap{Shards: 2, RF: 1, Slots: []SlotRange{{0, NumSlots - 1, 3}}}
	if err, _ := apply(f, 1, metaCommand{Op: "init", Map: &bad}).(error); !errors.Is(err, ErrMetaRefused) {
		t.Fatalf("init with a slot table naming shard 3 of 2: %v", err)
	}
	old := ClusterMap{Shards: 4, RF: 1}
	if err := apply(f, 2, metaCommand{Op: "init", Map: &old}); err != nil {
		t.Fatal(err)
	}
	if got := f.slots.Load(); got == nil || got.Shard(NumSlots-1) != 4 || len(f.snapshot().Slots) != 4 {
		t.Fatalf("init without slots: table %v, map %v", got, f.snapshot().Slots)
	}

	g := newMetaFSM()
	if err := g.Restore(io.NopCloser(strings.NewReader(`{"index":7,"shards":3,"rf":1,"nodes":{},"replicas":{}}`))); err != nil {
		t.Fatal(err)
	}
	if got := g.slots.Load(); got == nil || len(got.Shards()) != 3 {
		t.Fatalf("restored map without slots: table %v", got)
	}
	h := restoredCopy(t, f)
	if h.slots.Load().Shard(0) != 1 || h.slots.Load().Shard(NumSlots-1) != 4 {
		t.Fatal("a snapshot round trip changed the routing")
	}
}

// restoredCopy returns a fresh meta state machine restored from a snapshot of f.
func restoredCopy(t *testing.T, f *metaFSM) *metaFSM {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := snap.Persist(&sink{&buf}); err != nil {
		t.Fatal(err)
	}
	g := newMetaFSM()
	if err := g.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	return g
}

// sink is a raft.SnapshotSink writing to a buffer.
type sink struct{ *bytes.Buffer }

func (sink) ID() string    { return "test" }
func (sink) Cancel() error { return nil }
func (sink) Close() error  { return nil }

// Meta commands are replicated input: whatever bytes reach the meta state machine, it refuses
// or applies them without panicking, and the map it keeps stays one routing can use: a valid
// slot table naming only the map's shards, and placements only of those shards.
func FuzzMetaApply(f *testing.F) {
	for _, seed := range []string{
		`{"v":1,"op":"join","node":{"id":"n2","raft_addr":"127.0.0.2:7000"}}`,
		`{"v":1,"op":"place","if_index":1,"replicas":{"1":["n1"],"2":["n1","n2"]}}`,
		`{"v":1,"op":"remove","id":"n1"}`,
		`{"v":1,"op":"forget","id":"n1","if_index":1}`,
		`{"v":1,"op":"init","map":{"shards":2,"rf":1,"slots":[{"first":0,"last":4095,"shard":2}]}}`,
		`{"v":1,"op":"revoke","revoke":{"user":"alice","device":"phone","before":10,"until":20}}`,
		`{"v":1,"op":"revoke","revoke":{"user":"a\u0000b","device":"","before":-1,"until":0}}`,
		`{"v":2,"op":"init"}`,
		`not json`,
	} {
		f.Add([]byte(seed))
	}
	for _, b := range goldenSeeds(f, "meta_", false) { // every op, and a snapshot (refused)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := newMetaFSM()
		first := ClusterMap{Shards: 3, RF: 1, Nodes: map[string]NodeInfo{"n1": {ID: "n1", RaftAddr: "127.0.0.1:7000"}},
			Replicas: map[ShardID][]string{1: {"n1"}, 2: {"n1"}, 3: {"n1"}}, Slots: EvenSlots(3)}
		b, _ := json.Marshal(metaCommand{V: metaCommandV1, Op: "init", Map: &first})
		if res := fsm.Apply(&raft.Log{Type: raft.LogCommand, Index: 1, Data: b}); res != nil {
			t.Fatal(res)
		}
		fsm.Apply(&raft.Log{Type: raft.LogCommand, Index: 2, Data: data})
		m := fsm.snapshot()
		tab, err := NewSlotTable(m.Slots)
		if err != nil || fsm.slots.Load() == nil {
			t.Fatalf("after %q the slot table is broken: %v", data, err)
		}
		if last := tab.Shards()[len(tab.Shards())-1]; int(last) > m.Shards {
			t.Fatalf("after %q the slot table names shard %d of %d", data, last, m.Shards)
		}
		for s := range m.Replicas {
			if s == MetaShard || int(s) > m.Shards {
				t.Fatalf("after %q shard %d is placed in a map of %d shards", data, s, m.Shards)
			}
		}
	})
}
