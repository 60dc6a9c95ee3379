package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"

	"github.com/syncd-dev/syncd/test/testkit"
)

// openTestDB opens a Pebble DB in dir; the caller closes it.
func openTestDB(t testing.TB, dir string) *pebble.DB {
	t.Helper()
	// Pebble logs WAL recovery etc. to stderr by default; route it to t.Log.
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleTestLogger{testSlog(t)}})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// pebbleTestLogger adapts pebble.Logger to the test's slog logger; Pebble's
// chatty info lines go to Debug, which testSlog drops.
type pebbleTestLogger struct{ l *slog.Logger }

func (p pebbleTestLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleTestLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleTestLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}

// newTestDB opens a Pebble DB in a fresh temp dir, closed at cleanup.
func newTestDB(t testing.TB) *pebble.DB {
	t.Helper()
	db := openTestDB(t, t.TempDir())
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("close db: %v", err)
		}
	})
	return db
}

func mustRaftLog(t testing.TB, db *pebble.DB, shard ShardID) *raftLog {
	t.Helper()
	l, err := newRaftLog(db, shard)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testEntry builds a log entry exercising every field.
func testEntry(index uint64) *raft.Log {
	e := &raft.Log{
		Index: index,
		Term:  index/4 + 1,
		Type:  raft.LogCommand,
		Data:  fmt.Appendf(nil, "payload-%d", index),
	}
	if index%2 == 0 {
		e.Extensions = []byte{0xde, 0xad, byte(index)}
		e.AppendedAt = time.Unix(1_700_000_000, int64(index)*1000)
	}
	if index%5 == 0 {
		e.Type = raft.LogConfiguration
	}
	return e
}

func entries(lo, hi uint64) []*raft.Log {
	var out []*raft.Log
	for i := lo; i <= hi; i++ {
		out = append(out, testEntry(i))
	}
	return out
}

func storeRange(t testing.TB, l *raftLog, lo, hi uint64) {
	t.Helper()
	if err := l.StoreLogs(entries(lo, hi)); err != nil {
		t.Fatal(err)
	}
}

func sameLog(a, b *raft.Log) bool {
	return a.Index == b.Index && a.Term == b.Term && a.Type == b.Type &&
		bytes.Equal(a.Data, b.Data) && bytes.Equal(a.Extensions, b.Extensions) &&
		a.AppendedAt.Equal(b.AppendedAt) && a.AppendedAt.IsZero() == b.AppendedAt.IsZero()
}

func checkBounds(t testing.TB, l *raftLog, first, last uint64) {
	t.Helper()
	f, _ := l.FirstIndex()
	la, _ := l.LastIndex()
	if f != first || la != last {
		t.Fatalf("shard %d bounds = [%d, %d], want [%d, %d]", l.shard, f, la, first, last)
	}
}

func checkEntry(t testing.TB, l *raftLog, index uint64) {
	t.Helper()
	var got raft.Log
	if err := l.GetLog(index, &got); err != nil {
		t.Fatalf("shard %d GetLog(%d): %v", l.shard, index, err)
	}
	if want := testEntry(index); !sameLog(&got, want) {
		t.Fatalf("shard %d GetLog(%d) = %+v, want %+v", l.shard, index, got, *want)
	}
}

func checkMissing(t testing.TB, l *raftLog, index uint64) {
	t.Helper()
	var got raft.Log
	if err := l.GetLog(index, &got); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("shard %d GetLog(%d) err = %v, want ErrLogNotFound", l.shard, index, err)
	}
}

