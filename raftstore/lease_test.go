package raftstore_test

// Replica leases (lease.go) on a real three-node cluster: a replica cut off from its shard's
// leader says so within Timing.StaleAfter and holds its lease again once healed and caught up;
// proposals through
// it fail at once with ErrNoLeader instead of waiting out their deadline, and a forwarded proposal
// whose link goes silent gives up when the lease lapses.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// testStaleAfter is the lease of the clusters below: the least Validate allows with the default
// election timeout, to keep the tests short.
const testStaleAfter = time.Second

func leaseCluster(t *testing.T) *raftstoretest.Cluster {
	return raftstoretest.NewCluster(t, 3, []raftstore.ShardID{1}, func(cfg *raftstore.Config) {
		cfg.Timing.StaleAfter = testStaleAfter
	})
}

// lease returns node i's lease of shard 1 and its change channel.
func lease(t *testing.T, c *raftstoretest.Cluster, i int) (raftstore.Lease, <-chan struct{}) {
	t.Helper()
	l, ch, err := c.Node(i).WatchLease(1)
	if err != nil {
		t.Fatal(err)
	}
	return l, ch
}

func waitHeld(t *testing.T, c *raftstoretest.Cluster, nodes ...int) {
	t.Helper()
	testkit.WaitTrue(t, 10*time.Second, "the replicas to hold their lease", func() bool {
		for _, i := range nodes {
			if l, _ := lease(t, c, i); !l.Held {
				return false
			}
		}
		return true
	})
}

// waitLapse waits for ch (a lease change channel taken while the lease was held) and checks the
// lease is lost, no sooner than the lease allows and no later than a few lease-loop ticks after.
func waitLapse(t *testing.T, c *raftstoretest.Cluster, i int, ch <-chan struct{}, cut time.Time, bound time.Duration) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(bound):
		t.Fatalf("node %d still holds its lease %v after it was cut off", i, bound)
	}
	took := time.Since(cut)
	l, _ := lease(t, c, i)
	if l.Held || l.Unheard < testStaleAfter {
		t.Fatalf("node %d after the change: %+v, want a lapsed lease (unheard ≥ %v)", i, l, testStaleAfter)
	}
	// The last proof the replica applied was asked for at most a proof interval (StaleAfter/4)
	// and a round trip before the cut.
	if took < testStaleAfter-testStaleAfter/4-100*time.Millisecond {
		t.Fatalf("node %d's lease lapsed %v after the cut, before the lease of %v ran out", i, took, testStaleAfter)
	}
	t.Logf("node %d's lease lapsed %v after the cut", i, took)
}

