package syncd

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// Reconciliation digests and client reports through real QUIC (issue #23 §2): what a device
// computes over the entries it received equals what the server answers, ranges are clamped and
// paged, trimmed ranges and other epochs are refused with their codes, and reports move the
// counters and the log, within their bounds.

// emptyDigest is the digest of no entries, SHA-256 of nothing.
const emptyDigest = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// digestOf asks c's server for a Digest and fails the test unless it answers a DigestResult.
func digestOf(t *testing.T, c *prototest.Conn, q proto.Digest) *proto.DigestResult {
	t.Helper()
	q.ID = c.ID()
	res, ok := c.Do(&q).(*proto.DigestResult)
	if !ok {
		t.Fatalf("digest %+v: not a result", q)
	}
	if res.ID != q.ID || res.Epoch != q.Epoch || res.From != q.From || res.Count != uint64(res.To+1-res.From) || len(res.Digest) != proto.DigestLen {
		t.Fatalf("digest %+v: inconsistent result %+v", q, res)
	}
	return res
}

// wantDigest checks that res covers exactly [from, to] and that its digest is the client's
// digest of those of entries (entries[i] at position base+i).
func wantDigest(t *testing.T, res *proto.DigestResult, entries []proto.Entry, base, from, to proto.Position) {
	t.Helper()
	if res.From != from || res.To != to {
		t.Fatalf("digest covers %d..%d, want %d..%d", res.From, res.To, from, to)
	}
	want := proto.DigestOf(entries[from-base : to+1-base])
	if !bytes.Equal(res.Digest, want) {
		t.Fatalf("digest of %d..%d is %x, the client's %x", from, to, res.Digest, want)
	}
}

// TestDigestOfUserLog: the digest of a device's user log over any range equals the digest of the
// entries it received on its sync stream (messages, a receipt, a recall, a group's creation and
// change); a range past the head is clamped to it, one starting past the head covers nothing, a
// range of another epoch is refused with epoch_changed, a sub-log the user has not with
// invalid_argument. Any other device of the user gets the same answer.
func TestDigestOfUserLog(t *testing.T) {
	ts := startServer(t, nil)
	alice := connect(t, ts, "alice", "phone")
	bob := connect(t, ts, "bob", "laptop")
	first := alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "m1", Body: []byte("hello"), Peer: "bob"})
	alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "m2"}) // an empty body
	bob.Ack(&proto.MarkRead{ID: bob.ID(), Conv: "d:alice:bob", ClientMsgID: "r1", UpTo: 2})
	alice.Ack(&proto.Recall{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "x1", Target: first.MsgID})
	alice.Ack(&proto.CreateGroup{ID: alice.ID(), Conv: "team", ClientMsgID: "g", Members: []string{"bob"}})
	alice.Ack(&proto.SetRole{ID: alice.ID(), Conv: "team", ClientMsgID: "sr", Members: []string{"bob"}, Role: proto.RoleAdmin})
	alice.Ack(&proto.Send{ID: alice.ID(), Conv: "team", ClientMsgID: "t1", Body: bytes.Repeat([]byte{0, 0xff}, 3000)})
	alice.StartSync(0, 0)
	entries := alice.Entries(0, 7)
	epoch := alice.Epoch

	all := digestOf(t, alice, proto.Digest{Epoch: epoch, From: 1})
	wantDigest(t, all, entries, 1, 1, 7)
	if all.First != 1 || all.Head != 7 || all.Count != 7 {
		t.Fatalf("the whole log: %+v", all)
	}
	for _, r := range [][2]proto.Position{{1, 1}, {2, 4}, {7, 7}, {3, 7}} {
		wantDigest(t, digestOf(t, alice, proto.Digest{Epoch: epoch, From: r[0], To: r[1]}), entries, 1, r[0], r[1])
	}
	// Past the head: clamped to it, never beyond (the positions do not exist yet).
	wantDigest(t, digestOf(t, alice, proto.Digest{Epoch: epoch, From: 5, To: 1 << 62}), entries, 1, 5, 7)
	beyond := digestOf(t, alice, proto.Digest{Epoch: epoch, From: 8, To: 20})
	if beyond.To != 7 || beyond.Count != 0 || hex.EncodeToString(beyond.Digest) != emptyDigest || beyond.Head != 7 {
		t.Fatalf("a range past the head: %+v", beyond)
	}
	// A digest differs as soon as one entry does: the device's copy without the recall's target.
	if bytes.Equal(all.Digest, proto.DigestOf(entries[1:])) {
		t.Fatal("the digest does not depend on the entries")
	}
	tablet := connect(t, ts, "alice", "tablet")
	if again := digestOf(t, tablet, proto.Digest{Epoch: epoch, From: 1}); !bytes.Equal(again.Digest, all.Digest) {
		t.Fatal("another device of the user gets another digest")
	}

	e := alice.Do(&proto.Digest{ID: alice.ID(), Epoch: epoch + 1, From: 1}).(*proto.Error)
	if e.Code != proto.CodeEpochChanged || !strings.Contains(e.Message, fmt.Sprint(epoch)) {
		t.Fatalf("another epoch: %+v, want epoch_changed naming the log's", e)
	}
	carol := connect(t, ts, "carol", "phone") // no log yet: any epoch is another one
	carol.WantCode(&proto.Digest{ID: carol.ID(), Epoch: epoch, From: 1}, proto.CodeEpochChanged)
	alice.WantCode(&proto.Digest{ID: alice.ID(), Sub: 1, Epoch: epoch, From: 1}, proto.CodeInvalidArgument) // not split
	alice.WantCode(&proto.Digest{ID: alice.ID(), Epoch: epoch}, proto.CodeInvalidArgument)                  // from 0
	alice.WantCode(&proto.Digest{ID: alice.ID(), From: 1}, proto.CodeInvalidArgument)                       // no epoch
}