func TestRaftLogStoreGet(t *testing.T) {
	l := mustRaftLog(t, newTestDB(t), 1)
	checkBounds(t, l, 0, 0)
	checkMissing(t, l, 1)

	storeRange(t, l, 1, 10)
	if err := l.StoreLog(testEntry(11)); err != nil {
		t.Fatal(err)
	}
	if err := l.StoreLogs(nil); err != nil {
		t.Fatalf("StoreLogs(nil): %v", err)
	}
	checkBounds(t, l, 1, 11)
	for i := uint64(1); i <= 11; i++ {
		checkEntry(t, l, i)
	}
	checkMissing(t, l, 12)
	checkMissing(t, l, 0)

	// Overwriting an index (raft does after truncating a conflict) wins.
	repl := &raft.Log{Index: 11, Term: 99, Type: raft.LogNoop}
	if err := l.StoreLog(repl); err != nil {
		t.Fatal(err)
	}
	var got raft.Log
	if err := l.GetLog(11, &got); err != nil || !sameLog(&got, repl) {
		t.Fatalf("GetLog(11) = %+v, %v; want %+v", got, err, *repl)
	}
	if err := l.StoreLogs([]*raft.Log{testEntry(12), nil}); err == nil {
		t.Fatal("StoreLogs with nil entry succeeded")
	}
}

func TestRaftLogDeleteRange(t *testing.T) {
	l := mustRaftLog(t, newTestDB(t), 1)
	storeRange(t, l, 1, 20)

	steps := []struct {
		lo, hi      uint64
		first, last uint64
	}{
		{1, 3, 4, 20},     // compaction of a prefix
		{18, 20, 4, 17},   // truncation of a conflicting suffix
		{8, 9, 4, 17},     // a hole in the middle leaves bounds alone
		{5, 4, 4, 17},     // empty range is a no-op
		{100, 200, 4, 17}, // beyond the log
		{1, 3, 4, 17},     // already deleted
		{4, 7, 10, 17},    // prefix ending at the hole: first skips it
		{15, math.MaxUint64, 10, 14},
		{0, math.MaxUint64, 0, 0},
	}
	present := map[uint64]bool{} // model of what must be stored
	for i := uint64(1); i <= 20; i++ {
		present[i] = true
	}
	for _, s := range steps {
		if err := l.DeleteRange(s.lo, s.hi); err != nil {
			t.Fatalf("DeleteRange(%d, %d): %v", s.lo, s.hi, err)
		}
		for i := range present {
			if i >= s.lo && i <= s.hi {
				delete(present, i)
			}
		}
		checkBounds(t, l, s.first, s.last)
		for i := uint64(0); i <= 21; i++ {
			if present[i] {
				checkEntry(t, l, i)
			} else {
				checkMissing(t, l, i)
			}
		}
	}

	// Appending to an emptied log starts fresh bounds.
	storeRange(t, l, 30, 31)
	checkBounds(t, l, 30, 31)
}

// TestRaftLogGap checks the non-contiguous layout raft produces after a
// snapshot install (new entries past a gap, old ones deleted later).
func TestRaftLogGap(t *testing.T) {
	l := mustRaftLog(t, newTestDB(t), 1)
	storeRange(t, l, 1, 5)
	storeRange(t, l, 100, 105)
	checkBounds(t, l, 1, 105)
	checkMissing(t, l, 6)
	if err := l.DeleteRange(1, 5); err != nil {
		t.Fatal(err)
	}
	checkBounds(t, l, 100, 105)
	storeRange(t, l, 1, 2) // below first: first moves down
	checkBounds(t, l, 1, 105)
	if err := l.DeleteRange(50, 105); err != nil {
		t.Fatal(err)
	}
	checkBounds(t, l, 1, 2)
}

func TestRaftLogReopen(t *testing.T) {
	dir := t.TempDir()
	db := openTestDB(t, dir)
	l := mustRaftLog(t, db, 3)
	storeRange(t, l, 1, 50)
	if err := l.DeleteRange(1, 9); err != nil {
		t.Fatal(err)
	}
	if err := l.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if err := l.Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = openTestDB(t, dir)
	defer db.Close()
	l = mustRaftLog(t, db, 3)
	checkBounds(t, l, 10, 50)
	for i := uint64(10); i <= 50; i++ {
		checkEntry(t, l, i)
	}
	checkMissing(t, l, 9)
	if v, err := l.GetUint64([]byte("CurrentTerm")); err != nil || v != 7 {
		t.Fatalf("CurrentTerm = %d, %v; want 7", v, err)
	}
	if v, err := l.Get([]byte("LastVoteCand")); err != nil || string(v) != "n2" {
		t.Fatalf("LastVoteCand = %q, %v; want n2", v, err)
	}
}

