// Golden tests pin the meta shard's persisted and replicated formats: its commands (meta.go,
// moves.go; JSON, in the meta group's Raft log) and its snapshot. The data shards' formats and
// the forwarding protocol, which carries meta commands as opaque bytes, are pinned in
// raftstore/testdata/golden.
//
// For each fixture (every field non-zero, recognisable values) the current encoder must produce
// exactly the bytes in testdata/golden, and the decoder must read those bytes back into the
// fixture. An accidental format change therefore fails here.
//
// After an intended change, run `go test ./raftstore/cluster -run TestGolden -update` and review
// the diff. A format that may still sit in a Raft log or a snapshot, or that a node of the
// previous release may send, must stay decodable: bump metaCommandV1, keep the old golden file
// and its decoder, and add a file for the new version.
package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/syncd-dev/syncd/log"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

const goldenTime = int64(1_700_000_000_000_000_000) // a proposer's clock, Unix ns

// Meta fixtures.
var (
	goldenClusterMap = ClusterMap{
		Index: 1 << 33, Shards: 3, RF: 2,
		Nodes: map[string]NodeInfo{
			"n1": {ID: "n1", RaftAddr: "10.0.0.1:7000", Attrs: map[string]string{"zone": "a"}},
			"n2": {ID: "n2", RaftAddr: "10.0.0.2:7000", Attrs: map[string]string{"zone": "b"}, Removing: true},
		},
		Replicas:      map[ShardID][]string{1: {"n1", "n2"}, 2: {"n1"}, 3: {"n2"}},
		Slots:         []SlotRange{{First: 0, Last: 99, Shard: 1}, {First: 100, Last: 2047, Shard: 2}, {First: 2048, Last: 4095, Shard: 3}},
		Creating:      map[ShardID][]string{3: {"n2"}},
		Overrides:     map[string]ShardID{"alice": 2},
		ConvOverrides: map[string]ShardID{"g1": 3},
		Moves: map[uint64]*MoveInfo{
			41: {ID: 41, User: "bob", Subs: 4, From: 1, To: 3, Step: PhaseCutover, Cutovers: map[ShardID]uint64{1: 9, 2: 1 << 40}, Started: goldenTime},
			42: {ID: 42, Conv: "g2", Slots: &log.SlotSpan{First: 0, Last: 7}, From: 2, To: 3, Step: PhaseFence, Started: goldenTime + 1},
		},
		Splits: map[string]SplitInfo{"bot": {Subs: 4, Gate: 258, Epoch: uint64(goldenTime)}},
	}
	goldenRevoked = []Revocation{
		{User: "alice", Device: "phone", Before: 1_700_000_000, Until: 1_700_086_400},
		{User: "bob", Device: "laptop", Before: 1_700_000_100, Until: 1_700_086_500},
	}
)

// metaGoldenCommands is one meta command of each op, with every field it uses set.
func metaGoldenCommands() []struct {
	name string
	cmd  metaCommand
} {
	m := goldenClusterMap.Clone()
	return []struct {
		name string
		cmd  metaCommand
	}{
		{"meta_init", metaCommand{Op: "init", Map: &m}},
		{"meta_join", metaCommand{Op: "join", Node: &NodeInfo{ID: "n3", RaftAddr: "10.0.0.3:7000", Attrs: map[string]string{"zone": "c"}}}},
		{"meta_remove", metaCommand{Op: "remove", ID: "n2"}},
		{"meta_forget", metaCommand{Op: "forget", ID: "n2", IfIndex: 1 << 33}},
		{"meta_place", metaCommand{Op: "place", Replicas: map[ShardID][]string{1: {"n1", "n3"}, 2: {"n3"}}, IfIndex: 1 << 33}},
		{"meta_add_shard", metaCommand{Op: "add-shard", Shard: 4}},
		{"meta_created", metaCommand{Op: "created", Shard: 4}},
		{"meta_revoke", metaCommand{Op: "revoke", Revoke: &Revocation{User: "alice", Device: "phone", Before: 1_700_000_000, Until: 1_700_086_400}}},
		{"meta_move_start", metaCommand{Op: "move-start", Move: &MoveInfo{User: "bob", Subs: 4, From: 1, To: 3, Started: goldenTime}}},
		{"meta_move_step", metaCommand{Op: "move-step", MoveID: 41, Step: PhaseFence, Cutovers: map[ShardID]uint64{1: 9, 2: 1 << 40}}},
		{"meta_move_switch", metaCommand{Op: "move-switch", MoveID: 41, Split: &SplitInfo{Subs: 4, Gate: 258, Epoch: uint64(goldenTime)}}},
		{"meta_move_cancel", metaCommand{Op: "move-cancel", MoveID: 41}},
		{"meta_move_end", metaCommand{Op: "move-end", MoveID: 41}},
	}
}