// noLeaderFast proposes through node i, which must know no leader any more, and checks the
// answer is ErrNoLeader, at once.
func noLeaderFast(t *testing.T, c *raftstoretest.Cluster, i int) {
	t.Helper()
	testkit.WaitTrue(t, 10*time.Second, "the cut-off node to forget its leader", func() bool {
		st, err := c.Node(i).ShardStatus(1)
		return err == nil && st.LeaderID == "" && st.State != "leader"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	began := time.Now()
	_, err := c.Node(i).Propose(ctx, 1, send("d:alice:bob", "alice", "refused", "x", "alice", "bob"))
	if !errors.Is(err, raftstore.ErrNoLeader) {
		t.Fatalf("proposal through the cut-off node: %v, want ErrNoLeader", err)
	}
	if took := time.Since(began); took > 500*time.Millisecond {
		t.Fatalf("the refusal took %v: it must not wait for a leader it has not heard from", took)
	}
}

func TestLeaseLapsesOnACutOffFollowerAndReturns(t *testing.T) {
	c := leaseCluster(t)
	sendN(t, c, 1, "d:alice:bob", "a", 3)
	leader := c.Leader(1)
	f := (leader + 1) % 3
	waitHeld(t, c, 0, 1, 2)

	_, ch := lease(t, c, f)
	cut := time.Now()
	c.Partition(f)
	waitLapse(t, c, f, ch, cut, testStaleAfter+time.Second)
	// The majority keeps its leases and commits.
	sendN(t, c, 1, "d:alice:bob", "b", 3)
	waitHeld(t, c, leader, 3-leader-f)
	noLeaderFast(t, c, f)

	// Healed, it holds its lease again only once it has applied what it missed: its first
	// contact is a heartbeat without entries.
	st, err := c.Node(leader).ShardStatus(1)
	if err != nil {
		t.Fatal(err)
	}
	c.Heal(f)
	testkit.WaitTrue(t, 10*time.Second, "the healed node's lease to come back", func() bool {
		l, _ := lease(t, c, f)
		if !l.Held {
			return false
		}
		fs, err := c.Node(f).ShardStatus(1)
		if err != nil || fs.AppliedIndex < st.CommitIndex {
			t.Fatalf("node %d holds its lease again at applied index %d, before the %d its leader had committed (%v)", f, fs.AppliedIndex, st.CommitIndex, err)
		}
		return true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Node(f).Propose(ctx, 1, send("d:alice:bob", "alice", "c-0", "x", "alice", "bob")); err != nil {
		t.Fatalf("proposal through the healed node: %v", err)
	}
	c.WaitConverged(1)
	c.CheckConv(t, 1, "d:alice:bob", 7) // the refused proposal is nowhere
}

// An isolated leader steps down (hashicorp/raft's leader lease), then its replica's lease lapses
// StaleAfter later, as a follower's would: it was current until it stepped down.
func TestLeaseLapsesOnAnIsolatedLeader(t *testing.T) {
	c := leaseCluster(t)
	sendN(t, c, 1, "d:alice:bob", "a", 3)
	leader := c.Leader(1)
	waitHeld(t, c, 0, 1, 2)

	_, ch := lease(t, c, leader)
	cut := time.Now()
	c.Partition(leader)
	waitLapse(t, c, leader, ch, cut, testStaleAfter+2*time.Second)
	sendN(t, c, 1, "d:alice:bob", "b", 3) // the other two elect a leader and commit
	noLeaderFast(t, c, leader)

	c.Heal(leader)
	waitHeld(t, c, 0, 1, 2)
	c.WaitConverged(1)
	c.CheckConv(t, 1, "d:alice:bob", 6)
}

// A follower's links go silent (held by the relays, not refused): a proposal it forwarded on its
// open connection to the leader gets no answer, and is given up — ErrUnreachable, outcome unknown
// — when the follower's lease lapses, not at the caller's deadline. Resent after the heal with the
// same client id, it is applied once.
func TestForwardedProposalGivesUpWhenTheLeaseLapses(t *testing.T) {
	c := leaseCluster(t)
	leader := c.Leader(1)
	f := (leader + 1) % 3
	waitHeld(t, c, 0, 1, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Node(f).Propose(ctx, 1, send("d:alice:bob", "alice", "a", "x", "alice", "bob")); err != nil {
		t.Fatal(err) // opens the forwarding connection to the leader
	}

	c.Delay(f, time.Hour)
	began := time.Now()
	_, err := c.Node(f).Propose(ctx, 1, send("d:alice:bob", "alice", "b", "x", "alice", "bob"))
	took := time.Since(began)
	if !errors.Is(err, raftstore.ErrUnreachable) {
		t.Fatalf("forwarded proposal over a silent link: %v, want ErrUnreachable", err)
	}
	if took > testStaleAfter+time.Second {
		t.Fatalf("it was given up after %v, want about the lease (%v)", took, testStaleAfter)
	}
	t.Logf("given up after %v: %v", took, err)

	c.Delay(f, 0)
	c.Partition(f) // cuts the held connections
	c.Heal(f)
	waitHeld(t, c, f)
	res, err := c.Node(f).Propose(ctx, 1, send("d:alice:bob", "alice", "b", "x", "alice", "bob"))
	if err != nil {
		t.Fatalf("resend after the heal: %v", err)
	}
	c.WaitConverged(1)
	c.CheckConv(t, 1, "d:alice:bob", 2)
	t.Logf("resend: %+v", res.Append)
}

// stallWAL blocks every write to a Pebble write-ahead log (a ".log" file) on fs while stalled is
// set, until release is closed: a disk whose writes hang, as a full one's do once Pebble cannot
// flush (its commits wait for room that never comes).
func stallWAL(stalled *atomic.Bool, release <-chan struct{}) errorfs.Injector {
	return errorfs.InjectorFunc(func(op errorfs.Op) error {
		if stalled.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite && strings.HasSuffix(op.Path, ".log") {
			<-release
		}
		return nil
	})
}

// TestLeaseLapsesWhenTheReplicaCannotApply: a follower whose store stalls stops storing and
// applying entries while it still hears its leader (hashicorp/raft answers heartbeats apart from
// the log). Its lease must lapse within the lease, as if it were cut off (issue 21: such a replica
// kept sending heartbeats with heads 5–10 s old), while the leader and the other follower keep
// theirs and commit; once the store writes again it catches up and holds the lease again.
func TestLeaseLapsesWhenTheReplicaCannotApply(t *testing.T) {
	var stalled atomic.Bool
	release := make(chan struct{})
	var victim string
	c := raftstoretest.NewCluster(t, 3, []raftstore.ShardID{1}, func(cfg *raftstore.Config) {
		cfg.Timing.StaleAfter = testStaleAfter
		if cfg.NodeID == "n3" {
			cfg.FS = errorfs.Wrap(vfs.Default, stallWAL(&stalled, release))
		}
	})
	sendN(t, c, 1, "d:alice:bob", "a", 3)
	leader := c.Leader(1)
	if c.Node(leader).ID() == "n3" {
		if err := c.Node(leader).TransferLeadership(1, "n1"); err != nil {
			t.Fatal(err)
		}
		leader = c.Leader(1)
	}
	f := 2 // n3
	victim = c.Node(f).ID()
	other := 3 - leader - f
	waitHeld(t, c, 0, 1, 2)

	_, ch := lease(t, c, f)
	stalled.Store(true)
	stallAt := time.Now()
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	// Keep the shard committing through the leader: the victim falls behind.
	stop := make(chan struct{})
	sent := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for i := 0; ; i++ {
			select {
			case <-stop:
				sent <- nil
				return
			default:
			}
			if _, err := c.Node(leader).Propose(ctx, 1, send("d:alice:bob", "alice", fmt.Sprint("b-", i), "x", "alice", "bob")); err != nil {
				sent <- err
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	select {
	case <-ch:
	case <-time.After(testStaleAfter + 2*time.Second):
		l, _ := lease(t, c, f)
		st, _ := c.Node(f).ShardStatus(1)
		t.Fatalf("%s still holds its lease %v after its store stalled: %+v, applied %d, the leader's log at %d",
			victim, time.Since(stallAt).Round(time.Millisecond), l, st.AppliedIndex, c.Node(leader).Status()[0].LastIndex)
	}
	l, _ := lease(t, c, f)
	if l.Held || l.Unheard < testStaleAfter {
		t.Fatalf("%s after the change: %+v, want a lapsed lease, behind ≥ %v", victim, l, testStaleAfter)
	}
	if st, _ := c.Node(f).ShardStatus(1); st.LeaderID == "" {
		t.Fatalf("%s forgot its leader: the test wants a replica that still hears it", victim)
	}
	t.Logf("%s's lease lapsed %v after its store stalled (%+v)", victim, time.Since(stallAt).Round(time.Millisecond), l)
	waitHeld(t, c, leader, other) // the others go on
	close(stop)
	if err := <-sent; err != nil {
		t.Fatalf("sends through the leader while a follower's store stalled: %v", err)
	}

	stalled.Store(false)
	close(release)
	released = true
	waitHeld(t, c, 0, 1, 2)
	c.WaitConverged(1)
}