// TestRaftLogShardIsolation checks shards sharing one DB never see each
// other's log or stable keys, and dropAll only removes its own shard (and
// never the 0x01 state keyspace of package log).
func TestRaftLogShardIsolation(t *testing.T) {
	db := newTestDB(t)
	a := mustRaftLog(t, db, 1)
	b := mustRaftLog(t, db, 2)
	edge := mustRaftLog(t, db, math.MaxUint32)
	storeRange(t, a, 1, 10)
	storeRange(t, b, 5, 7)
	storeRange(t, edge, 3, 4)
	for _, l := range []*raftLog{a, b, edge} {
		if err := l.SetUint64([]byte("CurrentTerm"), uint64(l.shard)); err != nil {
			t.Fatal(err)
		}
	}
	// A neighbour in package log's state keyspace, same shard bytes.
	stateKey := []byte{0x01, 0, 0, 0, 1, 0x01}
	if err := db.Set(stateKey, []byte("state"), pebble.Sync); err != nil {
		t.Fatal(err)
	}

	// Fresh handles recover only their own bounds.
	checkBounds(t, mustRaftLog(t, db, 1), 1, 10)
	checkBounds(t, mustRaftLog(t, db, 2), 5, 7)
	checkBounds(t, mustRaftLog(t, db, math.MaxUint32), 3, 4)
	checkBounds(t, mustRaftLog(t, db, 3), 0, 0)
	checkMissing(t, b, 1)
	checkMissing(t, a, 11)

	if err := a.dropAll(); err != nil {
		t.Fatal(err)
	}
	checkBounds(t, a, 0, 0)
	checkBounds(t, mustRaftLog(t, db, 1), 0, 0)
	checkMissing(t, a, 1)
	if _, err := a.GetUint64([]byte("CurrentTerm")); err == nil || err.Error() != "not found" {
		t.Fatalf("dropped shard CurrentTerm err = %v, want not found", err)
	}
	checkBounds(t, b, 5, 7)
	checkEntry(t, b, 6)
	if v, err := b.GetUint64([]byte("CurrentTerm")); err != nil || v != 2 {
		t.Fatalf("shard 2 CurrentTerm = %d, %v", v, err)
	}
	if err := edge.dropAll(); err != nil {
		t.Fatal(err)
	}
	checkBounds(t, mustRaftLog(t, db, math.MaxUint32), 0, 0)
	checkEntry(t, b, 5)
	val, closer, err := db.Get(stateKey)
	if err != nil {
		t.Fatalf("state keyspace key gone after dropAll: %v", err)
	}
	if string(val) != "state" {
		t.Fatalf("state key = %q", val)
	}
	closer.Close()
}