// TestDigestPagesByBytes: one answer reads about a page of entries (max_frame of stored bytes),
// so a device asking for a long range of large messages gets it in several answers, each
// covering a contiguous part of the range from where it asked, that add up to the whole.
func TestDigestPagesByBytes(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.Limits.MaxFrame = proto.MinFrameLimit })
	alice := connect(t, ts, "alice", "phone")
	const n = 12
	for i := range n {
		body := bytes.Repeat([]byte{byte(i)}, 40<<10)
		alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: fmt.Sprint("m", i), Body: body, Peer: "bob"})
	}
	alice.StartSync(0, 0)
	entries := alice.Entries(0, n)
	pages := 0
	for from := proto.Position(1); from <= n; pages++ {
		res := digestOf(t, alice, proto.Digest{Epoch: alice.Epoch, From: from})
		if res.Count == 0 || res.Count > 4 { // 128 KiB of stored bytes: three or four 40 KiB messages
			t.Fatalf("a page from %d covers %d entries", from, res.Count)
		}
		wantDigest(t, res, entries, 1, from, res.To)
		from = res.To + 1
	}
	if pages < 3 {
		t.Fatalf("%d entries of 40 KiB in %d digest pages", n, pages)
	}
	if got := digestCount(1, 0); got != proto.MaxPage {
		t.Fatalf("a digest to the head counts %d entries at most, want %d", got, proto.MaxPage)
	}
	for _, c := range []struct{ from, to, want int }{{1, 1, 1}, {1, 1000, 1000}, {1, 1001, 1000}, {5, 9, 5}, {1 << 40, 1<<40 + 2000, 1000}} {
		if got := digestCount(proto.Position(c.from), proto.Position(c.to)); got != c.want {
			t.Errorf("digestCount(%d, %d) = %d, want %d", c.from, c.to, got, c.want)
		}
	}
	if got := digestCount(1, 1<<64-1); got != proto.MaxPage {
		t.Errorf("digestCount(1, 2⁶⁴−1) = %d", got)
	}
}

