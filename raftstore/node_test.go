package raftstore_test

// Tests of a Node through its public API: real Raft, real Pebble on temp dirs, real TCP.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/test/testkit"
)

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelError}))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func startSingle(t *testing.T, dir string, tweak func(*raftstore.Config)) *raftstore.Node {
	t.Helper()
	tls, err := raftstoretest.TLS(dir, "n1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := raftstore.Config{NodeID: "n1", Dir: dir, TLS: tls, Logger: quietLogger()}
	if tweak != nil {
		tweak(&cfg)
	}
	n, err := raftstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := n.WaitLeader(ctx, 1); err != nil {
		n.Close()
		t.Fatal(err)
	}
	return n
}

func send(conv, sender, cmid, body string, members ...string) raftstore.Command {
	return raftstore.AppendCommand(&log.Append{
		Conv: conv, Sender: sender, ClientMsgID: cmid, Kind: log.KindMessage, Body: []byte(body), Members: members,
	})
}

func propose(t *testing.T, n *raftstore.Node, cmd raftstore.Command) raftstore.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := n.Propose(ctx, 1, cmd)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestSingleNodeSendDedupDeliverRead(t *testing.T) {
	n := startSingle(t, t.TempDir(), nil)
	defer n.Close()

	first := propose(t, n, send("d:alice:bob", "alice", "m1", "hello", "alice", "bob"))
	if first.Append.ConvSeq != 1 || first.Append.MsgID.Shard != 1 || first.Append.Duplicate {
		t.Fatalf("first send: %+v", first.Append)
	}
	again := propose(t, n, send("d:alice:bob", "alice", "m1", "hello", "alice", "bob"))
	if !again.Append.Duplicate || again.Append.MsgID != first.Append.MsgID || again.Append.ConvSeq != 1 {
		t.Fatalf("resend must return the original ack, got %+v", again.Append)
	}
	ctx := context.Background()
	if _, err := n.Propose(ctx, 1, send("d:alice:bob", "alice", "m1", "other body")); !errors.Is(err, log.ErrConflict) {
		t.Fatalf("same client_msg_id, other payload: got %v, want ErrConflict", err)
	}
	if _, err := n.Propose(ctx, 1, send("d:alice:bob", "mallory", "m9", "hi")); !errors.Is(err, log.ErrNotMember) {
		t.Fatalf("non-member send: got %v, want ErrNotMember", err)
	}
	if _, err := n.Propose(ctx, 7, send("x", "a", "b", "c")); !errors.Is(err, raftstore.ErrNoShard) {
		t.Fatalf("unknown shard: got %v", err)
	}
	propose(t, n, send("d:alice:bob", "bob", "b1", "hi alice"))

	state, err := n.State(1)
	if err != nil {
		t.Fatal(err)
	}
	raftstoretest.DeliverOutbox(t, ctx, n, 1)
	for _, uid := range []string{"alice", "bob"} {
		r, err := state.ReadUser(uid, 0, 1, log.Limit{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != log.ReadEntries || len(r.Entries) != 2 || r.Entries[0].ConvSeq != 1 || r.Entries[1].ConvSeq != 2 ||
			string(r.Entries[0].Body) != "hello" || r.Entries[0].Seq != 1 || r.Entries[1].Seq != 2 {
			t.Fatalf("%s's log: %+v", uid, r)
		}
	}
}

func TestProposeTimeoutAndShutdown(t *testing.T) {
	n := startSingle(t, t.TempDir(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := n.Propose(ctx, 1, send("c", "a", "m", "x", "a", "b")); !errors.Is(err, raftstore.ErrTimeout) {
		t.Fatalf("cancelled context: got %v, want ErrTimeout", err)
	}
	n.Close()
	if _, err := n.Propose(context.Background(), 1, send("c", "a", "m", "x", "a", "b")); !errors.Is(err, raftstore.ErrShutdown) {
		t.Fatalf("after close: got %v, want ErrShutdown", err)
	}
}

// TestRestartDoesNotReplay shows that restart time does not grow with the log: after a restart
// of a shard holding many entries, the state machine applies nothing again. Entries after the
// last snapshot are handed back by Raft and skipped by index; with a recent snapshot there are
// almost none.
func TestRestartDoesNotReplay(t *testing.T) {
	entries := 100_000
	if testing.Short() || raceEnabled {
		entries = 10_000 // the race detector makes 100k proposals take minutes; the property is the same
	}
	dir := t.TempDir()
	n := startSingle(t, dir, func(c *raftstore.Config) { c.SnapshotThreshold = 1 << 40 })
	const workers = 64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for i := w; i < entries; i += workers {
				peer := fmt.Sprintf("p%d", i%500)
				_, err := n.Propose(ctx, 1, send("d:"+peer+":u1", "u1", fmt.Sprintf("m%d", i), "0123456789abcdef", "u1", peer))
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	before, _ := n.ShardStatus(1)
	state, _ := n.State(1)
	sumBefore, keysBefore, err := state.StateChecksum()
	if err != nil {
		t.Fatal(err)
	}
	// Restart once without a recent snapshot (every entry is re-offered and skipped), then once
	// after a snapshot (nothing is re-offered).
	for _, snapshot := range []bool{false, true} {
		if snapshot {
			if err := n.Snapshot(1); err != nil {
				t.Fatal(err)
			}
		}
		n.Close()
		start := time.Now()
		n = startSingle(t, dir, nil)
		testkit.WaitTrue(t, 30*time.Second, "restarted shard to catch up", func() bool {
			st, _ := n.ShardStatus(1)
			return st.AppliedIndex > before.AppliedIndex && st.AppliedIndex == st.CommitIndex
		})
		took := time.Since(start)
		st, _ := n.ShardStatus(1)
		t.Logf("restart with snapshot=%v after %d entries: %v, applied %d, skipped %d", snapshot, entries, took, st.Applies, st.Skips)
		if st.Applies != 0 {
			t.Fatalf("restart re-applied %d commands; the persistent state machine must apply none", st.Applies)
		}
		if snapshot && st.Skips > 10 {
			t.Fatalf("restart after a snapshot re-offered %d entries", st.Skips)
		}
		state, _ = n.State(1)
		sum, keys, err := state.StateChecksum()
		if err != nil || sum != sumBefore || keys != keysBefore {
			t.Fatalf("state changed across restart: %x/%d vs %x/%d (%v)", sum, keys, sumBefore, keysBefore, err)
		}
	}
	n.Close()
}
