package raftstore_test

// Tests of what a node does when its disk fails under it (issue #25): an fsync of the
// write-ahead log that fails, a write of it that writes part of its buffer and fails, and reads
// of the store's tables that fail. The faults come from a vfs.FS wrapper (faultFS). Pebble treats
// a failed write-ahead-log write or sync as fatal (db.go: "pebble: fatal commit error", through
// the node's Pebble logger, which exits the process), and the state machine panics on an apply
// that fails for any reason but a refusal (fsm.applyOne): either way the process ends. So each
// test runs the node in a child process (the test binary re-executed, as crash_test.go does),
// and the parent restarts the node on the same directory with the fault lifted and checks what
// the child was told against what is stored.
//
// The child prints one line per event, each in one write(2):
//
//	ACK <cmid> <conv_seq>    Propose returned success for cmid
//	SEND <cmid>              about to propose cmid, with the fault armed
//	ERR <cmid> <error>       Propose returned an error for cmid
//	ARMED                    the fault is armed from here on
//	NOFAULT                  the child sent everything without the fault ending it

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/test/testkit"
)

const (
	faultEnvDir  = "SYNCD_FAULT_CHILD" // data dir; set only in the child
	faultEnvKind = "SYNCD_FAULT_KIND"  // one of the fault kinds below

	faultConv = "d:alice:bob"
	// faultBefore is how many sends the child makes (and has acknowledged) before it arms the
	// fault; faultAfter how many it tries once armed.
	faultBefore = 20
	faultAfter  = 200
)

// Fault kinds.
const (
	faultSync  = "sync"  // every fsync of a write-ahead-log file fails with EIO, and loses what it did not sync
	faultShort = "short" // a write of a write-ahead-log file writes half its buffer and fails; every later one fails
	faultRead  = "read"  // every read of a table (.sst) fails with EIO
)

// faultFS injects one kind of fault into the files it opens once armed.
//
// The failed fsync models Linux's behaviour ("fsyncgate"): after a writeback error the kernel
// may drop the dirty pages, so the bytes written since the last successful sync are gone. The
// file is overwritten with zeros from its synced length to what was written, which is what a
// preallocated file reads as after the crash that follows. Anything acknowledged on the strength
// of that sync would be lost, and the restarted node would not have it.
type faultFS struct {
	vfs.FS
	kind  string
	armed atomic.Bool
	// failed is set once the fault fired: the faulty operations keep failing, as a device that
	// failed once is not trusted again (and Pebble never retries them).
	failed atomic.Bool
}

func (fs *faultFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return f, err
	}
	return &faultFile{File: f, fs: fs, wal: strings.HasSuffix(name, ".log"), sst: strings.HasSuffix(name, ".sst")}, nil
}

func (fs *faultFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *faultFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.Open(name, opts...)
	return fs.wrap(name, f, err)
}

func (fs *faultFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	return fs.wrap(name, f, err)
}

func (fs *faultFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.wrap(newname, f, err)
}

type faultFile struct {
	vfs.File
	fs       *faultFS
	wal, sst bool

	mu      sync.Mutex
	written int64 // bytes written through Write: the file offset
	synced  int64 // offset up to which the last successful sync made the file durable
}

func (f *faultFile) Write(p []byte) (int, error) {
	if !f.wal || f.fs.kind != faultShort || !f.fs.armed.Load() {
		n, err := f.File.Write(p)
		f.mu.Lock()
		f.written += int64(n)
		f.mu.Unlock()
		return n, err
	}
	if !f.fs.failed.Swap(true) && len(p) > 1 {
		n, _ := f.File.Write(p[:len(p)/2]) // a torn write: part of the buffer reaches the file
		return n, &os.PathError{Op: "write", Path: "wal", Err: syscall.EIO}
	}
	return 0, &os.PathError{Op: "write", Path: "wal", Err: syscall.EIO}
}

// syncFault is the error of a sync of a write-ahead-log file under faultSync; it loses what was
// written since the last successful sync.
func (f *faultFile) syncFault() error {
	if !f.wal || f.fs.kind != faultSync || !f.fs.armed.Load() {
		return nil
	}
	f.fs.failed.Store(true)
	f.mu.Lock()
	defer f.mu.Unlock()
	if lost := f.written - f.synced; lost > 0 {
		if _, err := f.File.WriteAt(make([]byte, lost), f.synced); err != nil {
			return err
		}
	}
	return &os.PathError{Op: "fsync", Path: "wal", Err: syscall.EIO}
}

func (f *faultFile) markSynced(err error) error {
	if err == nil {
		f.mu.Lock()
		f.synced = f.written
		f.mu.Unlock()
	}
	return err
}

func (f *faultFile) Sync() error {
	if err := f.syncFault(); err != nil {
		return err
	}
	return f.markSynced(f.File.Sync())
}

