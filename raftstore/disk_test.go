package raftstore_test

// Tests of what a node does when its disk fills up: the free-space watermark, the refusal to
// start on a full disk, an Open that returns when the disk fills under it, and bounded logs.
// Faults come from Pebble's vfs (errorfs fails writes with ENOSPC, spaceFS reports little free
// space), and one test fills a real tmpfs.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// spaceFS is a file system that reports the free space the test sets, the fault injector of the
// watermark: a real disk cannot be made to shrink without root (TestWatermarkOnRealTmpfs).
type spaceFS struct {
	vfs.FS
	free atomic.Uint64
}

func newSpaceFS(inner vfs.FS, free uint64) *spaceFS {
	fs := &spaceFS{FS: inner}
	fs.free.Store(free)
	return fs
}

func (fs *spaceFS) GetDiskUsage(string) (vfs.DiskUsage, error) {
	free := fs.free.Load()
	return vfs.DiskUsage{AvailBytes: free, TotalBytes: 1 << 40, UsedBytes: 1<<40 - free}, nil
}

// noSpaceOnTables makes errorfs fail every write to a Pebble table (a flush, a compaction) with
// ENOSPC while full is set; the write-ahead log keeps its preallocated room, as on a real disk
// that filled up after the log file was allocated.
func noSpaceOnTables(full *atomic.Bool) errorfs.Injector {
	return errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite && strings.HasSuffix(op.Path, ".sst") {
			return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
		}
		return nil
	})
}

