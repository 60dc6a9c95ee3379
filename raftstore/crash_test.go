package raftstore_test

// A crash test with real processes: the test binary re-executes itself as a child that writes to
// a single-node shard as fast as it can, and the parent SIGKILLs it at random moments, restarts
// it on the same data directory, and at the end checks every acknowledged write against what is
// stored.
//
// The child talks to the parent over stdout, one line per event, each written in one write(2)
// (atomic on a pipe) and only after the event happened:
//
//	SEND <conv> <cmid>                 about to propose cmid (it may or may not be stored)
//	ACK <conv> <conv_seq> <cmid> <msgid>  Propose returned: cmid is durably at conv_seq
//	DUPOK <cmid>                       a resend of an acknowledged cmid returned the original ack
//	DUPBAD <cmid> <details>            it did not
//	ERR <details>                      the child hit an unexpected error and exits
//
// The parent passes the child, in a file, every ack and every unacknowledged send of the
// previous runs: the child retries the unacknowledged sends first (a client retrying after a
// crash; the outcome must be exactly once) and resends acknowledged ones now and then (dedup must
// survive the crash).

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/test/testkit"
)

const (
	crashEnvDir   = "SYNCD_CRASH_CHILD" // data dir; set only in the child
	crashEnvState = "SYNCD_CRASH_STATE" // file with the previous runs' acks and pending sends
	crashEnvRun   = "SYNCD_CRASH_RUN"   // run number, part of every cmid
	crashEnvSeed  = "SYNCD_CRASH_SEED"  // parent: fixes the kill schedule's seed

	crashConvs   = 20
	crashWorkers = 16
)

// crashChildConfig is the node configuration of the child: snapshots and Raft log compaction
// happen within a run's lifetime, so kills land in them too. The node-plane certificates are
// created in dir on the first run, as syncd's embedded node does.
func crashChildConfig(dir string, logger *slog.Logger) (raftstore.Config, error) {
	tls, err := raftstoretest.TLS(dir, "n1")
	return raftstore.Config{
		NodeID: "n1", Dir: dir, Logger: logger, TLS: tls,
		SnapshotThreshold: 4096,
		SnapshotInterval:  300 * time.Millisecond,
		TrailingLogs:      1024,
	}, err
}

// crashConv is the k-th conversation of the crash test: the direct conversation of uk and vk.
func crashConv(k int) string { return fmt.Sprintf("d:u%d:v%d", k, k) }

// crashKey is the k of crashConv(k).
func crashKey(conv string) string {
	k, _, _ := strings.Cut(strings.TrimPrefix(conv, "d:u"), ":")
	return k
}

// crashPayload derives the sender and body of cmid in conv, so the checker can tell a stored
// entry from anything that was never proposed.
func crashPayload(conv, cmid string) (sender, body string) {
	k := crashKey(conv)
	h := fnv.New64a()
	h.Write([]byte(conv + "/" + cmid))
	sum := h.Sum64()
	sender = "u" + k
	if sum&1 == 1 {
		sender = "v" + k
	}
	return sender, fmt.Sprintf("%s|%s|%016x", cmid, sender, sum)
}

func crashAppend(conv, cmid string) raftstore.Command {
	sender, body := crashPayload(conv, cmid)
	k := crashKey(conv)
	return raftstore.AppendCommand(&log.Append{
		Conv: conv, Sender: sender, ClientMsgID: cmid, Kind: log.KindMessage, Body: []byte(body),
		Members: []string{"u" + k, "v" + k},
	})
}

// crashDeliver delivers the shard's outbox into its own user logs until it is empty, like the
// fan-out worker when conversations and users share a shard. It reports whether it delivered
// anything.
func crashDeliver(ctx context.Context, n *raftstore.Node, state *log.Shard) (bool, error) {
	mark, err := state.SourceMark(state.ID())
	if err != nil {
		return false, err
	}
	delivered := false
	for {
		items, err := state.ReadOutbox(mark+1, 256)
		if err != nil {
			return delivered, fmt.Errorf("read outbox from %d: %w", mark+1, err)
		}
		if len(items) == 0 {
			return delivered, nil
		}
		b := &log.DeliveryBatch{Source: state.ID(), Prev: mark, Last: items[len(items)-1].Pos}
		for _, it := range items {
			b.Items = append(b.Items, log.Delivery{Pos: it.Pos, Users: it.Recipients, Entry: it.Entry})
		}
		res, err := n.Propose(ctx, 1, raftstore.DeliverCommand(b))
		if err != nil {
			return delivered, fmt.Errorf("deliver (%d, %d]: %w", b.Prev, b.Last, err)
		}
		if res.Deliver.Mark != b.Last {
			return delivered, fmt.Errorf("deliver (%d, %d]: mark is %d", b.Prev, b.Last, res.Deliver.Mark)
		}
		mark = res.Deliver.Mark
		delivered = true
	}
}

