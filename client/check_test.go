package client

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/client/internal/store"
	"github.com/syncd-dev/syncd/client/internal/store/storetest"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// The digest checks and reports of PROTOCOL §8.7, against a real server: what the device stored
// is compared with the server's log, a damaged store is reported and repaired, a gap is reported
// once, and answers that say the window moved are followed without looping.

// reportLog is a server logger that records the client reports the server logs ("kind=gap sub=0
// epoch=… from=2 to=3") and passes errors to the test log.
type reportLog struct {
	t     testing.TB
	mu    *sync.Mutex
	lines *[]string
}

func newReportLog(t testing.TB) reportLog {
	return reportLog{t: t, mu: new(sync.Mutex), lines: new([]string)}
}

func (h reportLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h reportLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.HasPrefix(r.Message, "a client reports") {
		if r.Level >= slog.LevelError {
			h.t.Log(r.Message)
		}
		return nil
	}
	var line []string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "user" && a.Key != "device" && a.Key != "epoch" {
			line = append(line, a.String())
		}
		return true
	})
	h.mu.Lock()
	*h.lines = append(*h.lines, strings.Join(line, " "))
	h.mu.Unlock()
	return nil
}

func (h reportLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h reportLog) WithGroup(string) slog.Handler      { return h }

func (h reportLog) reports() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(*h.lines)
}

// serverMetric reads one series of srv's /metrics (admin address).
func serverMetric(t *testing.T, srv *syncd.Server, series string) string {
	t.Helper()
	return testkit.Metric(t, srv.AdminAddr().String(), series)
}

// checkSetup starts a server whose reports land in the returned log, heartbeating every
// heartbeatMs (a check comes with a stream's first heartbeat at the head), and sends bob n
// messages from alice (bob's log: entries 1 to n, the direct conversation's conv_seq 1 to n).
// Delivery reports are off: bob's acks would append delivered entries to his log, and the
// positions the checks, gaps and cursors of these tests name must not depend on when they come.
func checkSetup(t *testing.T, n int) (*syncd.Server, reportLog, *prototest.Conn) {
	t.Helper()
	rec := newReportLog(t)
	srv := syncdtest.Start(t, func(c *syncd.Config) {
		c.Shards, c.Logger, c.Limits.HeartbeatMs = 2, slog.New(rec), heartbeatMs
		c.DisableDeliveryReports = true
	})
	tokA, err := srv.MintToken("alice", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	alice := prototest.Connect(t, srv.Addr().String(), srv.Fingerprint(), tokA, "alice", "phone")
	for i := 1; i <= n; i++ {
		sendTo(alice, fmt.Sprint("m", i))
	}
	return srv, rec, alice
}

// sendTo sends body from alice's raw connection to the direct conversation with bob.
func sendTo(alice *prototest.Conn, body string) {
	alice.Ack(&proto.Send{ID: alice.ID(), Conv: proto.DirectConv("alice", "bob"), ClientMsgID: body, Body: []byte(body), Peer: "bob"})
}

// serverLog reads bob's log from the server as a new device would: entries 1 to n.
func serverLog(t *testing.T, srv *syncd.Server, n int) []proto.Entry {
	t.Helper()
	tok, err := srv.MintToken("bob", "audit", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	audit := prototest.Connect(t, srv.Addr().String(), srv.Fingerprint(), tok, "bob", "audit")
	audit.StartSync(0, 0)
	return audit.Entries(0, n)
}

// digestAnswers is a proxy rewrite that counts the server's DigestResult frames (and passes them
// through fault, if set) and its Head frames.
type digestAnswers struct {
	digests, heads atomic.Int64
	fault          func(*proto.DigestResult) proto.Frame
}

func (d *digestAnswers) rewrite(f proto.Frame) proto.Frame {
	switch f := f.(type) {
	case *proto.DigestResult:
		d.digests.Add(1)
		if d.fault != nil {
			return d.fault(f)
		}
	case *proto.Head:
		d.heads.Add(1)
	}
	return f
}

// noEvent fails the test if c delivers an event of type E within d; other events are dropped.
func noEvent[E Event](t *testing.T, c *Client, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case ev := <-c.Events():
			if e, ok := ev.(E); ok {
				t.Fatalf("unexpected %T: %+v", e, e)
			}
		case <-deadline:
			return
		}
	}
}