func TestRaftLogStableStore(t *testing.T) {
	l := mustRaftLog(t, newTestDB(t), 1)

	// hashicorp/raft compares err.Error() to "not found" on first start.
	v, err := l.Get([]byte("LastVoteCand"))
	if err == nil || err.Error() != "not found" || v != nil {
		t.Fatalf("Get(missing) = %q, %v; want nil, not found", v, err)
	}
	n, err := l.GetUint64([]byte("CurrentTerm"))
	if err == nil || err.Error() != "not found" || n != 0 {
		t.Fatalf("GetUint64(missing) = %d, %v; want 0, not found", n, err)
	}

	if err := l.Set([]byte("k"), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if err := l.Set([]byte("k"), []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if v, err := l.Get([]byte("k")); err != nil || string(v) != "v2" {
		t.Fatalf("Get(k) = %q, %v", v, err)
	}
	if err := l.Set([]byte("empty"), nil); err != nil {
		t.Fatal(err)
	}
	if v, err := l.Get([]byte("empty")); err != nil || len(v) != 0 {
		t.Fatalf("Get(empty) = %q, %v; want empty, nil", v, err)
	}
	if err := l.SetUint64([]byte("CurrentTerm"), math.MaxUint64-1); err != nil {
		t.Fatal(err)
	}
	if n, err := l.GetUint64([]byte("CurrentTerm")); err != nil || n != math.MaxUint64-1 {
		t.Fatalf("GetUint64 = %d, %v", n, err)
	}
	if v, _ := l.Get([]byte("CurrentTerm")); !bytes.Equal(v, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe}) {
		t.Fatalf("SetUint64 stored %x, want 8 bytes big-endian", v)
	}
	if _, err := l.GetUint64([]byte("k")); err == nil || !strings.HasPrefix(err.Error(), "raftstore: ") {
		t.Fatalf("GetUint64 of 2-byte value err = %v, want raftstore error", err)
	}
	// The stable store lives beside the log, not in it.
	checkBounds(t, l, 0, 0)
}

func TestRaftLogDecodeCorrupt(t *testing.T) {
	full := encodeLog(nil, testEntry(10))
	var out raft.Log
	if err := decodeLog(full, &out); err != nil || !sameLog(&out, testEntry(10)) {
		t.Fatalf("round trip: %+v, %v", out, err)
	}
	for n := range len(full) {
		out = raft.Log{Index: 12345}
		err := decodeLog(full[:n], &out)
		if err == nil {
			t.Fatalf("decode of %d/%d bytes succeeded", n, len(full))
		}
		if !strings.HasPrefix(err.Error(), "raftstore: ") {
			t.Fatalf("error %q lacks prefix", err)
		}
		if out.Index != 12345 {
			t.Fatalf("failed decode modified out: %+v", out)
		}
	}
	bad := slices.Clone(full)
	bad[0] = 9
	if err := decodeLog(bad, &out); err == nil || !strings.Contains(err.Error(), "version 9") {
		t.Fatalf("unknown version err = %v", err)
	}
	if err := decodeLog(append(slices.Clone(full), 0), &out); err == nil {
		t.Fatal("trailing byte accepted")
	}
	// A huge declared data length must not allocate or panic.
	huge := []byte{logFormatV1, 1, 1, byte(raft.LogCommand), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}
	if err := decodeLog(huge, &out); err == nil {
		t.Fatal("huge length accepted")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		_ = decodeLog(b, &out) // must not panic
	}
}

// TestRaftLogZeroTime checks a zero AppendedAt survives as zero (0 nanos
// on disk), not as the Unix epoch.
func TestRaftLogZeroTime(t *testing.T) {
	var out raft.Log
	if err := decodeLog(encodeLog(nil, &raft.Log{Index: 1}), &out); err != nil {
		t.Fatal(err)
	}
	if !out.AppendedAt.IsZero() || out.Data != nil || out.Extensions != nil {
		t.Fatalf("decoded %+v, want zero time and nil slices", out)
	}
}

// FuzzRaftLogDecode checks decodeLog never panics and that anything it
// accepts re-encodes to the same bytes.
func FuzzRaftLogDecode(f *testing.F) {
	f.Add(encodeLog(nil, testEntry(10)))
	f.Add(encodeLog(nil, testEntry(7)))
	f.Add([]byte{})
	f.Add([]byte{logFormatV1})
	for _, b := range goldenSeeds(f, "raft_log_entry", false) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var out raft.Log
		if err := decodeLog(b, &out); err != nil {
			return
		}
		// Non-minimal varints decode fine but re-encode shorter, so compare
		// the decoded values instead of bytes.
		var again raft.Log
		if err := decodeLog(encodeLog(nil, &out), &again); err != nil || !sameLog(&out, &again) {
			t.Fatalf("re-encode mismatch: %+v vs %+v (%v)", out, again, err)
		}
	})
}

