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

// applyMeta applies c to f at index, as raft would.
func applyMeta(f *metaFSM, index uint64, c metaCommand) any {
	c.V = metaCommandV1
	b, _ := json.Marshal(c)
	return f.Apply(&raft.Log{Type: raft.LogCommand, Index: index, Data: b})
}

// TestMetaRevocations: a revocation is kept by device, reported to the app on apply, replaced
// by a later one, forgotten once its Until has passed (at the next revocation's Before), kept
// out of the cluster map and its index, and carried by snapshots (a snapshot of before
// revocations existed restores with none).
func TestMetaRevocations(t *testing.T) {
	f := newMetaFSM()
	var told []Revocation
	f.onRevoke = func(r Revocation) { told = append(told, r) }
	changed := 0
	f.onChange = func() { changed++ }
	if err := applyMeta(f, 1, metaCommand{Op: "init", Map: &ClusterMap{Shards: 2, RF: 1}}); err != nil {
		t.Fatal(err)
	}
	phone := Revocation{User: "alice", Device: "phone", Before: 1000, Until: 2000}
	if err := applyMeta(f, 2, metaCommand{Op: "revoke", Revoke: &phone}); err != nil {
		t.Fatal(err)
	}
	if r, ok := f.revocation("alice", "phone"); !ok || r != phone {
		t.Fatalf("revocation: %+v %v", r, ok)
	}
	if _, ok := f.revocation("alice", "laptop"); ok {
		t.Fatal("another device is revoked")
	}
	if len(told) != 1 || told[0] != phone || changed != 1 || f.snapshot().Index != 1 {
		t.Fatalf("told %v, map changes %d, map index %d: a revocation is no map change", told, changed, f.snapshot().Index)
	}
	for name, bad := range map[string]*Revocation{
		"no revocation":  nil,
		"bad user":       {User: "a b", Device: "phone", Before: 1, Until: 1},
		"no device":      {User: "alice", Before: 1, Until: 1},
		"no time":        {User: "alice", Device: "phone"},
		"until < before": {User: "alice", Device: "phone", Before: 5, Until: 4},
	} {
		if err, _ := applyMeta(f, 3, metaCommand{Op: "revoke", Revoke: bad}).(error); !errors.Is(err, ErrMetaRefused) {
			t.Errorf("%s: %v, want ErrMetaRefused", name, err)
		}
	}
	laptop := Revocation{User: "bob", Device: "laptop", Before: 1500, Until: 2500}
	applyMeta(f, 4, metaCommand{Op: "revoke", Revoke: &laptop})
	later := Revocation{User: "alice", Device: "phone", Before: 1800, Until: 2800}
	applyMeta(f, 5, metaCommand{Op: "revoke", Revoke: &later})
	if r, _ := f.revocation("alice", "phone"); r != later {
		t.Fatalf("a later revocation did not replace the earlier: %+v", r)
	}
	earlier := Revocation{User: "alice", Device: "phone", Before: 1600, Until: 2600}
	applyMeta(f, 6, metaCommand{Op: "revoke", Revoke: &earlier})
	if r, _ := f.revocation("alice", "phone"); r != later {
		t.Fatalf("an earlier revocation replaced a later one: %+v", r)
	}

	var buf bytes.Buffer
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Persist(&sink{&buf}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"revoked":[{"user":"alice","device":"phone","before":1800,"until":2800},{"user":"bob"`) {
		t.Fatalf("snapshot %s", buf.String())
	}
	g := newMetaFSM()
	var restored []Revocation
	g.onRevoke = func(r Revocation) { restored = append(restored, r) }
	if err := g.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	if r, _ := g.revocation("bob", "laptop"); r != laptop || len(restored) != 2 || g.snapshot().Shards != 2 {
		t.Fatalf("restored: %+v, told %v, map %+v", r, restored, g.snapshot())
	}

	// Past bob's Until, the next revocation forgets it.
	carol := Revocation{User: "carol", Device: "tab", Before: 2600, Until: 3600}
	applyMeta(g, 7, metaCommand{Op: "revoke", Revoke: &carol})
	if _, ok := g.revocation("bob", "laptop"); ok {
		t.Error("a revocation past its until was kept")
	}
	if _, ok := g.revocation("alice", "phone"); !ok {
		t.Error("a revocation before its until was forgotten")
	}

	old := newMetaFSM()
	if err := old.Restore(io.NopCloser(strings.NewReader(`{"index":7,"shards":3,"rf":1,"nodes":{},"replicas":{}}`))); err != nil {
		t.Fatal(err)
	}
	if _, ok := old.revocation("alice", "phone"); ok || old.snapshot().Shards != 3 {
		t.Fatal("a snapshot without revocations restored wrong")
	}
}