// TestDigestOfConversation: a member's digest of a conversation's history, by conv_seq, equals
// the digest of the entries History returned; non-members and unknown conversations are refused
// as History refuses them; another epoch gets epoch_changed; a range of a trimmed history gets
// too_old (never a silently shorter range), and the retained part is served.
func TestDigestOfConversation(t *testing.T) {
	ts := startServer(t, nil)
	alice := connect(t, ts, "alice", "phone")
	carol := connect(t, ts, "carol", "phone")
	dave := connect(t, ts, "dave", "phone")
	alice.Ack(&proto.CreateGroup{ID: alice.ID(), Conv: "team", ClientMsgID: "g", Members: []string{"bob", "carol"}})
	for i := range 4 {
		alice.Ack(&proto.Send{ID: alice.ID(), Conv: "team", ClientMsgID: fmt.Sprint("t", i), Body: []byte(fmt.Sprint("m", i))})
	}
	carol.Ack(&proto.MarkRead{ID: carol.ID(), Conv: "team", ClientMsgID: "r", UpTo: 5})
	hist, ok := carol.Do(&proto.History{ID: carol.ID(), Conv: "team"}).(*proto.HistoryResult)
	if !ok || len(hist.Entries) != 6 {
		t.Fatalf("history: %#v", hist)
	}
	whole := digestOf(t, carol, proto.Digest{Conv: "team", Epoch: hist.Epoch, From: 1})
	wantDigest(t, whole, hist.Entries, 1, 1, 6)
	wantDigest(t, digestOf(t, carol, proto.Digest{Conv: "team", Epoch: hist.Epoch, From: 2, To: 4}), hist.Entries, 1, 2, 4)
	wantDigest(t, digestOf(t, alice, proto.Digest{Conv: "team", Epoch: hist.Epoch, From: 3, To: 99}), hist.Entries, 1, 3, 6)
	if past := digestOf(t, carol, proto.Digest{Conv: "team", Epoch: hist.Epoch, From: 7}); past.Count != 0 || past.Head != 6 {
		t.Fatalf("past the head: %+v", past)
	}
	dave.WantCode(&proto.Digest{ID: dave.ID(), Conv: "team", Epoch: hist.Epoch, From: 1}, proto.CodeNotMember)
	dave.WantCode(&proto.Digest{ID: dave.ID(), Conv: "nope", Epoch: hist.Epoch, From: 1}, proto.CodeNoConversation)
	carol.WantCode(&proto.Digest{ID: carol.ID(), Conv: "team", Epoch: hist.Epoch + 1, From: 1}, proto.CodeEpochChanged)

	// Retention trims the history to its last 2 entries.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	trim := raftstore.TrimCommand(&log.Trim{Target: log.TrimConvLog, ID: "team", Retention: log.Retention{MaxCount: 2}})
	if _, err := ts.node.Propose(ctx, ts.slots.ConvShard("team"), trim); err != nil {
		t.Fatal(err)
	}
	var e *proto.Error
	testkit.WaitTrue(t, 10*time.Second, "the trimmed range to be refused", func() bool {
		e, _ = carol.Do(&proto.Digest{ID: carol.ID(), Conv: "team", Epoch: hist.Epoch, From: 1}).(*proto.Error)
		return e != nil
	})
	if e.Code != proto.CodeTooOld || !strings.Contains(e.Message, "first retained position is 5") {
		t.Fatalf("a trimmed range: %+v, want too_old naming the first retained position 5", e)
	}
	carol.WantCode(&proto.Digest{ID: carol.ID(), Conv: "team", Epoch: hist.Epoch, From: 4, To: 6}, proto.CodeTooOld)
	kept := digestOf(t, carol, proto.Digest{Conv: "team", Epoch: hist.Epoch, From: 5})
	wantDigest(t, kept, hist.Entries, 1, 5, 6)
	if kept.First != 5 {
		t.Fatalf("after the trim: %+v", kept)
	}
}

// TestDigestOfTrimmedUserLog: a range of the user log below the first retained position is
// refused with too_old naming it; from there on it is served.
func TestDigestOfTrimmedUserLog(t *testing.T) {
	ts := startServer(t, func(c *Config) {
		c.Retention, c.RetentionInterval = log.Retention{MaxCount: 2}, 50*time.Millisecond
		c.QueryRate = 1000 // the test polls HeadCheck
	})
	alice, bob := connect(t, ts, "alice", "phone"), connect(t, ts, "bob", "phone")
	bob.StartSync(0, 0)
	for _, m := range []string{"m1", "m2", "m3", "m4", "m5"} {
		sendToBob(t, alice, "alice", m)
	}
	entries := bob.Entries(0, 5)
	testkit.WaitTrue(t, 10*time.Second, "retention to trim bob's log to 2 entries", func() bool {
		h, _ := bob.Do(&proto.HeadCheck{ID: bob.ID()}).(*proto.Head)
		return h != nil && h.First == 4
	})
	for _, from := range []proto.Position{1, 3} {
		e, ok := bob.Do(&proto.Digest{ID: bob.ID(), Epoch: bob.Epoch, From: from, To: 5}).(*proto.Error)
		if !ok || e.Code != proto.CodeTooOld || !strings.Contains(e.Message, "first retained position is 4") {
			t.Fatalf("from %d on a log trimmed to 4: %+v, want too_old naming 4", from, e)
		}
	}
	wantDigest(t, digestOf(t, bob, proto.Digest{Epoch: bob.Epoch, From: 4}), entries, 1, 4, 5)
}