// TestRaftLogConcurrent runs appends, prefix compaction and readers at
// once (meaningful under -race): an advertised LastIndex must be readable
// unless compaction has advertised a later FirstIndex in the meantime.
func TestRaftLogConcurrent(t *testing.T) {
	l := mustRaftLog(t, newTestDB(t), 1)
	const total = 400
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 8)

	wg.Add(1)
	go func() { // raft's main loop: append
		defer wg.Done()
		defer close(stop)
		for i := uint64(1); i <= total; i += 4 {
			if err := l.StoreLogs(entries(i, i+3)); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Add(1)
	go func() { // snapshot goroutine: compact, keeping the tail
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			first, _ := l.FirstIndex()
			last, _ := l.LastIndex()
			if first != 0 && last > first+50 {
				if err := l.DeleteRange(first, last-50); err != nil {
					errs <- err
					return
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	for range 3 {
		wg.Add(1)
		go func() { // replication/metrics goroutines: read
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				first, _ := l.FirstIndex()
				last, _ := l.LastIndex()
				if last == 0 {
					continue
				}
				if first > last {
					errs <- fmt.Errorf("first %d > last %d", first, last)
					return
				}
				// An advertised index is readable unless compaction
				// has since moved first past it (raft tolerates that).
				var e raft.Log
				if err := l.GetLog(last, &e); err != nil {
					if nf, _ := l.FirstIndex(); errors.Is(err, raft.ErrLogNotFound) && nf > last {
						continue
					}
					errs <- fmt.Errorf("GetLog(last=%d): %w", last, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if last, _ := l.LastIndex(); last != total {
		t.Fatalf("last = %d, want %d", last, total)
	}
}

// TestRaftLogWithRaft runs a real single-node raft on raftLog (log and
// stable store) over the mux transport, restarts it on the same DB and
// checks the log and FSM state survive.
func TestRaftLogWithRaft(t *testing.T) {
	logger := testSlog(t)
	db := newTestDB(t)
	mux := newMux(listenLoopback(t), nil, logger)
	defer mux.Close()
	const shard ShardID = 9
	addr := raft.ServerAddress(mux.Addr().String())

	start := func(fsm raft.FSM) (*raft.Raft, *raftLog, *raft.NetworkTransport) {
		t.Helper()
		rl := mustRaftLog(t, db, shard)
		layer, err := mux.Layer(shard)
		if err != nil {
			t.Fatal(err)
		}
		tr := newShardTransport(layer, logger)
		r, err := raft.NewRaft(testRaftConfig("n0", newRaftLogger(logger, shard)), fsm, rl, rl, raft.NewInmemSnapshotStore(), tr)
		if err != nil {
			t.Fatal(err)
		}
		return r, rl, tr
	}
	stop := func(r *raft.Raft, tr *raft.NetworkTransport) {
		t.Helper()
		if err := r.Shutdown().Error(); err != nil {
			t.Fatal(err)
		}
		tr.CloseStreams()
	}

	fsm1 := &recordingFSM{}
	r, rl, tr := start(fsm1)
	if err := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{
		{Suffrage: raft.Voter, ID: "n0", Address: addr},
	}}).Error(); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, []*raft.Raft{r})
	var want []string
	for i := range 100 {
		cmd := fmt.Sprintf("cmd-%d", i)
		want = append(want, cmd)
		if err := r.Apply([]byte(cmd), 5*time.Second).Error(); err != nil {
			t.Fatalf("apply %d: %v", i, err)
		}
	}
	if got := fsm1.entries(); !slices.Equal(got, want) {
		t.Fatalf("FSM = %q", got)
	}
	first, _ := rl.FirstIndex()
	last, _ := rl.LastIndex()
	if first != 1 || last < 100 {
		t.Fatalf("bounds after 100 applies = [%d, %d]", first, last)
	}
	stop(r, tr)

	// Restart on the same DB: a fresh raftLog must recover the same log.
	fsm2 := &recordingFSM{}
	r, rl, tr = start(fsm2)
	defer stop(r, tr)
	if f, _ := rl.FirstIndex(); f != first {
		t.Fatalf("recovered first = %d, want %d", f, first)
	}
	if l, _ := rl.LastIndex(); l != last {
		t.Fatalf("recovered last = %d, want %d", l, last)
	}
	if term, err := rl.GetUint64([]byte("CurrentTerm")); err != nil || term == 0 {
		t.Fatalf("CurrentTerm = %d, %v", term, err)
	}
	waitLeader(t, []*raft.Raft{r})
	// The new leader commits a no-op, replaying the whole log into fsm2.
	testkit.WaitTrue(t, 15*time.Second, "log replay into new FSM", func() bool { return len(fsm2.entries()) >= 100 })
	if err := r.Apply([]byte("after-restart"), 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if got := fsm2.entries(); !slices.Equal(got, append(want, "after-restart")) {
		t.Fatalf("FSM after restart = %q", got)
	}
}