// crashAck is one acknowledged append.
type crashAck struct {
	conv  string
	seq   log.Position
	cmid  string
	msgID string
}

func TestCrashKill9(t *testing.T) {
	if dir := os.Getenv(crashEnvDir); dir != "" {
		crashChild(dir)
		return // not reached: the child runs until killed
	}
	if runtime.GOOS != "linux" {
		t.Skip("crash test with SIGKILLed child processes runs on Linux only")
	}
	runs := 12
	if testing.Short() {
		runs = 4
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(crashEnvSeed); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", crashEnvSeed, err)
		}
		seed = v
	}
	t.Logf("kill schedule seed %d (rerun with %s=%d)", seed, crashEnvSeed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	base := t.TempDir()
	dir := filepath.Join(base, "data")
	stateFile := filepath.Join(base, "state")
	rec := newCrashRecord()
	start := time.Now()
	for run := range runs {
		if err := rec.writeState(stateFile); err != nil {
			t.Fatal(err)
		}
		delay := time.Duration(300+rng.IntN(1201)) * time.Millisecond
		lines, stderr := crashRunChild(t, run, dir, stateFile, delay)
		if err := rec.add(run, lines); err != nil {
			t.Fatalf("run %d: %v\nchild stderr:\n%s", run, err, stderr)
		}
		for _, bad := range []string{"DATA RACE", "panic:", "fatal error:"} {
			if strings.Contains(stderr, bad) {
				t.Fatalf("run %d: child stderr reports %q:\n%s", run, bad, stderr)
			}
		}
	}
	t.Logf("%d kills in %v: %d sends, %d acks (%d retries of unacknowledged sends), %d dedup checks passed",
		runs, time.Since(start).Round(time.Millisecond), len(rec.sent), len(rec.acks), rec.retries, rec.dupOK)
	if len(rec.dupBad) > 0 {
		t.Errorf("%d resends of acknowledged messages did not return the original ack, first: %s", len(rec.dupBad), rec.dupBad[0])
	}
	crashVerify(t, dir, rec)
}

// crashRunChild runs one child on dir, kills it delay after its first ack and returns every
// complete line it printed and its stderr.
func crashRunChild(t *testing.T, run int, dir, stateFile string, delay time.Duration) (lines []string, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashKill9$")
	cmd.Env = append(os.Environ(), crashEnvDir+"="+dir, crashEnvState+"="+stateFile, crashEnvRun+"="+strconv.Itoa(run))
	var errBuf crashTailBuffer
	cmd.Stderr = &errBuf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// The child exits when its stdin closes, so it cannot outlive this process.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	firstAck := make(chan struct{})
	readDone := make(chan error, 1)
	go func() {
		r := bufio.NewReaderSize(stdout, 64<<10)
		acked := false
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				// A final line without its newline was cut by the kill: ignore it.
				if errors.Is(err, io.EOF) {
					err = nil
				}
				readDone <- err
				return
			}
			line = strings.TrimSuffix(line, "\n")
			lines = append(lines, line)
			if !acked && strings.HasPrefix(line, "ACK ") {
				acked = true
				close(firstAck)
			}
		}
	}()

	var exited error
	select {
	case <-firstAck:
		timer := time.NewTimer(delay)
		select {
		case <-timer.C:
		case exited = <-readDone:
			timer.Stop()
			readDone <- exited
			exited = fmt.Errorf("child closed its stdout before the kill (read error %v)", exited)
		}
	case err := <-readDone:
		readDone <- err
		exited = fmt.Errorf("child closed its stdout before its first ack (read error %v)", err)
	case <-time.After(60 * time.Second):
		exited = errors.New("no ack from the child within 60s")
	}
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("run %d: kill: %v", run, err)
	}
	// Drain stdout completely before Wait, which closes the pipe.
	readErr := <-readDone
	waitErr := cmd.Wait()
	stdin.Close()
	stderr = errBuf.String()
	if exited != nil || readErr != nil {
		t.Fatalf("run %d: %v (read %v, wait %v)\nstdout tail: %q\nchild stderr:\n%s",
			run, exited, readErr, waitErr, lines[max(0, len(lines)-5):], stderr)
	}
	var ee *exec.ExitError
	if !errors.As(waitErr, &ee) || ee.ExitCode() != -1 {
		t.Fatalf("run %d: child was not killed by the signal: %v\nchild stderr:\n%s", run, waitErr, stderr)
	}
	return lines, stderr
}