// TestDigestIsAQuery: digests spend the device's query tokens like any query.
func TestDigestIsAQuery(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.QueryRate, c.QueryBurst = 0.1, 3 })
	alice := connect(t, ts, "alice", "phone")
	sendToBob(t, alice, "alice", "m1")
	for range 3 { // answered either way (epoch_changed here): each spends a token
		if e, ok := alice.Do(&proto.Digest{ID: alice.ID(), Epoch: 1, From: 1}).(*proto.Error); ok && e.Code == proto.CodeRateLimited {
			t.Fatalf("rate limited within the burst: %+v", e)
		}
	}
	e, ok := alice.Do(&proto.Digest{ID: alice.ID(), Epoch: 1, From: 1}).(*proto.Error)
	if !ok || e.Code != proto.CodeRateLimited || e.RetryAfterMs == 0 {
		t.Fatalf("a fourth query within a burst of 3: %+v, want rate_limited", e)
	}
	if requestCost(&proto.Digest{}, 1<<20) != pageAnswerCost(1<<20) {
		t.Fatal("a digest does not hold a page of the answer budgets while it reads")
	}
}

// logRecorder keeps the records of one level and up, for a test to count.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *logRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

// reports returns the lines logged for client reports: level and attributes.
func (r *logRecorder) reports() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.records {
		if !strings.Contains(rec.Message, "a client reports") {
			continue
		}
		line := rec.Level.String()
		rec.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
		out = append(out, line)
	}
	return out
}

// metricValue reads one series of ts's /metrics.
func metricValue(t *testing.T, ts *testServer, series string) string {
	t.Helper()
	return testkit.Metric(t, ts.AdminAddr().String(), series)
}

