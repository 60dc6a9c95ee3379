package raftstore

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestChecksumIsOfItsOwnIndex: a ChecksumCommand in the middle of an applied Raft batch records
// the checksum of the state as of its own index — that of a replica which applied the entries up
// to it and nothing more — while the entries after it are applied too; the users the two halves
// touched are reported once. A payload of a later version, like an op this build does not know,
// is refused (ErrInvalid) and records nothing, and a replica keeps only its last keepChecksums
// checksums.
func TestChecksumIsOfItsOwnIndex(t *testing.T) {
	db, err := pebble.Open(t.TempDir(), &pebble.Options{Logger: pebbleTestLogger{testSlog(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	run := newChecksummer(ctx)
	defer func() { cancel(); run.close() }() // before db.Close: the scans read it

	entry := func(seq log.Position) log.Entry {
		return log.Entry{Kind: log.KindMessage, MsgID: log.MsgID{Shard: 2, Index: uint64(seq)}, Conv: "c", ConvSeq: seq, Sender: "b"}
	}
	deliver := func(prev, last uint64) Command {
		return DeliverCommand(&log.DeliveryBatch{Source: 2, Prev: prev, Last: last,
			Items: []log.Delivery{{Pos: last, Users: []string{"a"}, Entry: entry(log.Position(last))}}})
	}
	// The last one is what op 10 is to a build that predates it: an op it does not know.
	cmds := []Command{deliver(0, 1), ChecksumCommand(), deliver(1, 2), {op: opChecksum, payload: rawPayload{2}}, {op: 99, payload: checksumRequest{}}}
	var logs []*raft.Log
	for i, c := range cmds {
		c.Time = 1_700_000_000_000_000_000 + int64(i)
		data, err := c.encode()
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, &raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: data})
	}

	open := func(id log.ShardID) (*log.Shard, *fsm) {
		s, err := log.OpenShard(db, id)
		if err != nil {
			t.Fatal(err)
		}
		f, err := newFSM(s, db)
		if err != nil {
			t.Fatal(err)
		}
		return s, f
	}
	state, f := open(1)
	f.checksums = newReplicaChecksums(1, run, testSlog(t))
	var touched [][]string
	f.onLogs = func(t log.Touched) { touched = append(touched, t.Users) }
	out := f.ApplyBatch(logs)

	res := out[1].(applyResult)
	if res.err != nil || res.res.CheckIndex != 2 {
		t.Fatalf("the checksum command answered %+v", res)
	}
	for _, i := range []int{3, 4} {
		if res := out[i].(applyResult); !errors.Is(res.err, log.ErrInvalid) {
			t.Fatalf("entry %d (a later payload version, an unknown op) answered %+v, want a refusal", i+1, res)
		}
	}
	if applied, err := state.Applied(); err != nil || applied != 5 || f.applied.Load() != 5 {
		t.Fatalf("applied %d (%v), fsm %d: want the whole batch", applied, err, f.applied.Load())
	}
	if len(touched) != 1 || !slices.Equal(touched[0], []string{"a"}) {
		t.Fatalf("touched users reported %v, want [[a]]", touched)
	}

	// The reference: a replica that applied up to the checksum's index only.
	ref, fr := open(2)
	fr.ApplyBatch(logs[:2])
	want, wantKeys, err := ref.StateChecksum()
	if err != nil {
		t.Fatal(err)
	}
	after, _, _ := state.StateChecksum()
	if after == want {
		t.Fatal("the entries after the checksum changed nothing: the test proves nothing")
	}
	var recs []Checksum
	testkit.WaitTrue(t, 10*time.Second, "the checksum to be computed", func() bool {
		recs = f.checksums.list()
		return len(recs) == 1 && recs[0].Done
	})
	if r := recs[0]; r.Index != 2 || r.Time != 1_700_000_000_000_000_001 || r.Err != "" ||
		r.Sum != want || r.Keys != wantKeys || r.At == 0 {
		t.Fatalf("recorded %+v, want the state at index 2: sum %016x, %d keys", r, want, wantKeys)
	}

	// keepChecksums later checks: the oldest goes.
	var more []*raft.Log
	for i := range keepChecksums {
		data, _ := ChecksumCommand().encode()
		more = append(more, &raft.Log{Index: uint64(6 + i), Type: raft.LogCommand, Data: data})
	}
	f.ApplyBatch(more)
	recs = f.checksums.list()
	if len(recs) != keepChecksums || recs[0].Index != 6 || recs[len(recs)-1].Index != 5+keepChecksums {
		t.Fatalf("kept %d checksums, %d to %d", len(recs), recs[0].Index, recs[len(recs)-1].Index)
	}
}
