package raftstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestClusterReplicaCheck: a real three-node cluster under traffic. A check asked of a follower
// finds every replica of every shard at the check's index with the same checksum; with a replica
// stopped, that replica is pending, not a mismatch; once its state has been corrupted on disk (a
// key no command wrote) and it is back, the check reports exactly that replica as differing,
// counts the mismatch and logs a warning naming it, while the other shard still agrees. On a
// quiet shard, what each replica recorded is the checksum of its state as it stands.
func TestClusterReplicaCheck(t *testing.T) {
	shards := []raftstore.ShardID{1, 2}
	var logs testkit.Buffer
	c := raftstoretest.NewCluster(t, 3, shards, func(cfg *raftstore.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	for _, s := range shards {
		c.Leader(s)
	}
	// The check is asked of a follower of shard 1 (so its command is forwarded to the leader), and
	// the other follower is the one corrupted.
	leader := c.Leader(1)
	asker, victim := (leader+1)%3, (leader+2)%3
	node, victimID := c.Node(asker), fmt.Sprintf("n%d", victim+1)

	var acked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // traffic through the asking node, which is never stopped
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if _, err := node.Propose(ctx, 1, send("d:alice:bob", "alice", fmt.Sprintf("t-%d", i), "body", "alice", "bob")); err == nil {
				acked.Add(1)
			}
			cancel()
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	testkit.WaitTrue(t, 10*time.Second, "traffic to flow", func() bool { return acked.Load() >= 20 })

	check := func(wait time.Duration) map[raftstore.ShardID]raftstore.ReplicaCheck {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		out := map[raftstore.ShardID]raftstore.ReplicaCheck{}
		for _, rc := range node.CheckReplicas(ctx, shards) {
			out[rc.Shard] = rc
		}
		return out
	}
	agrees := func(rc raftstore.ReplicaCheck) {
		t.Helper()
		if rc.Verdict != raftstore.VerdictAgree || rc.Index == 0 || len(rc.Replicas) != 3 {
			t.Fatalf("shard %d: %+v", rc.Shard, rc)
		}
		for _, r := range rc.Replicas {
			if r.Status != raftstore.SumMatch || !r.Checksum.Done || r.Checksum.Index != rc.Index || r.Checksum.Keys == 0 ||
				r.Checksum.Sum != rc.Replicas[0].Checksum.Sum || r.Checksum.Keys != rc.Replicas[0].Checksum.Keys {
				t.Fatalf("shard %d, replica %s: %+v", rc.Shard, r.Node, r)
			}
		}
	}

	for range 3 { // several checks in a row, under traffic
		for _, rc := range check(10 * time.Second) {
			agrees(rc)
		}
	}

	c.Stop(victim)
	rc := check(2 * time.Second)[1]
	if rc.Verdict != raftstore.VerdictIncomplete {
		t.Fatalf("with %s stopped: %+v", victimID, rc)
	}
	for _, r := range rc.Replicas {
		if want := raftstore.SumMatch; r.Node == victimID {
			if r.Status != raftstore.SumPending || !strings.Contains(r.Note, "did not answer") {
				t.Fatalf("stopped %s: %+v", victimID, r)
			}
		} else if r.Status != want {
			t.Fatalf("%s with %s stopped: %+v", r.Node, victimID, r)
		}
	}

	raftstoretest.CorruptState(t, c.Config(victim).Dir, 1)
	c.Start(victim)
	checks := check(20 * time.Second)
	agrees(checks[2])
	rc = checks[1]
	if rc.Verdict != raftstore.VerdictMismatch || len(rc.Replicas) != 3 {
		t.Fatalf("after corrupting %s's replica: %+v", victimID, rc)
	}
	for _, r := range rc.Replicas {
		want := raftstore.SumMatch
		if r.Node == victimID {
			want = raftstore.SumDiffers
		}
		if r.Status != want || !r.Checksum.Done {
			t.Fatalf("after corrupting %s's replica, %s: %+v", victimID, r.Node, r)
		}
	}
	if got := node.ChecksumMismatches(); got != 1 {
		t.Fatalf("%d mismatches counted, want 1", got)
	}
	if out := logs.String(); !strings.Contains(out, "replica checksum mismatch") || !strings.Contains(out, "differ="+victimID) {
		t.Fatalf("no warning naming %s:\n%s", victimID, out)
	}

	// Quiet now: what a check records is the state as it stands once nothing follows it.
	close(stop)
	wg.Wait()
	stop = make(chan struct{})
	rc = check(10 * time.Second)[2]
	agrees(rc)
	for i := range c.Size() {
		state, err := c.Node(i).State(2)
		if err != nil {
			t.Fatal(err)
		}
		sum, keys, err := state.StateChecksum()
		if err != nil || sum != rc.Replicas[0].Checksum.Sum || keys != rc.Replicas[0].Checksum.Keys {
			t.Fatalf("node %d's shard 2 now: %016x, %d keys (%v); the check recorded %+v", i, sum, keys, err, rc.Replicas[0].Checksum)
		}
	}
}