// TestClientReports: a Report on the control stream moves syncd_client_gaps_total or
// syncd_client_digest_mismatches_total and logs one line with the user and device (INFO for a
// gap, WARN for a mismatch); a device's reports beyond its burst are dropped (neither counted nor
// logged) while another device's are counted. A report that fails validation, a malformed one
// and one of an unknown type are answered and the session goes on; one beyond max_frame ends
// the session; a Report on a request stream is an unexpected frame there.
func TestClientReports(t *testing.T) {
	rec := &logRecorder{}
	ts := startServer(t, func(c *Config) { c.Logger = slog.New(rec) })
	alice := connect(t, ts, "alice", "phone")
	r := proto.NewReader(alice.Control, alice.MaxFrame())
	report := func(c *prototest.Conn, f proto.Frame) {
		t.Helper()
		if err := proto.WriteFrame(c.Control, f); err != nil {
			t.Fatal(err)
		}
	}
	// fence waits until the server has handled what was sent on the control stream before it:
	// the stream is read in order, and a refused report is answered.
	fence := func(c *prototest.Conn, r *proto.Reader) {
		t.Helper()
		report(c, &proto.Report{Kind: proto.ReportMismatch, From: 2, To: 1})
		if e, ok := controlNext(t, c, r).(*proto.Error); !ok || e.Code != proto.CodeInvalidArgument || e.ID != 0 {
			t.Fatalf("a mismatch of 2..1: %#v, want invalid_argument", e)
		}
	}
	began := time.Now()
	// refilled is how many tokens alice's report bucket may have regained since the test began:
	// none, unless the machine is so loaded that it took over six seconds.
	refilled := func() int { return int(time.Since(began).Minutes() * reportsPerMinute) }
	report(alice, &proto.Report{Kind: proto.ReportGap, Epoch: 7, From: 5, To: 9})
	report(alice, &proto.Report{Kind: proto.ReportMismatch, Conv: "team", Epoch: 3, From: 10, To: 19})
	fence(alice, r)
	if g, m := metricValue(t, ts, "syncd_client_gaps_total"), metricValue(t, ts, "syncd_client_digest_mismatches_total"); g != "1" || m != "1" {
		t.Fatalf("after a gap and a mismatch: gaps %s, mismatches %s", g, m)
	}
	lines := rec.reports()
	if len(lines) != 2 ||
		lines[0] != "INFO user=alice device=phone kind=gap sub=0 epoch=7 from=5 to=9" ||
		lines[1] != "WARN user=alice device=phone kind=mismatch conv=team epoch=3 from=10 to=19" {
		t.Fatalf("logged:\n%s", strings.Join(lines, "\n"))
	}

	// A device in a loop: its burst (the two above included) is counted and logged, the rest
	// dropped.
	for i := range 3 * reportBurst {
		report(alice, &proto.Report{Kind: proto.ReportGap, Epoch: 7, From: proto.Position(i + 1), To: 1})
	}
	fence(alice, r)
	gaps := metricValue(t, ts, "syncd_client_gaps_total")
	if g, _ := strconv.Atoi(gaps); g < reportBurst-1 || g > reportBurst-1+refilled() {
		t.Fatalf("after %d more gaps of one device: gaps %s, want its burst %d less the mismatch", 3*reportBurst, gaps, reportBurst)
	}
	if n := len(rec.reports()); n < reportBurst || n > reportBurst+refilled() {
		t.Fatalf("%d report lines logged, want the burst %d", n, reportBurst)
	}
	tablet := connect(t, ts, "alice", "tablet")
	report(tablet, &proto.Report{Kind: proto.ReportMismatch, Epoch: 7, From: 1, To: 1})
	fence(tablet, proto.NewReader(tablet.Control, tablet.MaxFrame()))
	if m := metricValue(t, ts, "syncd_client_digest_mismatches_total"); m != "2" {
		t.Fatalf("another device's mismatch: mismatches %s, want 2", m)
	}

	// Refused reports are answered; the session goes on.
	for name, f := range map[string]*proto.Report{
		"unknown kind":                   {Kind: 9, From: 1, To: 1},
		"from 0":                         {Kind: proto.ReportGap},
		"a conversation id of 200 bytes": {Kind: proto.ReportMismatch, Conv: strings.Repeat("c", 200), From: 1, To: 1},
		"a conversation's sub-log":       {Kind: proto.ReportGap, Conv: "team", Sub: 1, From: 1},
	} {
		report(alice, f)
		if e, ok := controlNext(t, alice, r).(*proto.Error); !ok || e.Code != proto.CodeInvalidArgument || e.ID != 0 {
			t.Fatalf("%s: %#v, want invalid_argument", name, e)
		}
	}
	for raw, code := range map[string]proto.Code{
		string([]byte{0, 0, 0, 4, 1, byte(proto.TypeReport), 0x81, 0xc1}): proto.CodeMalformed, // a reserved byte
		string([]byte{0, 0, 0, 3, 1, byte(proto.TypeReport), 0x90}):       proto.CodeMalformed, // an array, not a map
	} {
		alice.Control.Write([]byte(raw))
		if e, ok := controlNext(t, alice, r).(*proto.Error); !ok || e.Code != code {
			t.Fatalf("% x: %#v, want %v", raw, e, code)
		}
	}
	stillServed(t, alice)
	if g := metricValue(t, ts, "syncd_client_gaps_total"); g != gaps {
		t.Fatalf("refused reports were counted: gaps %s, %s before", g, gaps)
	}

	// A report on a request stream is not served there: the stream is reset.
	alice.WantCode(&proto.Report{Kind: proto.ReportGap, From: 1}, proto.CodeUnexpectedFrame)

	// A report frame beyond max_frame cannot be skipped: the session ends with frame_too_large.
	huge := make([]byte, 0, alice.MaxFrame()+16)
	huge = append(huge, 0, 0, 0, 0, 1, byte(proto.TypeReport))
	huge = append(huge, bytes.Repeat([]byte{0x80}, alice.MaxFrame())...)
	huge[0], huge[1], huge[2], huge[3] = byte((len(huge)-4)>>24), byte((len(huge)-4)>>16), byte((len(huge)-4)>>8), byte(len(huge)-4)
	alice.Control.Write(huge)
	if e := prototest.Closed(t, alice.QUIC); e.Code != proto.CodeFrameTooLarge {
		t.Fatalf("a report beyond max_frame: closed with %+v, want frame_too_large", e)
	}
	stillServed(t, tablet)
}