// TestSDKDigestChecksWhatItStored (§8.7 "When"): a device whose store matches the server's log
// checks it once a stream has caught up — at its first heartbeat at the head: after the first sync
// has replayed the log, and after a resume, before it says SyncedEvent — and once with every head
// check, one Digest each, and changes nothing: no mismatch, no report, no entry fetched again,
// the cursor where it was.
func TestSDKDigestChecksWhatItStored(t *testing.T) {
	const n = 30
	srv, rec, _ := checkSetup(t, n)
	var answers digestAnswers
	proxy := prototest.NewProxy(t, srv.Addr().String(), srv.Fingerprint(), answers.rewrite)
	token, err := srv.MintToken("bob", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Addr: proxy.Addr(), Token: token, Device: "phone", Fingerprint: proxy.Fingerprint(), StoreDir: t.TempDir(),
		Logger: syncdtest.Logger(t)}
	bob := dialWith(t, cfg)
	if e := nextEvent[SyncedEvent](t, bob, 10*time.Second); e.Head != n {
		t.Fatalf("synced up to %d, want %d", e.Head, n)
	}
	// The batch that reached the head said SyncedEvent; the check comes with the first heartbeat.
	testkit.WaitTrue(t, 10*time.Second, "a check after the first sync", func() bool { return answers.digests.Load() == 1 })
	noEvent[MismatchEvent](t, bob, 2*heartbeatMs*time.Millisecond)
	if got := answers.digests.Load(); got != 1 {
		t.Fatalf("%d digests answered after the first sync; want 1", got)
	}
	if err := bob.Close(); err != nil {
		t.Fatal(err)
	}

	// A resume, with a head check every 200 ms: a check before SyncedEvent, then one per head check.
	cfg.HeadCheck = 200 * time.Millisecond
	bob = dialWith(t, cfg)
	nextEvent[SyncedEvent](t, bob, 10*time.Second)
	if got := answers.digests.Load(); got != 2 {
		t.Fatalf("%d digests answered after the resume caught up; want 2", got)
	}
	began, heads := time.Now(), answers.heads.Load()
	testkit.WaitTrue(t, 10*time.Second, "five head checks", func() bool { return answers.heads.Load() >= heads+5 })
	noEvent[EntryEvent](t, bob, 100*time.Millisecond) // nothing fetched again, and no MismatchEvent either
	// One Digest per head check (the walk: the whole run fits one window), none in between.
	checks := answers.heads.Load() - heads
	if got := answers.digests.Load() - 2; got < checks-1 || got > checks+1 {
		t.Fatalf("%d digests answered over %d head checks in %v; want one each", got, checks, time.Since(began))
	}
	if r, err := bob.st.Run(0); err != nil || r.Pos != n || r.Base != 1 || r.RepairTo != 0 {
		t.Fatalf("run after the checks: %+v, %v; want the cursor at %d, entries from 1, no repair", r, err, n)
	}
	if m := serverMetric(t, srv, "syncd_client_digest_mismatches_total"); m != "0" {
		t.Fatalf("syncd_client_digest_mismatches_total %s, want 0", m)
	}
	if r := rec.reports(); len(r) != 0 {
		t.Fatalf("reports logged: %q", r)
	}
}