// crashTailBuffer keeps the last 64 KiB written to it; safe for concurrent use.
type crashTailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *crashTailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - 64<<10; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *crashTailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// crashRecord is what the parent learned from every child.
type crashRecord struct {
	sent    map[string]string   // cmid -> conv, every cmid ever proposed
	acks    map[string]crashAck // cmid -> its ack
	dupOK   int
	dupBad  []string
	retries int // acks of cmids sent by an earlier run
}

func newCrashRecord() *crashRecord {
	return &crashRecord{sent: map[string]string{}, acks: map[string]crashAck{}}
}

// add records one run's lines, checking that acks are consistent with sends and earlier acks.
func (r *crashRecord) add(run int, lines []string) error {
	suffix := fmt.Sprintf("-r%d", run)
	for _, line := range lines {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "SEND":
			if conv, ok := r.sent[f[2]]; ok && conv != f[1] {
				return fmt.Errorf("cmid %s sent in %s and %s", f[2], conv, f[1])
			}
			r.sent[f[2]] = f[1]
		case len(f) == 5 && f[0] == "ACK":
			seq, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				return fmt.Errorf("bad line %q", line)
			}
			a := crashAck{conv: f[1], seq: log.Position(seq), cmid: f[3], msgID: f[4]}
			if conv, ok := r.sent[a.cmid]; !ok || conv != a.conv {
				return fmt.Errorf("ack %q without a send of that cmid to that conversation", line)
			}
			if old, ok := r.acks[a.cmid]; ok && old != a {
				return fmt.Errorf("cmid %s acked twice differently: %+v then %+v", a.cmid, old, a)
			}
			if !strings.HasSuffix(a.cmid, suffix) {
				r.retries++
			}
			r.acks[a.cmid] = a
		case len(f) == 2 && f[0] == "DUPOK":
			r.dupOK++
		case len(f) >= 1 && f[0] == "DUPBAD":
			r.dupBad = append(r.dupBad, fmt.Sprintf("run %d: %s", run, line))
		case len(f) >= 1 && f[0] == "ERR":
			return fmt.Errorf("child failed: %s", line)
		default:
			// The testing package prints nothing before the kill without -test.v; anything else
			// is a protocol error.
			return fmt.Errorf("unexpected line from child: %q", line)
		}
	}
	return nil
}

// writeState writes the acks and the unacknowledged sends for the next child.
func (r *crashRecord) writeState(path string) error {
	var b bytes.Buffer
	for _, a := range r.acks {
		fmt.Fprintf(&b, "A %s %d %s %s\n", a.conv, a.seq, a.cmid, a.msgID)
	}
	for cmid, conv := range r.sent {
		if _, ok := r.acks[cmid]; !ok {
			fmt.Fprintf(&b, "P %s %s\n", conv, cmid)
		}
	}
	return os.WriteFile(path, b.Bytes(), 0o600)
}