// TestReadConvForward: a forward read of a conversation made of backward pages (what a node
// hosting no replica of the conversation's shard reads through the call plane) starts exactly at
// the position asked, is contiguous, within the count, a prefix of the forward read's entries,
// and says too old, caught up and epoch changed as the forward read does — whatever byte budget
// cuts the backward pages short.
func TestReadConvForward(t *testing.T) {
	node := raftstoretest.OpenLocal(t, t.TempDir(), 1)
	defer node.Close()
	ctx := context.Background()
	const shard = raftstore.ShardID(1)
	propose := func(a *log.Append) {
		t.Helper()
		if _, err := node.Propose(ctx, shard, raftstore.AppendCommand(a)); err != nil {
			t.Fatal(err)
		}
	}
	propose(&log.Append{Conv: "g", Sender: "alice", ClientMsgID: "c", Kind: log.KindGroupCreate, Members: []string{"bob"}})
	sizes := []int{10, 3000, 50, 9000, 1, 4000, 200, 7000, 5, 600}
	for i, n := range sizes {
		propose(&log.Append{Conv: "g", Sender: "alice", ClientMsgID: fmt.Sprint("m", i), Kind: log.KindMessage, Body: bytes.Repeat([]byte{'x'}, n)})
	}
	head := log.Position(len(sizes) + 1)
	state, err := node.State(shard)
	if err != nil {
		t.Fatal(err)
	}
	info, err := state.ConvInfo("g")
	if err != nil {
		t.Fatal(err)
	}
	for from := log.Position(1); from <= head+1; from++ {
		for _, count := range []int{1, 3, 20} {
			for _, budget := range []int{1, 2000, 8000, 1 << 20} {
				lim := log.Limit{Count: count, Bytes: budget}
				pages := 0
				got, err := readConvForward(func(before log.Position, l log.Limit) (log.Read, error) {
					pages++
					return state.ReadConvBefore("g", before, l)
				}, info.Epoch, from, lim)
				want, err2 := state.ReadConv("g", info.Epoch, from, log.Limit{Count: count, Bytes: 1 << 30})
				if err != nil || err2 != nil {
					t.Fatalf("from %d count %d bytes %d: %v, %v", from, count, budget, err, err2)
				}
				if got.Status != want.Status || got.Info != want.Info {
					t.Fatalf("from %d: %v %+v, the forward read %v %+v", from, got.Status, got.Info, want.Status, want.Info)
				}
				if len(got.Entries) == 0 && want.Status == log.ReadEntries || len(got.Entries) > count || pages > count+1 {
					t.Fatalf("from %d count %d bytes %d: %d entries in %d pages", from, count, budget, len(got.Entries), pages)
				}
				for i, e := range got.Entries {
					if e.Seq != from+log.Position(i) || e.MsgID != want.Entries[i].MsgID {
						t.Fatalf("from %d count %d bytes %d: entry %d at %d (%v), the forward read's %v", from, count, budget, i, e.Seq, e.MsgID, want.Entries[i].MsgID)
					}
				}
			}
		}
	}
	backward := func(before log.Position, l log.Limit) (log.Read, error) { return state.ReadConvBefore("g", before, l) }
	if rd, err := readConvForward(backward, info.Epoch+1, 1, log.Limit{}); err != nil || rd.Status != log.ReadEpochChanged {
		t.Fatalf("another epoch: %v %v", rd.Status, err)
	}
	if _, err := readConvForward(backward, 0, 0, log.Limit{}); !errors.Is(err, log.ErrInvalid) {
		t.Fatalf("from 0: %v", err)
	}
	trim := raftstore.TrimCommand(&log.Trim{Target: log.TrimConvLog, ID: "g", Retention: log.Retention{MaxCount: 4}})
	if _, err := node.Propose(ctx, shard, trim); err != nil {
		t.Fatal(err)
	}
	for from, want := range map[log.Position]log.ReadStatus{1: log.ReadTooOld, head - 4: log.ReadTooOld, head - 3: log.ReadEntries, head + 1: log.ReadCaughtUp} {
		rd, err := readConvForward(backward, info.Epoch, from, log.Limit{Count: 2, Bytes: 1})
		if err != nil || rd.Status != want || rd.Info.First != head-3 {
			t.Fatalf("from %d after a trim to %d: %v %+v %v, want %v", from, head-3, rd.Status, rd.Info, err, want)
		}
	}
}