// TestSDKRepairsADamagedStore (§8.7 "A mismatch"): a store damaged while the app was closed — a
// message's body changed in the log entry and in the view, another entry lost — is found out by
// the check after the resume: the SDK reports the range (the server counts and logs it), drops its
// entries from the start of the range, replays them with no ceiling (a rebase would jump over
// them), and ends with the server's log and the original messages, checked again (a second
// Digest) without a second report.
func TestSDKRepairsADamagedStore(t *testing.T) {
	const n = 30
	srv, rec, _ := checkSetup(t, n)
	var answers digestAnswers
	proxy := prototest.NewProxy(t, srv.Addr().String(), srv.Fingerprint(), answers.rewrite)
	dir := t.TempDir()
	token, err := srv.MintToken("bob", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Addr: proxy.Addr(), Token: token, Device: "phone", Fingerprint: proxy.Fingerprint(), StoreDir: dir,
		Logger: syncdtest.Logger(t), Ceiling: -1}
	bob := dialWith(t, cfg)
	nextEvent[SyncedEvent](t, bob, 10*time.Second)
	testkit.WaitTrue(t, 10*time.Second, "the check after the first sync", func() bool { return answers.digests.Load() == 1 })
	if err := bob.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.Ceiling = 5 // far below n: a rebase, were it asked for one, would jump over the repair
	conv := proto.DirectConv("alice", "bob")
	damage := storetest.Open(t, dir)
	damage.SetEntryBody(0, 12, []byte("mangled"))
	damage.SetMessageBody(conv, 12, []byte("mangled"))
	damage.DeleteEntry(0, 20)
	damage.Close()

	bob = dialWith(t, cfg)
	mm := nextEvent[MismatchEvent](t, bob, 10*time.Second)
	if mm != (MismatchEvent{Sub: 0, Epoch: mm.Epoch, From: 1, To: n}) || mm.Epoch == 0 {
		t.Fatalf("%+v; want the whole window, 1 to %d, being refetched", mm, n)
	}
	var replayed []proto.Position
	for synced := false; !synced; {
		select {
		case ev := <-bob.Events():
			switch ev := ev.(type) {
			case EntryEvent:
				replayed = append(replayed, ev.Entry.Seq)
			case RebaseEvent:
				t.Fatalf("rebased (%+v) instead of replaying the damaged range", ev)
			case MismatchEvent:
				t.Fatalf("a second mismatch: %+v", ev)
			case SyncedEvent:
				synced = true
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no SyncedEvent after the repair")
		}
	}
	if len(replayed) != n || replayed[0] != 1 || replayed[n-1] != n {
		t.Fatalf("replayed %v; want 1 to %d", replayed, n)
	}
	// The check after the resume, and the one of the refetched range after the replay.
	testkit.WaitTrue(t, 10*time.Second, "the refetched range checked again", func() bool { return answers.digests.Load() == 3 })
	noEvent[MismatchEvent](t, bob, 2*heartbeatMs*time.Millisecond)

	want := serverLog(t, srv, n)
	got, run, err := bob.st.Entries(0, 1, n)
	if err != nil || len(got) != n || run != (store.Run{Epoch: mm.Epoch, Pos: n, Base: 1}) {
		t.Fatalf("stored after the repair: %d entries, run %+v, %v", len(got), run, err)
	}
	if !slices.Equal(proto.DigestOf(got), proto.DigestOf(want)) {
		t.Fatal("the stored entries differ from the server's log after the repair")
	}
	for i := range want {
		if got[i].MsgID != want[i].MsgID || string(got[i].Body) != string(want[i].Body) || got[i].Time != want[i].Time {
			t.Fatalf("entry %d: stored %+v, server %+v", i+1, got[i], want[i])
		}
	}
	msgs, err := bob.Messages(conv)
	if err != nil || len(msgs) != n {
		t.Fatalf("%d messages, %v", len(msgs), err)
	}
	for i, m := range msgs {
		if string(m.Body) != fmt.Sprint("m", i+1) {
			t.Fatalf("message %d reads %q after the repair", i+1, m.Body)
		}
	}
	if m := serverMetric(t, srv, "syncd_client_digest_mismatches_total"); m != "1" {
		t.Fatalf("syncd_client_digest_mismatches_total %s, want 1", m)
	}
	if r := rec.reports(); !slices.Equal(r, []string{fmt.Sprintf("kind=mismatch sub=0 from=1 to=%d", n)}) {
		t.Fatalf("reports logged: %q", r)
	}
}

// TestSDKGivesUpOnARangeThatKeepsDiffering (§8.7 "A mismatch", step 4): when the range still
// differs after its refetch (here a proxy corrupts every digest the server sends), the SDK keeps
// what the server sent and stops: one report, one refetch, then MismatchEvent.GaveUp, and no
// more reports or refetches at the head checks that follow.
func TestSDKGivesUpOnARangeThatKeepsDiffering(t *testing.T) {
	const n = 10
	srv, rec, _ := checkSetup(t, n)
	answers := digestAnswers{fault: func(r *proto.DigestResult) proto.Frame { r.Digest[0] ^= 1; return r }}
	proxy := prototest.NewProxy(t, srv.Addr().String(), srv.Fingerprint(), answers.rewrite)
	token, err := srv.MintToken("bob", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bob := dialWith(t, Config{Addr: proxy.Addr(), Token: token, Device: "phone", Fingerprint: proxy.Fingerprint(),
		HeadCheck: 200 * time.Millisecond})
	if mm := nextEvent[MismatchEvent](t, bob, 10*time.Second); mm.From != 1 || mm.To != n || mm.GaveUp {
		t.Fatalf("first %+v; want 1 to %d, refetching", mm, n)
	}
	if mm := nextEvent[MismatchEvent](t, bob, 10*time.Second); mm.From != 1 || mm.To != n || !mm.GaveUp {
		t.Fatalf("second %+v; want 1 to %d, given up", mm, n)
	}
	heads := answers.heads.Load()
	testkit.WaitTrue(t, 10*time.Second, "three head checks", func() bool { return answers.heads.Load() >= heads+3 })
	noEvent[MismatchEvent](t, bob, 100*time.Millisecond)
	if r, err := bob.st.Run(0); err != nil || r.Pos != n || r.RepairTo != 0 {
		t.Fatalf("run: %+v, %v; want the cursor back at %d, no repair pending", r, err, n)
	}
	if m := serverMetric(t, srv, "syncd_client_digest_mismatches_total"); m != "1" {
		t.Fatalf("syncd_client_digest_mismatches_total %s, want 1", m)
	}
	if r := rec.reports(); len(r) != 1 {
		t.Fatalf("reports logged: %q; want one", r)
	}
}

// TestSDKFollowsAMovedWindow (§8.7, too_old and epoch_changed): a proxy plays a server whose
// retention has trimmed bob's log up to 10 — a Digest from below 11 is answered too_old, and Head
// says first 11 from then on. The SDK asks the head once and goes on from 11: one too_old in all,
// however many checks follow, and what it compares there matches. epoch_changed makes it stop
// checking that log on the connection, without a report, a rewind or a restart. Neither loops.
func TestSDKFollowsAMovedWindow(t *testing.T) {
	const n = 30
	srv, rec, _ := checkSetup(t, n)
	var trimmed, epochChanged atomic.Bool
	var tooOld, checkedFrom11 atomic.Int64
	answers := digestAnswers{}
	answers.fault = func(r *proto.DigestResult) proto.Frame {
		switch {
		case epochChanged.Load():
			return &proto.Error{ID: r.ID, Code: proto.CodeEpochChanged, Message: "re-created"}
		case r.From < 11:
			trimmed.Store(true)
			tooOld.Add(1)
			return &proto.Error{ID: r.ID, Code: proto.CodeTooOld, Message: "trimmed"}
		case r.From == 11:
			checkedFrom11.Add(1)
		}
		return r
	}
	proxy := prototest.NewProxy(t, srv.Addr().String(), srv.Fingerprint(), func(f proto.Frame) proto.Frame {
		if h, ok := f.(*proto.Head); ok && trimmed.Load() {
			h.First = 11
		}
		return answers.rewrite(f)
	})
	token, err := srv.MintToken("bob", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Addr: proxy.Addr(), Token: token, Device: "phone", Fingerprint: proxy.Fingerprint(), StoreDir: t.TempDir(),
		Logger: syncdtest.Logger(t), HeadCheck: time.Hour}
	// The check at the first heartbeat: too_old, one HeadCheck (no periodic one comes within the
	// hour), the same check again from 11.
	bob := dialWith(t, cfg)
	nextEvent[SyncedEvent](t, bob, 10*time.Second)
	testkit.WaitTrue(t, 10*time.Second, "a check from 11", func() bool { return checkedFrom11.Load() == 1 })
	if o, h := tooOld.Load(), answers.heads.Load(); o != 1 || h != 1 {
		t.Fatalf("%d too_old answers and %d heads before the check from 11; want one of each", o, h)
	}
	if err := bob.Close(); err != nil {
		t.Fatal(err)
	}

	// With head checks: whatever the order of the first ones, a Client asks from below 11 once
	// at most, and the walk goes on from 11.
	cfg.HeadCheck = 200 * time.Millisecond
	bob = dialWith(t, cfg)
	nextEvent[SyncedEvent](t, bob, 10*time.Second)
	heads := answers.heads.Load()
	testkit.WaitTrue(t, 10*time.Second, "four head checks", func() bool { return answers.heads.Load() >= heads+4 })
	if o := tooOld.Load(); o > 2 || checkedFrom11.Load() < 3 {
		t.Fatalf("%d too_old answers, %d checks from 11; want at most one more, and a check from 11 per head check", o, checkedFrom11.Load())
	}

	epochChanged.Store(true)
	heads, digests := answers.heads.Load(), answers.digests.Load()
	testkit.WaitTrue(t, 10*time.Second, "four head checks", func() bool { return answers.heads.Load() >= heads+4 })
	if d := answers.digests.Load() - digests; d > 1 {
		t.Fatalf("%d digests answered epoch_changed over four head checks; want at most one", d)
	}
	noEvent[EntryEvent](t, bob, 100*time.Millisecond) // nothing rewound, nothing replayed
	if !bob.Connected() || proxy.Accepted() != 2 {
		t.Fatalf("connected %v after %d connections: epoch_changed to a Digest is not acted on alone (want the second Client's one)", bob.Connected(), proxy.Accepted())
	}
	if r, err := bob.st.Run(0); err != nil || r.Pos != n || r.Base != 1 {
		t.Fatalf("run %+v, %v; want the cursor at %d, entries from 1", r, err, n)
	}
	if r := rec.reports(); len(r) != 0 {
		t.Fatalf("reports logged: %q", r)
	}
}

// TestSDKReportsAGapOnce (§8.4 step 3, §8.7 "A gap"): a batch that skips an entry (a proxy drops
// seq 2 from every batch while the fault lasts) is not stored, and the SDK restarts the stream,
// restarts it again, reconnects — and reports the gap once, with the position it expected and the
// one it got. Once batches are whole again it stores everything.
func TestSDKReportsAGapOnce(t *testing.T) {
	srv, rec, alice := checkSetup(t, 1)
	var drop atomic.Bool
	proxy := prototest.NewProxy(t, srv.Addr().String(), srv.Fingerprint(), func(f proto.Frame) proto.Frame {
		if b, ok := f.(*proto.Batch); ok && drop.Load() {
			b.Entries = slices.DeleteFunc(b.Entries, func(e proto.Entry) bool { return e.Seq == 2 })
			if len(b.Entries) == 0 {
				return nil
			}
		}
		return f
	})
	bob := dialTo(t, srv, proxy.Addr(), proxy.Fingerprint(), "bob", "phone")
	nextEvent[SyncedEvent](t, bob, 10*time.Second)
	drop.Store(true)
	sendTo(alice, "m2")
	sendTo(alice, "m3")
	gaps := 0
	for gaps < 4 || proxy.Accepted() < 2 { // restarts, and a reconnect when they do not help
		if g := nextEvent[GapEvent](t, bob, 20*time.Second); g.At != 2 || g.Sub != 0 {
			t.Fatalf("%+v; want the gap at 2", g)
		}
		gaps++
	}
	drop.Store(false)
	testkit.WaitTrue(t, 20*time.Second, "bob to store entries 2 and 3", func() bool {
		r, err := bob.st.Run(0)
		return err == nil && r.Pos == 3
	})
	if g := serverMetric(t, srv, "syncd_client_gaps_total"); g != "1" {
		t.Fatalf("syncd_client_gaps_total %s after %d gaps of one incident; want 1", g, gaps)
	}
	if r := rec.reports(); !slices.Equal(r, []string{"kind=gap sub=0 from=2 to=3"}) {
		t.Fatalf("reports logged: %q", r)
	}
}

// TestCheckWindow: which range a check asks about — the newest window of the run after a resume,
// the next window of the walk with a head check (wrapping around at the cursor), never below the
// run or the first retained position, and a refetched range first, once the replay has reached
// its end.
func TestCheckWindow(t *testing.T) {
	var k checker
	run := store.Run{Epoch: 7, Pos: 2500, Base: 101}
	type win struct {
		from, to proto.Position
		ok       bool
	}
	at := func(mode checkMode) win {
		from, to, _, ok := k.window(0, run, mode)
		return win{from, to, ok}
	}
	for _, c := range []struct {
		name string
		got  win
		want win
	}{
		{"recent", at(checkRecent), win{1501, 2500, true}},
		{"walk from the run's start", at(checkWalk), win{101, 1100, true}},
	} {
		if c.got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, c.got, c.want)
		}
	}
	k.walk[0] = proto.SubCursor{Epoch: 7, Pos: 2001}
	if w := at(checkWalk); w != (win{2001, 2500, true}) {
		t.Errorf("walk on: %+v", w)
	}
	k.walk[0] = proto.SubCursor{Epoch: 7, Pos: 2501}
	if w := at(checkWalk); w != (win{101, 1100, true}) {
		t.Errorf("walk past the cursor wraps around: %+v", w)
	}
	k.walk[0] = proto.SubCursor{Epoch: 6, Pos: 2001}
	if w := at(checkWalk); w != (win{101, 1100, true}) {
		t.Errorf("walk of another epoch starts over: %+v", w)
	}
	k.first[0] = proto.SubCursor{Epoch: 7, Pos: 2000}
	if w := at(checkWalk); w != (win{2000, 2500, true}) {
		t.Errorf("walk above the first retained position: %+v", w)
	}
	k.first[0] = proto.SubCursor{Epoch: 7, Pos: 3000}
	if w := at(checkRecent); w.ok {
		t.Errorf("everything stored trimmed: %+v, want nothing to check", w)
	}
	k.first[0] = proto.SubCursor{}
	for name, r := range map[string]store.Run{
		"never synced":  {Base: 1},
		"rebased":       {Epoch: 7, Pos: 50, Base: 51},
		"epoch changed": {Epoch: 8, Pos: 0, Base: 1},
	} {
		if _, _, _, ok := k.window(0, r, checkRecent); ok {
			t.Errorf("%s: a window to check", name)
		}
	}

	// A Head tells where retention begins, for a split stream sub-log by sub-log.
	k.noteHead(&proto.Head{Epoch: 7, First: 1, Subs: []proto.SubHead{{Epoch: 7, First: 1}, {Epoch: 9, First: 40}}})
	if k.first[0] != (proto.SubCursor{Epoch: 7, Pos: 1}) || k.first[1] != (proto.SubCursor{Epoch: 9, Pos: 40}) {
		t.Errorf("first retained positions from a Head: %v", k.first[:2])
	}
	// The walk goes on for one sub-log per head check, in turn.
	var turns []uint32
	for range 4 {
		turns = append(turns, k.walkSub(3))
	}
	if turns = append(turns, k.walkSub(1)); !slices.Equal(turns, []uint32{0, 1, 2, 0, 0}) {
		t.Errorf("walk turns %v", turns)
	}

	// A refetched range goes first, once the cursor is back past it; one of another epoch is gone.
	k.repaired = []span{{sub: 0, epoch: 7, from: 300, to: 900}, {sub: 1, epoch: 7, from: 1, to: 5}}
	if from, to, again, ok := k.window(0, store.Run{Epoch: 7, Pos: 600, Base: 101}, checkRecent); ok || again == nil {
		t.Errorf("refetched range not reached yet: %d..%d %v %v", from, to, again, ok)
	}
	if from, to, again, ok := k.window(0, run, checkWalk); !ok || again == nil || from != 300 || to != 900 {
		t.Errorf("refetched range: %d..%d %v %v; want 300..900 again", from, to, again, ok)
	}
	if _, _, again, _ := k.window(0, store.Run{Epoch: 8, Pos: 2500, Base: 1}, checkRecent); again != nil ||
		!slices.Equal(k.repaired, []span{{sub: 1, epoch: 7, from: 1, to: 5}}) {
		t.Errorf("another epoch: again %v, repaired %v; want sub-log 0's range forgotten", again, k.repaired)
	}
}