// encodeMetaCommand encodes c as Cluster.propose does.
func encodeMetaCommand(c metaCommand) []byte {
	c.V = metaCommandV1
	b, err := json.Marshal(c)
	if err != nil {
		panic(err)
	}
	return b
}

// encodeGoldenMetaSnapshot is the meta shard's snapshot of the fixture state, as Persist writes it.
func encodeGoldenMetaSnapshot() []byte {
	f := newMetaFSM()
	f.m = goldenClusterMap.Clone()
	for _, r := range goldenRevoked {
		f.revoked[revKey(r.User, r.Device)] = r
	}
	s, err := f.Snapshot()
	if err != nil {
		panic(err)
	}
	var buf bytes.Buffer
	if err := s.Persist(sink{&buf}); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// goldenMetaState is what a restored meta state machine holds.
type goldenMetaState struct {
	Map     ClusterMap
	Revoked map[string]Revocation
}

func decodeGoldenMetaSnapshot(b []byte) (any, error) {
	f := newMetaFSM()
	if err := f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		return nil, err
	}
	if f.slots.Load() == nil {
		return nil, errors.New("restored map has no slot table")
	}
	return goldenMetaState{Map: f.snapshot(), Revoked: f.revoked}, nil
}

type goldenCase struct {
	name   string // file name without extension: <name>.v<N>; every meta format is JSON
	encode func() []byte
	decode func([]byte) (any, error)
	want   any
}

func goldenCases() []goldenCase {
	var cases []goldenCase
	for _, c := range metaGoldenCommands() {
		want := c.cmd
		want.V = metaCommandV1
		cases = append(cases, goldenCase{c.name + ".v1", func() []byte { return encodeMetaCommand(c.cmd) },
			func(b []byte) (any, error) { var m metaCommand; err := json.Unmarshal(b, &m); return m, err }, want})
	}
	wantRevoked := map[string]Revocation{}
	for _, r := range goldenRevoked {
		wantRevoked[revKey(r.User, r.Device)] = r
	}
	cases = append(cases, goldenCase{"meta_snapshot.v1", encodeGoldenMetaSnapshot, decodeGoldenMetaSnapshot,
		goldenMetaState{Map: goldenClusterMap, Revoked: wantRevoked}})
	return cases
}

func goldenPath(name string) string { return filepath.Join("testdata", "golden", name+".json") }

// TestGolden: every meta format's encoder writes the golden bytes, and its decoder reads them
// back to the fixture (see the file's comment for what to do when this fails).
func TestGolden(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			if seen[c.name] {
				t.Fatalf("two golden cases named %s", c.name)
			}
			seen[c.name] = true
			path := goldenPath(c.name)
			got := c.encode()
			if *update {
				writeGolden(t, path, got)
			}
			want := readGolden(t, path)
			if !bytes.Equal(got, want) {
				t.Errorf("encoding changed:\n got %s\nwant %s\n(a stored or replicated format changed: see golden_test.go)", got, want)
			}
			v, err := c.decode(want)
			if err != nil {
				t.Fatalf("golden bytes no longer decode: %v", err)
			}
			if !reflect.DeepEqual(v, c.want) {
				t.Errorf("golden bytes decode to\n%+v\nwant\n%+v", v, c.want)
			}
		})
	}
}

