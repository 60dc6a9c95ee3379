package raftstore_test

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestSeedFromBackup: the states of two shards, read from a running node as a backup reads them,
// seed a new data directory; a node started on it leads both shards alone, far past their
// backed-up indexes (a message id is its shard and Raft index: none is given twice), with their
// entries, its logs under a new epoch, and shard 1's next outbox record
// past the mark shard 2 held for it (a destination copied later than its source).
func TestSeedFromBackup(t *testing.T) {
	shards := []raftstore.ShardID{1, 2}
	old := startSingle(t, t.TempDir(), func(c *raftstore.Config) { c.Shards = shards })
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, _, err := old.WaitLeader(ctx, 2); err != nil {
		t.Fatal(err)
	}
	propose(t, old, send("d:alice:bob", "alice", "m1", "hello", "alice", "bob")) // shard 1's outbox: 1
	// Shard 2 has applied shard 1's deliveries up to 5, which the copy of shard 1 does not hold.
	if _, err := old.Propose(ctx, 2, raftstore.DeliverCommand(&log.DeliveryBatch{Source: 1, Prev: 0, Last: 5})); err != nil {
		t.Fatal(err)
	}
	epochBefore := convEpoch(t, old, 1, "d:alice:bob")
	backup := map[raftstore.ShardID][]byte{}
	applied := map[raftstore.ShardID]uint64{}
	for _, id := range shards {
		if _, err := old.Barrier(ctx, id); err != nil {
			t.Fatal(err)
		}
		state, err := old.State(id)
		if err != nil {
			t.Fatal(err)
		}
		snap := state.NewSnapshot()
		var buf bytes.Buffer
		if _, err := snap.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		applied[id], _ = snap.Applied()
		snap.Close()
		backup[id] = buf.Bytes()
	}
	old.Close()

	dir := t.TempDir()
	addr := testkit.FreeAddr(t)
	var seeds []raftstore.SeedShard
	for _, id := range shards {
		seeds = append(seeds, raftstore.SeedShard{ID: id, Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(backup[id])), nil }})
	}
	res, err := raftstore.Seed(raftstore.Config{NodeID: "n1", Dir: dir, RaftAddr: addr, Logger: quietLogger()},
		[]byte("{}"), 1, seeds, log.Epoch(time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	if res.Applied[1] != applied[1] || res.Applied[2] != applied[2] || res.Renewed != 1 {
		t.Fatalf("seeded %+v, the backup was at %v with one log", res, applied)
	}
	if _, err := raftstore.Seed(raftstore.Config{NodeID: "n1", Dir: dir, RaftAddr: addr}, []byte("{}"), 1, seeds, 1); err == nil {
		t.Fatal("a second seed into the same directory was not refused")
	}

	n := startSingle(t, dir, func(c *raftstore.Config) { c.Shards, c.RaftAddr = shards, addr })
	defer n.Close()
	if _, _, err := n.WaitLeader(ctx, 2); err != nil {
		t.Fatal(err)
	}
	for _, id := range shards {
		st, err := n.ShardStatus(id)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != "leader" || len(st.Voters) != 1 || st.Voters[0].ID != "n1" || st.AppliedIndex < applied[id]+raftstore.SeedIndexGap {
			t.Errorf("shard %d: %s, voters %v, applied %d (backup at %d)", id, st.State, st.Voters, st.AppliedIndex, applied[id])
		}
	}
	if e := convEpoch(t, n, 1, "d:alice:bob"); e <= epochBefore {
		t.Errorf("the conversation's epoch %d, was %d: not renewed", e, epochBefore)
	}
	// The message ids the lost node could have given after the backup (its Raft indexes) are
	// never given again.
	if after := propose(t, n, send("d:alice:bob", "alice", "m2", "after", "alice", "bob")); after.Append.MsgID.Index <= applied[1]+raftstore.SeedIndexGap {
		t.Errorf("a message after the restore got id %+v, within the lost node's indexes", after.Append.MsgID)
	}
	state, err := n.State(1)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := state.Outbox(); err != nil || info.Head != 6 {
		t.Errorf("shard 1's outbox head %d (%v): want 6, past shard 2's mark 5", info.Head, err)
	}
}

func convEpoch(t *testing.T, n *raftstore.Node, shard raftstore.ShardID, conv string) log.Epoch {
	t.Helper()
	state, err := n.State(shard)
	if err != nil {
		t.Fatal(err)
	}
	ids, infos, err := state.Convs("", 100)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if id == conv {
			return infos[i].Epoch
		}
	}
	t.Fatalf("no log of %s on shard %d", conv, shard)
	return 0
}