func (f *faultFile) SyncData() error {
	if err := f.syncFault(); err != nil {
		return err
	}
	return f.markSynced(f.File.SyncData())
}

func (f *faultFile) SyncTo(length int64) (bool, error) {
	if err := f.syncFault(); err != nil {
		return false, err
	}
	full, err := f.File.SyncTo(length)
	if err == nil {
		// A partial sync made the file durable up to length: a later failed sync must not lose
		// those bytes (an earlier version of this model did, and "lost" an acknowledged send).
		f.mu.Lock()
		if full {
			f.synced = f.written
		} else {
			f.synced = max(f.synced, length)
		}
		f.mu.Unlock()
	}
	return full, err
}

// Fd hides the descriptor, so that every sync goes through the methods above.
func (f *faultFile) Fd() uintptr { return vfs.InvalidFd }

func (f *faultFile) readFault() error {
	if f.sst && f.fs.kind == faultRead && f.fs.armed.Load() {
		f.fs.failed.Store(true)
		return &os.PathError{Op: "read", Path: "sst", Err: syscall.EIO}
	}
	return nil
}

func (f *faultFile) Read(p []byte) (int, error) {
	if err := f.readFault(); err != nil {
		return 0, err
	}
	return f.File.Read(p)
}

func (f *faultFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.readFault(); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func faultSend(cmid string) raftstore.Command {
	return send(faultConv, "alice", cmid, "body of "+cmid, "alice", "bob")
}

// faultChild is the child: it starts a node on dir, sends faultBefore messages, arms the fault
// and sends until the fault ends the process.
func faultChild(dir, kind string) {
	go func() { // exit with the parent
		io.Copy(io.Discard, os.Stdin)
		os.Exit(4)
	}()
	time.AfterFunc(2*time.Minute, func() { os.Exit(5) })
	say := func(format string, args ...any) { os.Stdout.WriteString(fmt.Sprintf(format, args...) + "\n") }
	fs := &faultFS{FS: vfs.Default, kind: kind}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	n, err := raftstore.New(raftstore.Config{NodeID: "n1", Insecure: true, Dir: dir, FS: fs, Logger: logger})
	if err != nil {
		say("FAIL open: %v", err)
		os.Exit(3)
	}
	ctx := context.Background()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, _, err = n.WaitLeader(wctx, 1)
	cancel()
	if err != nil {
		say("FAIL wait leader: %v", err)
		os.Exit(3)
	}
	propose := func(cmid string) {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		res, err := n.Propose(pctx, 1, faultSend(cmid))
		if err != nil {
			say("ERR %s %v", cmid, err)
			return
		}
		say("ACK %s %d", cmid, res.Append.ConvSeq)
	}
	for i := range faultBefore {
		propose(fmt.Sprint("m", i))
	}
	if kind == faultRead {
		// The conversation's records are in tables from here on, and not in the block cache:
		// the next send reads them from the disk.
		if err := n.FlushStore(); err != nil {
			say("FAIL flush: %v", err)
			os.Exit(3)
		}
	}
	fs.armed.Store(true)
	say("ARMED")
	for i := faultBefore; i < faultBefore+faultAfter; i++ {
		cmid := fmt.Sprint("m", i)
		say("SEND %s", cmid)
		propose(cmid)
	}
	say("NOFAULT")
	n.Close()
	os.Exit(0)
}

// faultRun is what a child printed and how it ended.
type faultRun struct {
	acked    map[string]log.Position // cmid → the conv_seq its ack gave
	order    []string                // acked cmids in ack order
	inFlight string                  // the cmid sent last without an answer, if any
	refused  []string                // "cmid error" for every send answered with an error
	exit     int
	stderr   string
	noFault  bool
}

func runFaultChild(t *testing.T, testName, dir, kind string) faultRun {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+testName+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), faultEnvDir+"="+dir, faultEnvKind+"="+kind)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	run := faultRun{acked: map[string]log.Position{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.SplitN(sc.Text(), " ", 3)
			switch f[0] {
			case "ACK":
				seq, _ := strconv.ParseUint(f[2], 10, 64)
				run.acked[f[1]] = log.Position(seq)
				run.order = append(run.order, f[1])
				run.inFlight = ""
			case "SEND":
				run.inFlight = f[1]
			case "ERR":
				run.refused = append(run.refused, f[1]+" "+f[2])
				run.inFlight = ""
			case "NOFAULT":
				run.noFault = true
			case "FAIL":
				t.Errorf("child: %s", sc.Text())
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		cmd.Wait()
		t.Fatalf("the child neither finished nor failed within 60s (a hang)\nstderr:\n%s", tail(stderr.String()))
	}
	err = cmd.Wait()
	run.stderr = stderr.String()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		run.exit = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(run.stderr, "DATA RACE") {
		t.Fatalf("child reports a data race:\n%s", tail(run.stderr))
	}
	return run
}

// endLine returns the line of a child's stderr that says why it ended.
func endLine(stderr string) string {
	for line := range strings.Lines(stderr) {
		if strings.Contains(line, "fatal commit error") || strings.HasPrefix(line, "panic:") {
			return strings.TrimSpace(line)
		}
	}
	return "(no fatal error or panic in its stderr)"
}

func tail(s string) string {
	if len(s) > 8000 {
		return "…" + s[len(s)-8000:]
	}
	return s
}

// verifyAfterFault restarts the node on dir with the fault lifted and checks that every send the
// child was told succeeded is stored where its ack said, that the conversation holds nothing
// else but, at most, the one send in flight when the process ended, whole, and that sending that
// one again stores it exactly once.
func verifyAfterFault(t *testing.T, dir string, run faultRun) {
	t.Helper()
	n, err := raftstore.New(raftstore.Config{NodeID: "n1", Insecure: true, Dir: dir, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("restart with the fault lifted: %v", err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, _, err := n.WaitLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// A leader re-applies what its log holds beyond the stored state only once it has committed
	// an entry of its own term: wait for the whole log to be applied before reading.
	testkit.WaitTrue(t, 15*time.Second, "the restarted node to apply its whole Raft log", func() bool {
		st, err := n.ShardStatus(1)
		return err == nil && st.LastIndex > 0 && st.AppliedIndex >= st.LastIndex
	})
	state, err := n.State(1)
	if err != nil {
		t.Fatal(err)
	}
	// Then give the re-application a little longer to show every acknowledged send: a loss
	// still fails below, after the deadline.
	var r log.Read
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if r, err = state.ReadConv(faultConv, 0, 1, log.Limit{}); err != nil {
			t.Fatal(err)
		}
		if len(r.Entries) >= len(run.order) || time.Now().After(deadline) {
			break
		}
	}
	byCmid := map[string]log.Position{}
	for i, e := range r.Entries {
		if e.ConvSeq != log.Position(i+1) {
			t.Fatalf("entry %d has conv_seq %d: the conversation has a gap", i, e.ConvSeq)
		}
		cmid := strings.TrimPrefix(string(e.Body), "body of ")
		if _, dup := byCmid[cmid]; dup || string(e.Body) != "body of "+cmid {
			t.Fatalf("entry %d: body %q (duplicated or torn)", i, e.Body)
		}
		byCmid[cmid] = e.ConvSeq
	}
	for _, cmid := range run.order {
		if got, ok := byCmid[cmid]; !ok || got != run.acked[cmid] {
			t.Errorf("acknowledged %s at conv_seq %d is at %d (present: %v) after the restart", cmid, run.acked[cmid], got, ok)
		}
	}
	if t.Failed() {
		st, _ := n.ShardStatus(1)
		t.Logf("after the restart: raft last index %d, applied %d; %d entries; child stderr:\n%s", st.LastIndex, st.AppliedIndex, len(r.Entries), tail(run.stderr))
	}
	extra := len(r.Entries) - len(run.order)
	switch {
	case extra == 1 && run.inFlight != "" && byCmid[run.inFlight] == log.Position(len(r.Entries)):
		// The send in flight made it to the disk before the process ended: it was never
		// acknowledged, and is stored whole.
	case extra != 0:
		t.Fatalf("%d entries stored beyond the %d acknowledged (in flight: %q)", extra, len(run.order), run.inFlight)
	}
	t.Logf("%d sends acknowledged, %d refused; after the restart the conversation holds %d entries (in flight: %q)",
		len(run.order), len(run.refused), len(r.Entries), run.inFlight)

	// The client retries what it was not told about, and resends an acknowledged one: each is
	// stored exactly once.
	if run.inFlight != "" {
		res := propose(t, n, faultSend(run.inFlight))
		// A duplicate if it was stored, or re-applied from the Raft log since the read above.
		if want := log.Position(len(run.order) + 1); res.Append.ConvSeq != want || (extra == 1 && !res.Append.Duplicate) {
			t.Errorf("the retried send in flight: conv_seq %d, duplicate %v; want %d (a duplicate if it was stored)",
				res.Append.ConvSeq, res.Append.Duplicate, want)
		}
	}
	if len(run.order) > 0 {
		last := run.order[len(run.order)-1]
		if res := propose(t, n, faultSend(last)); !res.Append.Duplicate || res.Append.ConvSeq != run.acked[last] {
			t.Errorf("resend of acknowledged %s: %+v, want a duplicate at %d", last, res.Append, run.acked[last])
		}
	}
	res := propose(t, n, faultSend("after"))
	want := log.Position(len(run.order) + 1)
	if run.inFlight != "" {
		want++
	}
	if res.Append.Duplicate || res.Append.ConvSeq != want {
		t.Errorf("a new send after the restart: %+v, want conv_seq %d: each send is stored exactly once", res.Append, want)
	}
}

// faultTest runs the child of kind in a fresh directory and checks the outcome: the child ended
// (it did not go on as if the disk were fine, nor hang) without a data race, having acknowledged
// every send before the fault was armed, and the restarted node has exactly what was
// acknowledged (verifyAfterFault). It returns the child's run for the checks of each kind.
func faultTest(t *testing.T, testName, kind string) faultRun {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("fault tests with child processes run on Linux only")
	}
	dir := t.TempDir()
	run := runFaultChild(t, testName, dir, kind)
	if run.noFault {
		t.Fatalf("the child sent %d messages with the fault armed and went on as if the disk were fine; exit %d\nstderr:\n%s",
			faultAfter, run.exit, tail(run.stderr))
	}
	for i := range faultBefore {
		if _, ok := run.acked[fmt.Sprint("m", i)]; !ok {
			t.Fatalf("m%d, sent before the fault, was not acknowledged; exit %d\nstderr:\n%s", i, run.exit, tail(run.stderr))
		}
	}
	if run.exit == 0 {
		t.Fatalf("the child exited 0 without finishing\nstderr:\n%s", tail(run.stderr))
	}
	t.Logf("the child ended with exit status %d: %s", run.exit, endLine(run.stderr))
	verifyAfterFault(t, dir, run)
	return run
}

// TestFaultWALSyncFails: an fsync of the write-ahead log fails (EIO) and loses what it did not
// sync. The node does not acknowledge the send whose commit needed that sync: Pebble treats the
// failed commit as fatal and the node's Pebble logger ends the process (exit status 1, the error
// named, no panic). On restart with the fault lifted, every acknowledged send is there, at the
// position its ack gave, nothing else is but possibly the send in flight, and its retry is
// stored once.
func TestFaultWALSyncFails(t *testing.T) {
	if dir := os.Getenv(faultEnvDir); dir != "" {
		faultChild(dir, os.Getenv(faultEnvKind))
		return
	}
	run := faultTest(t, "TestFaultWALSyncFails", faultSync)
	if run.exit != 1 || !strings.Contains(run.stderr, "fatal commit error") || !strings.Contains(run.stderr, "input/output error") ||
		strings.Contains(run.stderr, "panic:") {
		t.Errorf("want the process ended by Pebble's fatal commit error naming EIO (exit 1, no panic); exit %d\nstderr:\n%s", run.exit, tail(run.stderr))
	}
	if len(run.order) != faultBefore {
		t.Errorf("%d sends acknowledged with every fsync failing, want the %d before it", len(run.order), faultBefore)
	}
}

// TestFaultWALShortWrite: a write of the write-ahead log writes half its buffer and fails, and
// every later one fails (a device that failed). The torn record stays in the file. The node
// acknowledges nothing it could not write: the process ends on Pebble's fatal commit error
// (exit 1, no panic), and the restarted node reads past the torn tail to exactly what was
// acknowledged.
func TestFaultWALShortWrite(t *testing.T) {
	if dir := os.Getenv(faultEnvDir); dir != "" {
		faultChild(dir, os.Getenv(faultEnvKind))
		return
	}
	run := faultTest(t, "TestFaultWALShortWrite", faultShort)
	if run.exit != 1 || !strings.Contains(run.stderr, "fatal commit error") || strings.Contains(run.stderr, "panic:") {
		t.Errorf("want the process ended by Pebble's fatal commit error (exit 1, no panic); exit %d\nstderr:\n%s", run.exit, tail(run.stderr))
	}
	if len(run.order) != faultBefore {
		t.Errorf("%d sends acknowledged with every write failing, want the %d before it", len(run.order), faultBefore)
	}
}

// TestFaultTableReadFails: every read of a table fails (EIO) once the conversation's records are
// only in tables. A send needs them (its conversation, its dedup record): its apply fails, and
// the state machine, which cannot answer a command whose outcome it does not know, stops the
// process (fsm.applyOne's panic, naming the shard, the index and the error) before it commits
// anything of the batch. The send is not acknowledged; restarted with the fault lifted, the node
// re-applies it from the Raft log, where it was durable, and its retry is answered as a
// duplicate.
func TestFaultTableReadFails(t *testing.T) {
	if dir := os.Getenv(faultEnvDir); dir != "" {
		faultChild(dir, os.Getenv(faultEnvKind))
		return
	}
	run := faultTest(t, "TestFaultTableReadFails", faultRead)
	if !strings.Contains(run.stderr, "raftstore: shard 1: apply index") || !strings.Contains(run.stderr, "input/output error") {
		t.Errorf("want the state machine to stop on the failed read, naming it; exit %d\nstderr:\n%s", run.exit, tail(run.stderr))
	}
}