// TestGoldenVersionBytes pins the meta command version, so that a change of it is a decision,
// seen here, and not a side effect; and the next version is refused, not misread.
func TestGoldenVersionBytes(t *testing.T) {
	if metaCommandV1 != 1 {
		t.Errorf("meta command version is %d, was 1: a persisted code changed (see golden_test.go)", metaCommandV1)
	}
	f := newMetaFSM()
	if res := f.Apply(&raft.Log{Type: raft.LogCommand, Index: 1, Data: []byte(`{"v":2,"op":"remove","id":"n1"}`)}); !errors.Is(asError(res), ErrMetaRefused) {
		t.Errorf("meta command of version 2: %v, want ErrMetaRefused", res)
	}
}

func asError(v any) error {
	err, _ := v.(error)
	return err
}

// goldenSeeds returns the golden bytes of the files in testdata/golden whose names start with
// prefix, as fuzz seeds. The last argument mirrors raftstore's helper (strip a frame's length
// prefix); meta formats have no frame, so it is ignored.
func goldenSeeds(tb testing.TB, prefix string, _ bool) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, c := range goldenCases() {
		if strings.HasPrefix(c.name, prefix) {
			out = append(out, readGolden(tb, goldenPath(c.name)))
		}
	}
	return out
}

// writeGolden and readGolden keep a JSON golden file's exact bytes.
func writeGolden(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readGolden(tb testing.TB, path string) []byte {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%v (run with -update to create it)", err)
	}
	return data
}

// TestGoldenMetaSnapshotBeforeSlots: a meta snapshot written before the slot table and the
// revocations were part of it (meta_snapshot.v1-before-slots.json, written by hand from that
// release's fields) still restores, to the even slot table every node used then and no
// revocations.
func TestGoldenMetaSnapshotBeforeSlots(t *testing.T) {
	v, err := decodeGoldenMetaSnapshot(readGolden(t, goldenPath("meta_snapshot.v1-before-slots")))
	if err != nil {
		t.Fatalf("an old meta snapshot no longer restores: %v", err)
	}
	st := v.(goldenMetaState)
	want := ClusterMap{Index: 12, Shards: 2, RF: 1, Nodes: map[string]NodeInfo{"n1": {ID: "n1", RaftAddr: "10.0.0.1:7000"}},
		Replicas: map[ShardID][]string{1: {"n1"}, 2: {"n1"}}, Slots: EvenSlots(2)}
	if !reflect.DeepEqual(st.Map, want) || len(st.Revoked) != 0 {
		t.Fatalf("old meta snapshot restores to\n%+v\nwant\n%+v", st, want)
	}
}

// FuzzMetaRestore feeds arbitrary bytes to the meta shard's snapshot restore (a snapshot comes
// from the leader over the network): it must refuse garbage with an error, never panic, and a
// state it accepts must snapshot and restore again to the same state.
func FuzzMetaRestore(f *testing.F) {
	for _, b := range goldenSeeds(f, "meta_snapshot", false) {
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte(`{"shards":1}`))
	f.Add([]byte(`{"shards":2,"slots":[{"first":0,"last":4095,"shard":3}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		first, err := decodeGoldenMetaSnapshot(data)
		if err != nil {
			return
		}
		snapshot := func(v any) []byte {
			st := v.(goldenMetaState)
			g := newMetaFSM()
			g.m = st.Map
			g.revoked = st.Revoked
			s, err := g.Snapshot()
			if err != nil {
				t.Fatalf("a restored state does not snapshot: %v", err)
			}
			var buf bytes.Buffer
			if err := s.Persist(sink{&buf}); err != nil {
				t.Fatal(err)
			}
			return buf.Bytes()
		}
		b := snapshot(first)
		again, err := decodeGoldenMetaSnapshot(b)
		if err != nil {
			t.Fatalf("a snapshot of a restored state does not restore: %v", err)
		}
		// The same state, byte for byte, from then on. Not compared as values: an empty map and
		// an absent one (attrs {}) are the same state, and the snapshot writes neither.
		if b2 := snapshot(again); !bytes.Equal(b2, b) {
			t.Fatalf("snapshot of a restored state restores to\n%+v\nwhose snapshot is\n%s\nnot\n%s", again, b2, b)
		}
	})
}