// logTo returns a logger writing info and above into buf.
func logTo(buf *testkit.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// countLines returns how many lines of out contain s.
func countLines(out, s string) int {
	n := 0
	for line := range strings.Lines(out) {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

const (
	lowMsg       = "disk space low: refusing new writes"
	recoveredMsg = "disk space recovered"
)

// TestLowDiskRefusesNewWritesOnly: below the watermark a node refuses sends and group creation
// with ErrLowDisk (not a refusal by the log: retryable), while reads, deliveries, cursors and
// trims go on; it takes writes again only once free space is back above the watermark plus an
// eighth, and it logs the crossing once each way however many measurements it makes.
func TestLowDiskRefusesNewWritesOnly(t *testing.T) {
	const minFree = 64 << 20
	fs := newSpaceFS(vfs.Default, 1<<30)
	var logs testkit.Buffer
	n := startSingle(t, t.TempDir(), func(c *raftstore.Config) {
		c.FS, c.MinFreeDisk, c.Logger = fs, minFree, logTo(&logs)
		raftstore.SetDiskCheckInterval(c, 5*time.Millisecond)
	})
	defer n.Close()
	ctx := context.Background()
	acked := propose(t, n, send("d:alice:bob", "alice", "m1", "before", "alice", "bob"))

	fs.free.Store(10 << 20)
	testkit.WaitTrue(t, 5*time.Second, "the node to see its disk low", func() bool { return n.DiskSpace().Low })
	if d := n.DiskSpace(); d.Free != 10<<20 || d.Min != minFree || !strings.Contains(d.String(), "new writes are refused") {
		t.Errorf("DiskSpace() = %+v (%v)", d, d)
	}
	for _, cmd := range []raftstore.Command{
		send("d:alice:bob", "alice", "m2", "while low", "alice", "bob"),
		raftstore.AppendCommand(&log.Append{Conv: "g1", Sender: "alice", ClientMsgID: "g", Kind: log.KindGroupCreate, Members: []string{"alice", "bob"}}),
	} {
		if _, err := n.Propose(ctx, 1, cmd); !errors.Is(err, raftstore.ErrLowDisk) || log.Rejected(err) {
			t.Fatalf("append while low on disk: %v, want ErrLowDisk", err)
		}
	}

	// What was acknowledged reads back, is delivered, and the rest of the node's work goes on.
	state, err := n.State(1)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := state.ReadConv("d:alice:bob", 0, 1, log.Limit{}); err != nil || len(r.Entries) != 1 ||
		r.Entries[0].MsgID != acked.Append.MsgID || string(r.Entries[0].Body) != "before" {
		t.Fatalf("conversation while low on disk: %+v %v", r, err)
	}
	raftstoretest.DeliverOutbox(t, ctx, n, 1)
	r, err := state.ReadUser("bob", 0, 1, log.Limit{})
	if err != nil || len(r.Entries) != 1 {
		t.Fatalf("bob's log after a delivery while low on disk: %+v %v", r, err)
	}
	for _, cmd := range []raftstore.Command{
		raftstore.CursorCommand(&log.CursorUpdate{UID: "bob", Device: "phone", Cursor: log.Cursor{Epoch: r.Info.Epoch, Pos: 1}}),
		raftstore.TrimCommand(&log.Trim{Target: log.TrimUserLog, ID: "bob", Retention: log.Retention{MaxCount: 1}}),
	} {
		if _, err := n.Propose(ctx, 1, cmd); err != nil {
			t.Fatalf("cursor or trim while low on disk: %v", err)
		}
	}

	// Just above the watermark is not enough: the node waits for an eighth more.
	fs.free.Store(minFree + 1<<20)
	time.Sleep(100 * time.Millisecond) // twenty measurements
	if !n.DiskSpace().Low {
		t.Fatal("writes resumed 1 MiB above the watermark; a disk hovering there would flap")
	}
	fs.free.Store(minFree + minFree/8)
	testkit.WaitTrue(t, 5*time.Second, "the node to take writes again", func() bool { return !n.DiskSpace().Low })
	res := propose(t, n, send("d:alice:bob", "alice", "m2", "while low", "alice", "bob"))
	if res.Append.Duplicate || res.Append.ConvSeq != 2 {
		t.Fatalf("the refused send, retried: %+v (a refused write must not have been applied)", res.Append)
	}

	out := logs.String()
	if countLines(out, lowMsg) != 1 || countLines(out, recoveredMsg) != 1 {
		t.Fatalf("want one line for the crossing each way, got:\n%s", out)
	}
	if !strings.Contains(out, "min_free_disk=\"64.0 MiB\"") || !strings.Contains(out, "free=\"10.0 MiB\"") {
		t.Errorf("the low-disk line does not say how low:\n%s", out)
	}
}

// TestLowDiskLeaderHandsOver: a leader whose disk goes below the watermark hands the leadership
// of every shard it leads to replicas on healthy disks, within seconds, and never gets one back
// while it is low (the balancer, running often here, skips it), so that sends through every node,
// the low one included, keep succeeding. With every node low there is no one to hand over to: the
// leader refuses sends with ErrLowDisk (forwarded, "at the leader"), but answers the resend of an
// acknowledged one from its dedup record, with the original ack. Once space is back, writes go on.
func TestLowDiskLeaderHandsOver(t *testing.T) {
	shards := []raftstore.ShardID{1, 2, 3}
	fss := map[string]*spaceFS{}
	c := raftstoretest.NewCluster(t, 3, shards, func(cfg *raftstore.Config) {
		fss[cfg.NodeID] = newSpaceFS(vfs.Default, 1<<30)
		cfg.FS, cfg.MinFreeDisk = fss[cfg.NodeID], 64<<20
		cfg.BalanceInterval = 100 * time.Millisecond
		raftstore.SetDiskCheckInterval(cfg, 50*time.Millisecond)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	acked := map[raftstore.ShardID]log.AppendResult{}
	for _, sh := range shards {
		res, err := c.Propose(ctx, sh, send("d:alice:bob", "alice", "m1", "hi", "alice", "bob"))
		if err != nil {
			t.Fatal(err)
		}
		acked[sh] = res.Append
	}
	// The balancer spreads the leaderships, one a node: the victim leads shard 1, and the node
	// that takes it over then leads two, so that the balancer would hand one back to the victim if
	// it did not skip nodes low on disk.
	testkit.Wait(t, 20*time.Second, "one leadership a node", func() (bool, string) {
		l, _ := leadersOf(c, shards)
		counts := map[string]int{}
		for _, id := range l {
			counts[id]++
		}
		return len(counts) == 3, fmt.Sprint(l)
	})
	victim := c.Node(c.Leader(1))

	fss[victim.ID()].free.Store(1 << 20)
	began := time.Now()
	testkit.Wait(t, 15*time.Second, victim.ID()+" to hand over its leadership", func() (bool, string) {
		l, all := leadersOf(c, shards)
		for _, id := range l {
			if id == victim.ID() {
				all = false
			}
		}
		return all, fmt.Sprint(l)
	})
	t.Logf("%s handed over its leadership in %v", victim.ID(), time.Since(began).Round(time.Millisecond))
	// While it stays low: sends through every node succeed, and the victim leads nothing.
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		for j := range c.Size() {
			sh := shards[(i+j)%len(shards)]
			if _, err := c.Node(j).Propose(ctx, sh, send("d:alice:bob", "alice", fmt.Sprintf("r%d-%d", i, j), "hi", "alice", "bob")); err != nil {
				t.Fatalf("send through %s to shard %d with %s low on disk: %v", c.Node(j).ID(), sh, victim.ID(), err)
			}
		}
		for _, sh := range shards {
			if st, _ := victim.ShardStatus(sh); st.State == "leader" {
				t.Fatalf("%s, low on disk, leads shard %d again", victim.ID(), sh)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Every node low: the leader keeps its shard, refuses new sends and answers resends.
	for _, fs := range fss {
		fs.free.Store(1 << 20)
	}
	for i := range c.Size() {
		testkit.WaitTrue(t, 5*time.Second, c.Node(i).ID()+" to see its disk low", func() bool { return c.Node(i).DiskSpace().Low })
	}
	for _, sh := range shards {
		// A node that went low after another may just have been handed the shard by it: look
		// again until the node asked is a follower at the time of the send.
		var li int
		var follower *raftstore.Node
		testkit.Wait(t, 10*time.Second, "a send through a follower to be refused by the leader", func() (bool, string) {
			li = c.Leader(sh)
			follower = c.Node((li + 1) % c.Size())
			_, err := follower.Propose(ctx, sh, send("d:alice:bob", "alice", "m2", "hi", "alice", "bob"))
			if !errors.Is(err, raftstore.ErrLowDisk) {
				t.Fatalf("shard %d, every node low: a new send through a follower: %v, want ErrLowDisk", sh, err)
			}
			return strings.Contains(err.Error(), "at the leader"), err.Error()
		})
		for _, n := range []*raftstore.Node{follower, c.Node(li)} {
			res, err := n.Propose(ctx, sh, send("d:alice:bob", "alice", "m1", "hi", "alice", "bob"))
			if err != nil || !res.Append.Duplicate || res.Append.MsgID != acked[sh].MsgID || res.Append.ConvSeq != acked[sh].ConvSeq {
				t.Fatalf("shard %d, every node low: a resend through %s: %+v %v, want the original ack %+v", sh, n.ID(), res.Append, err, acked[sh])
			}
		}
		if _, err := c.Node(li).Propose(ctx, sh, send("d:alice:bob", "alice", "m1", "changed", "alice", "bob")); !errors.Is(err, log.ErrConflict) {
			t.Fatalf("shard %d: another payload under an acknowledged cmid: %v, want a conflict", sh, err)
		}
	}

	for _, fs := range fss {
		fs.free.Store(1 << 30)
	}
	for i := range c.Size() {
		testkit.WaitTrue(t, 5*time.Second, c.Node(i).ID()+" to take writes again", func() bool { return !c.Node(i).DiskSpace().Low })
	}
	for _, sh := range shards {
		res, err := victim.Propose(ctx, sh, send("d:alice:bob", "alice", "m2", "hi", "alice", "bob"))
		if err != nil || res.Append.Duplicate {
			t.Fatalf("shard %d: the refused send, retried once space is back: %+v %v", sh, res.Append, err)
		}
		c.WaitConverged(sh)
	}
}

// leadersOf returns the leader of each of shards that has one, by node id, and whether all have.
func leadersOf(c *raftstoretest.Cluster, shards []raftstore.ShardID) (map[raftstore.ShardID]string, bool) {
	out := map[raftstore.ShardID]string{}
	for _, sh := range shards {
		for i := range c.Size() {
			if st, err := c.Node(i).ShardStatus(sh); err == nil && st.State == "leader" {
				out[sh] = c.Node(i).ID()
			}
		}
	}
	return out, len(out) == len(shards)
}

// TestStartRefusedOnFullDisk: a node does not start with less free space than half the
// watermark, or than replaying its write-ahead log needs, and says so at once, naming the
// directory, the free space and the setting, before it touches the store; between half the
// watermark and the watermark it starts, refusing new writes from the first moment.
// (Nodes of these tests have no peers: the node plane runs in plain TCP, Insecure.)
func TestStartRefusedOnFullDisk(t *testing.T) {
	for _, tc := range []struct {
		name    string
		minFree int64
		free    uint64
		want    []string
	}{
		{"below half the watermark", 0, 10 << 20, []string{"10.0 MiB free", "needs 128.0 MiB", "half of min_free_disk 256.0 MiB is 128.0 MiB"}},
		{"watermark off", -1, 1 << 20, []string{"1.0 MiB free", "needs 32.0 MiB", "min_free_disk is off", "replaying 0 B of write-ahead log"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			began := time.Now()
			_, err := raftstore.New(raftstore.Config{NodeID: "n1", Insecure: true, Dir: dir, MinFreeDisk: tc.minFree,
				FS: newSpaceFS(vfs.Default, tc.free), Logger: quietLogger()})
			if err == nil {
				t.Fatal("New on a full disk: nil error")
			}
			if took := time.Since(began); took > 2*time.Second {
				t.Errorf("New took %v to refuse", took)
			}
			for _, w := range append(tc.want, "not starting", filepath.Join(dir, "db"), "free space on that disk") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "db")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the refused start created the store: %v", err)
			}
		})
	}

	t.Run("between half and the watermark", func(t *testing.T) {
		var logs testkit.Buffer
		n, err := raftstore.New(raftstore.Config{NodeID: "n1", Insecure: true, Dir: t.TempDir(), MinFreeDisk: 512 << 20,
			FS: newSpaceFS(vfs.Default, 300<<20), Logger: logTo(&logs)})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		if !n.DiskSpace().Low {
			t.Fatal("a node started below the watermark accepts writes")
		}
		if _, err := n.Propose(context.Background(), 1, send("c", "a", "m", "x", "a", "b")); !errors.Is(err, raftstore.ErrLowDisk) {
			t.Fatalf("append: %v, want ErrLowDisk", err)
		}
		if countLines(logs.String(), lowMsg) != 1 {
			t.Errorf("want the low-disk line at start:\n%s", logs.String())
		}
	})
}

// TestOpenReturnsWhenDiskFillsWhileOpening is the restart that used to hang: the store holds a
// write-ahead log that Pebble must write out as tables before Open returns, and every table
// write fails with ENOSPC. New returns an error within seconds, having logged almost nothing;
// once the disk has room the abandoned Open completes and lets go of the store, and the next
// start finds everything acknowledged before.
func TestOpenReturnsWhenDiskFillsWhileOpening(t *testing.T) {
	dir := t.TempDir()
	var full atomic.Bool
	fs := errorfs.Wrap(vfs.Default, noSpaceOnTables(&full))
	n := startSingle(t, dir, func(c *raftstore.Config) { c.FS = fs })
	var acked []log.MsgID
	for i := range 20 {
		res := propose(t, n, send("d:alice:bob", "alice", fmt.Sprint("m", i), "hello", "alice", "bob"))
		acked = append(acked, res.Append.MsgID)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	full.Store(true)
	var logs testkit.Buffer
	cfg := raftstore.Config{NodeID: "n1", Insecure: true, Dir: dir, FS: fs, Logger: logTo(&logs)}
	began := time.Now()
	n, err := raftstore.New(cfg)
	took := time.Since(began)
	if err == nil {
		n.Close()
		t.Fatal("New with every table write failing: nil error")
	}
	if took > 10*time.Second {
		t.Errorf("New took %v to give up", took)
	}
	for _, w := range []string{"not starting", "filled up while the store opened", filepath.Join(dir, "db"), "no space left on device"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	time.Sleep(2 * raftstore.NoSpaceRetry) // the abandoned Open keeps trying, quietly
	if lines := strings.Count(logs.String(), "\n"); lines > 2 {
		t.Errorf("a start on a full disk logged %d lines:\n%s", lines, logs.String())
	}

	full.Store(false)
	testkit.Wait(t, 20*time.Second, "a start once the disk has room", func() (bool, string) {
		n, err = raftstore.New(cfg)
		return err == nil, fmt.Sprint(err) // the lock is held until the abandoned Open lets go
	})
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := n.WaitLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	state, _ := n.State(1)
	r, err := state.ReadConv("d:alice:bob", 0, 1, log.Limit{})
	if err != nil || len(r.Entries) != len(acked) {
		t.Fatalf("after the failed start: %d entries (%v), want %d", len(r.Entries), err, len(acked))
	}
	for i, e := range r.Entries {
		if e.MsgID != acked[i] {
			t.Fatalf("entry %d is %v, acked %v", i, e.MsgID, acked[i])
		}
	}
}

// TestFullDiskKeepsAckedDataAndReads: the disk fills up under a running node (its free space
// drops to nothing and every table write fails with ENOSPC, so Pebble cannot flush). The node
// refuses new writes, serves what it acknowledged, logs the failing flushes a bounded number of
// times rather than once per retry, and once space is freed it flushes, takes writes again and
// keeps everything across a restart.
func TestFullDiskKeepsAckedDataAndReads(t *testing.T) {
	dir := t.TempDir()
	var full atomic.Bool
	fs := newSpaceFS(errorfs.Wrap(vfs.Default, noSpaceOnTables(&full)), 1<<30)
	var logs testkit.Buffer
	tweak := func(c *raftstore.Config) {
		c.FS, c.MinFreeDisk, c.Logger = fs, 64<<20, logTo(&logs)
		raftstore.SetDiskCheckInterval(c, 5*time.Millisecond)
	}
	n := startSingle(t, dir, tweak)
	for i := range 10 {
		propose(t, n, send("d:alice:bob", "alice", fmt.Sprint("m", i), "hello", "alice", "bob"))
	}

	fs.free.Store(0)
	full.Store(true)
	if err := n.FlushStore(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitTrue(t, 5*time.Second, "the node to see its disk full", func() bool { return n.DiskSpace().Low })
	ctx := context.Background()
	if _, err := n.Propose(ctx, 1, send("d:alice:bob", "alice", "m10", "hello", "alice", "bob")); !errors.Is(err, raftstore.ErrLowDisk) {
		t.Fatalf("append on a full disk: %v, want ErrLowDisk", err)
	}
	state, _ := n.State(1)
	testkit.WaitTrue(t, 10*time.Second, "a failing flush to be logged", func() bool {
		return strings.Contains(logs.String(), "background error")
	})
	time.Sleep(3 * raftstore.NoSpaceRetry) // Pebble retries the flush meanwhile
	if r, err := state.ReadConv("d:alice:bob", 0, 1, log.Limit{}); err != nil || len(r.Entries) != 10 {
		t.Fatalf("reads on a full disk: %d entries, %v", len(r.Entries), err)
	}
	if got := countLines(logs.String(), "background error"); got != 1 {
		t.Errorf("the failing flush was logged %d times in 3 s, want once:\n%s", got, logs.String())
	}

	full.Store(false)
	fs.free.Store(1 << 30)
	testkit.WaitTrue(t, 5*time.Second, "the node to take writes again", func() bool { return !n.DiskSpace().Low })
	propose(t, n, send("d:alice:bob", "alice", "m10", "hello", "alice", "bob"))
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = startSingle(t, dir, tweak)
	defer n.Close()
	state, _ = n.State(1)
	if r, err := state.ReadConv("d:alice:bob", 0, 1, log.Limit{}); err != nil || len(r.Entries) != 11 {
		t.Fatalf("after the restart: %d entries, %v", len(r.Entries), err)
	}
}

// TestWatermarkOnRealTmpfs runs the watermark and the refused start on a real, small file
// system (a tmpfs; needs root, skipped otherwise): filling it below the watermark stops writes
// and emptying it resumes them; a full one refuses the start and names the directory.
func TestWatermarkOnRealTmpfs(t *testing.T) {
	mnt := testkit.Tmpfs(t, 192<<20)
	dir := filepath.Join(mnt, "node")
	tweak := func(c *raftstore.Config) {
		c.MinFreeDisk = 32 << 20
		raftstore.SetDiskCheckInterval(c, 20*time.Millisecond)
	}
	n := startSingle(t, dir, tweak)
	propose(t, n, send("d:alice:bob", "alice", "m1", "hello", "alice", "bob"))
	filler := filepath.Join(mnt, "filler")
	testkit.Fill(t, filler, 16<<20)
	testkit.WaitTrue(t, 5*time.Second, "the node to see its disk low", func() bool { return n.DiskSpace().Low })
	if _, err := n.Propose(context.Background(), 1, send("d:alice:bob", "alice", "m2", "hello", "alice", "bob")); !errors.Is(err, raftstore.ErrLowDisk) {
		t.Fatalf("append below the watermark: %v", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	testkit.WaitTrue(t, 5*time.Second, "the node to take writes again", func() bool { return !n.DiskSpace().Low })
	propose(t, n, send("d:alice:bob", "alice", "m2", "hello", "alice", "bob"))
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	testkit.Fill(t, filler, 0)
	began := time.Now()
	if _, err := raftstore.New(raftstore.Config{NodeID: "n1", Insecure: true, Dir: dir, MinFreeDisk: 32 << 20, Logger: quietLogger()}); err == nil ||
		!strings.Contains(err.Error(), filepath.Join(dir, "db")) || !strings.Contains(err.Error(), "min_free_disk") {
		t.Fatalf("start on a full tmpfs: %v", err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("the refusal took %v", took)
	}
	// A first start on the full disk, with no store yet, is refused the same way.
	fresh := filepath.Join(mnt, "fresh")
	if _, err := raftstore.New(raftstore.Config{NodeID: "n1", Insecure: true, Dir: fresh, Logger: quietLogger()}); err == nil ||
		!strings.Contains(err.Error(), "not starting") || !strings.Contains(err.Error(), filepath.Join(fresh, "db")) {
		t.Fatalf("first start on a full tmpfs: %v", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	n = startSingle(t, dir, tweak)
	defer n.Close()
	state, _ := n.State(1)
	if r, err := state.ReadConv("d:alice:bob", 0, 1, log.Limit{}); err != nil || len(r.Entries) != 2 {
		t.Fatalf("after the refused start: %d entries, %v", len(r.Entries), err)
	}
}