// crashVerify opens the data the children left, finishes fan-out and checks every guarantee.
func crashVerify(t *testing.T, dir string, rec *crashRecord) {
	t.Helper()
	tls, err := raftstoretest.TLS(dir, "n1")
	if err != nil {
		t.Fatal(err)
	}
	n, err := raftstore.New(raftstore.Config{NodeID: "n1", Dir: dir, TLS: tls, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	st0, err := n.ShardStatus(1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, _, err := n.WaitLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// The new leader's first entry lands after everything stored; once it is committed and
	// applied, so is everything before it.
	testkit.WaitTrue(t, 60*time.Second, "the reopened shard to apply its whole log", func() bool {
		st, _ := n.ShardStatus(1)
		return st.CommitIndex > st0.LastIndex && st.AppliedIndex == st.CommitIndex
	})
	state, err := n.State(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crashDeliver(ctx, n, state); err != nil {
		t.Fatal(err)
	}
	ob, err := state.Outbox()
	if err != nil {
		t.Fatal(err)
	}
	if mark, err := state.SourceMark(1); err != nil || mark != ob.Head {
		t.Fatalf("after fan-out the mark is %d (%v), the outbox head %d", mark, err, ob.Head)
	}

	where := map[string]string{} // cmid -> "conv/seq" of the entry holding it (G4)
	total, userEntries := 0, 0
	for k := range crashConvs {
		conv := crashConv(k)
		entries := crashReadAll(t, conv, func(from log.Position) (log.Read, error) {
			return state.ReadConv(conv, 0, from, log.Limit{})
		})
		total += len(entries)
		for i, e := range entries {
			// G2: contiguous from 1, and each entry where it says it is.
			if e.Seq != log.Position(i+1) || e.ConvSeq != e.Seq || e.Conv != conv || e.Kind != log.KindMessage {
				t.Fatalf("%s: entry %d is %+v", conv, i+1, e)
			}
			cmid, _, _ := strings.Cut(string(e.Body), "|")
			sentConv, ok := rec.sent[cmid]
			if !ok || sentConv != conv {
				t.Fatalf("%s/%d holds %q (cmid %q), which was never sent to %s", conv, e.Seq, e.Body, cmid, conv)
			}
			sender, body := crashPayload(conv, cmid)
			if string(e.Body) != body || e.Sender != sender || e.MsgID.Shard != 1 || e.MsgID.Index == 0 {
				t.Fatalf("%s/%d: entry %+v does not match what was sent for %s (sender %s, body %q)",
					conv, e.Seq, e, cmid, sender, body)
			}
			at := fmt.Sprintf("%s/%d", conv, e.Seq)
			if prev, dup := where[cmid]; dup {
				t.Fatalf("cmid %s stored twice, at %s and %s", cmid, prev, at)
			}
			where[cmid] = at
		}
		// G1: every ack is stored exactly as acknowledged.
		for _, a := range rec.acks {
			if a.conv != conv {
				continue
			}
			if a.seq == 0 || int(a.seq) > len(entries) {
				t.Fatalf("acked %+v is lost: %s holds %d entries", a, conv, len(entries))
			}
			e := entries[a.seq-1]
			if e.MsgID.String() != a.msgID || !strings.HasPrefix(string(e.Body), a.cmid+"|") {
				t.Fatalf("acked %+v, but %s/%d holds msg %s body %q", a, conv, a.seq, e.MsgID, e.Body)
			}
		}
		// G5/G6: both members' logs hold the conversation exactly, in order, each entry once.
		for _, uid := range []string{fmt.Sprintf("u%d", k), fmt.Sprintf("v%d", k)} {
			got := crashReadAll(t, uid, func(from log.Position) (log.Read, error) {
				return state.ReadUser(uid, 0, from, log.Limit{})
			})
			userEntries += len(got)
			if len(got) != len(entries) {
				t.Fatalf("%s's log holds %d entries, %s holds %d", uid, len(got), conv, len(entries))
			}
			for i, e := range got {
				c := entries[i]
				if e.Seq != log.Position(i+1) || e.Conv != conv || e.ConvSeq != c.ConvSeq || e.MsgID != c.MsgID ||
					!bytes.Equal(e.Body, c.Body) || e.Sender != c.Sender || e.Time != c.Time {
					t.Fatalf("%s's log at %d holds %+v, want %s/%d %+v", uid, i+1, e, conv, c.ConvSeq, c)
				}
			}
		}
	}
	unacked := 0
	for cmid := range where {
		if _, ok := rec.acks[cmid]; !ok {
			unacked++
		}
	}
	sum, keys, err := state.StateChecksum()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("verified %d conversation entries (%d acked, %d sent but unacknowledged before a kill), "+
		"%d user-log entries, outbox head %d; state %d keys, checksum %x",
		total, total-unacked, unacked, userEntries, ob.Head, keys, sum)
	if total-unacked != len(rec.acks) {
		t.Fatalf("%d acked entries found, %d acks", total-unacked, len(rec.acks))
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
}

// crashReadAll pages a log from position 1 to its head, checking each page starts where asked
// and continues without a gap.
func crashReadAll(t *testing.T, name string, read func(from log.Position) (log.Read, error)) []log.Entry {
	t.Helper()
	var out []log.Entry
	from := log.Position(1)
	for {
		r, err := read(from)
		if err != nil {
			t.Fatalf("read %s from %d: %v", name, from, err)
		}
		switch r.Status {
		case log.ReadCaughtUp:
			if r.Info.Head != from-1 || r.Info.First != 1 {
				t.Fatalf("%s caught up at %d, but its info is %+v", name, from, r.Info)
			}
			return out
		case log.ReadEntries:
			if len(r.Entries) == 0 {
				t.Fatalf("%s from %d: no entries with status %v", name, from, r.Status)
			}
			for _, e := range r.Entries {
				if e.Seq != from {
					t.Fatalf("%s: read found position %d where %d was expected", name, e.Seq, from)
				}
				out = append(out, e)
				from++
			}
		default:
			t.Fatalf("read %s from %d: status %v, info %+v", name, from, r.Status, r.Info)
		}
	}
}

// ---- child ----

// crashOut serialises the child's protocol lines: each is one write, made after the event.
type crashOut struct{ mu sync.Mutex }

func (o *crashOut) printf(format string, args ...any) {
	line := fmt.Sprintf(format, args...) + "\n"
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, err := os.Stdout.WriteString(line); err != nil {
		os.Exit(3) // the parent is gone
	}
}

func (o *crashOut) fail(format string, args ...any) {
	o.printf("ERR "+format, args...)
	os.Exit(2)
}

// crashChild is the child role: it writes until killed and never returns.
func crashChild(dir string) {
	out := &crashOut{}
	// Exit with the parent (stdin closes) and, as a backstop, after a while.
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(4)
	}()
	time.AfterFunc(5*time.Minute, func() { os.Exit(5) })

	run := os.Getenv(crashEnvRun)
	var acked []crashAck
	var pending [][2]string // conv, cmid
	if b, err := os.ReadFile(os.Getenv(crashEnvState)); err != nil {
		out.fail("read state: %v", err)
	} else {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) == 5 && f[0] == "A":
				seq, err := strconv.ParseUint(f[2], 10, 64)
				if err != nil {
					out.fail("bad state line %q", line)
				}
				acked = append(acked, crashAck{conv: f[1], seq: log.Position(seq), cmid: f[3], msgID: f[4]})
			case len(f) == 3 && f[0] == "P":
				pending = append(pending, [2]string{f[1], f[2]})
			}
		}
	}

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg, err := crashChildConfig(dir, logger)
	if err != nil {
		out.fail("certificates: %v", err)
	}
	n, err := raftstore.New(cfg)
	if err != nil {
		out.fail("open: %v", err)
	}
	ctx := context.Background()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, _, err = n.WaitLeader(wctx, 1)
	cancel()
	if err != nil {
		out.fail("wait leader: %v", err)
	}
	state, err := n.State(1)
	if err != nil {
		out.fail("state: %v", err)
	}

	propose := func(conv, cmid string) log.AppendResult {
		res, err := n.Propose(ctx, 1, crashAppend(conv, cmid))
		if err != nil {
			out.fail("propose %s %s: %v", conv, cmid, err)
		}
		return res.Append
	}
	send := func(conv, cmid string) crashAck {
		out.printf("SEND %s %s", conv, cmid)
		r := propose(conv, cmid)
		a := crashAck{conv: conv, seq: r.ConvSeq, cmid: cmid, msgID: r.MsgID.String()}
		out.printf("ACK %s %d %s %s", conv, a.seq, cmid, a.msgID)
		return a
	}
	resend := func(a crashAck) {
		r := propose(a.conv, a.cmid)
		if !r.Duplicate || r.ConvSeq != a.seq || r.MsgID.String() != a.msgID {
			out.printf("DUPBAD %s acked %s/%d msg %s, resend got %+v", a.cmid, a.conv, a.seq, a.msgID, r)
			return
		}
		out.printf("DUPOK %s", a.cmid)
	}

	for w := range crashWorkers {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w)))
			// A client retrying after the crash: the sends the previous children never acked.
			for i := w; i < len(pending); i += crashWorkers {
				send(pending[i][0], pending[i][1])
			}
			mine := acked[:len(acked):len(acked)] // full: appends copy, workers share nothing
			for seq := 0; ; seq++ {
				if seq%8 == 7 && len(mine) > 0 {
					resend(mine[rng.IntN(len(mine))])
					continue
				}
				conv := crashConv(rng.IntN(crashConvs))
				mine = append(mine, send(conv, fmt.Sprintf("w%d-%d-r%s", w, seq, run)))
			}
		}()
	}
	go func() {
		for {
			did, err := crashDeliver(ctx, n, state)
			if err != nil {
				out.fail("fan-out: %v", err)
			}
			if !did {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	select {}
}
