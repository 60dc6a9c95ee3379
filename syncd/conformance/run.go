package conformance

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncd-dev/syncd/proto"
)

// A run is one client's attempt at one scenario: its own user (so runs never meet), the
// conversation the kit fills, what the relay saw of the client, and the verdict.
type run struct {
	id       string
	sc       *scenario
	k        *Kit
	user     string // the client's user
	device   string // the client's device
	other    string // the user who writes to the client
	conv     string // their direct conversation
	sends    []Send // what the driver is asked to send
	created  time.Time
	deadline time.Time

	mu       sync.Mutex
	tokens   map[string]time.Time // every token issued for this run → its expiry
	conns    []*relayConn
	failures []string // what the client did wrong, as the relay saw it
	acked    proto.Position
	ackEpoch proto.Epoch
	starts   []syncStart
	sent     map[string]bool // client_msg_ids of the driver's Sends the relay passed on
	verdict  *Verdict        // final once set
	s        scenarioState   // the scenario's own bookkeeping, under mu

	firstToken string
	pending    atomic.Int32 // the scenario's actions under way (run.later)
	printed    atomic.Bool  // the final verdict was printed

	writerMu, readerMu     sync.Mutex // each serializes one peer's requests
	writerPeer, readerPeer *peer

	// Of a restore scenario (restore.go), under upMu (not mu: judge holds mu while the kit reads
	// its server): the run's own server once the kit restored a backup into it; restoring while
	// the run's cluster is lost (the relay refuses the client); retired once own has stopped.
	upMu      sync.Mutex
	own       *ownServer
	restoring bool
	retired   bool
}

// syncStart is a SyncStart the relay saw.
type syncStart struct {
	at    time.Time
	conn  int
	epoch proto.Epoch
	pos   proto.Position
}

// fail records what the client did wrong; the run's verdict is failed from then on. Called with
// r.mu held.
func (r *run) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !slices.Contains(r.failures, msg) {
		r.failures = append(r.failures, msg)
	}
}

// tracef logs what the relay sees and does in the run, at Debug level: what a driver's author
// reads to understand a verdict (syncd -conformance -log-level debug).
func (r *run) tracef(format string, args ...any) {
	r.k.cfg.Logger.Debug(fmt.Sprintf(format, args...), "run", r.id, "scenario", r.sc.name)
}

// sectionOf is the spec section a generic check cites.
const (
	secBatch  = "PROTOCOL §8.4 (Batch, steps 1-5)"
	secCursor = "PROTOCOL §8.1, §8.4"
)

// onSyncStart checks a new sync stream's cursor: a client stores entries and cursor together and
// acknowledges only what it stored, so it never restarts below a position it acknowledged in the
// same epoch. Called with r.mu held.
func (r *run) onSyncStart(c *relayConn, s *proto.SyncStart) {
	r.starts = append(r.starts, syncStart{at: time.Now(), conn: c.n, epoch: s.Epoch, pos: s.Pos})
	r.tracef("connection %d: SyncStart from (%d, %d)", c.n, s.Epoch, s.Pos)
	if s.Epoch == r.ackEpoch && s.Epoch != 0 && s.Pos < r.acked {
		r.fail("a sync stream restarted from (%d, %d), below position %d it had acknowledged as stored (%s: the cursor is stored in the transaction of its entries)",
			s.Epoch, s.Pos, r.acked, secCursor)
	}
}

// onAck checks a CursorAck against what the stream delivered: a client may acknowledge only a
// log it stored contiguously from its SyncStart. Called with r.mu held.
func (r *run) onAck(st *relayStream, a *proto.CursorAck) {
	if a.Sub != 0 {
		return // the kit does not split users
	}
	if a.Source != "" {
		if acc := st.sources[a.Source]; acc == nil || a.Epoch == acc.epoch && a.Pos > acc.contig {
			r.fail("acknowledged position %d of source %s as stored, but the stream had delivered a contiguous log of it only up to %d: an entry was skipped or stored out of order (%s)",
				a.Pos, a.Source, acc.get(), secBatch)
		}
		return
	}
	if a.Epoch == st.epoch && a.Pos > st.contig {
		r.fail("acknowledged position %d as stored, but the stream had delivered a contiguous log only up to %d: an entry was skipped or stored out of order (%s)",
			a.Pos, st.contig, secBatch)
	}
	r.tracef("connection %d: CursorAck (%d, %d)", st.c.n, a.Epoch, a.Pos)
	if a.Epoch != r.ackEpoch || a.Pos > r.acked {
		r.ackEpoch, r.acked = a.Epoch, a.Pos
	}
}

// delivered accounts a Batch the relay wrote to the client on st. Called with r.mu held.
func (st *relayStream) delivered(b *proto.Batch) {
	if b.Source != "" {
		st.deliveredSource(b)
		return
	}
	if b.Sub != 0 || st.broken {
		return
	}
	if st.epoch == 0 && st.contig == 0 {
		st.epoch = b.Epoch
	}
	if b.Epoch != st.epoch || !b.Follows(st.contig) {
		st.broken = true // the client must not store it, nor anything after it on this stream
		return
	}
	st.contig = b.Entries[len(b.Entries)-1].Seq
}

// sourceAccount is the contiguous log of one source the relay has delivered on a sync stream:
// from the cursor the SyncStart named, or from where the server's first batch says it starts
// (after), which only the scenario source_after changes (relayStream.forged).
type sourceAccount struct {
	epoch  proto.Epoch
	contig proto.Position
	broken bool
}

func (a *sourceAccount) get() proto.Position {
	if a == nil {
		return 0
	}
	return a.contig
}

// deliveredSource accounts a Batch of a source. Called with r.mu held.
func (st *relayStream) deliveredSource(b *proto.Batch) {
	if st.sources == nil {
		st.sources = map[string]*sourceAccount{}
		for _, c := range st.start.Sources {
			st.sources[c.Conv] = &sourceAccount{epoch: c.Epoch, contig: c.Pos}
		}
	}
	after := b.After
	if st.forged {
		after = st.realAfter
	}
	acc := st.sources[b.Source]
	if acc == nil {
		acc = &sourceAccount{epoch: b.Epoch, contig: after}
		st.sources[b.Source] = acc
	}
	if st.forged {
		st.forged, acc.broken = false, true
		return
	}
	if b.After > acc.contig { // the server starts a later period of the user's: not a fault
		acc.contig = b.After
	}
	if acc.epoch == 0 && acc.contig == 0 {
		acc.epoch = b.Epoch
	}
	if acc.broken || b.Epoch != acc.epoch || !b.Follows(acc.contig) {
		acc.broken = true
		return
	}
	acc.contig = b.Entries[len(b.Entries)-1].Seq
}

// Report is what a driver tells the kit about its client's local store: every message it shows,
// per conversation, in the order the app would display them.
type Report struct {
	Conversations []ReportConv `json:"conversations"`
}

// ReportConv is one conversation of a Report.
type ReportConv struct {
	Conv     string          `json:"conv"`
	Messages []ReportMessage `json:"messages"`
}

// ReportMessage is one stored message: its server-assigned id and position in the conversation.
type ReportMessage struct {
	MsgID   string `json:"msg_id"`
	ConvSeq uint64 `json:"conv_seq"`
}

// Verdict is the kit's judgement of a run.
type Verdict struct {
	Run      string   `json:"run"`
	Scenario string   `json:"scenario"`
	Section  string   `json:"section"`
	Status   string   `json:"status"` // "pending", "passed" or "failed"
	Reasons  []string `json:"reasons,omitempty"`
}

// Verdict statuses.
const (
	Pending = "pending"
	Passed  = "passed"
	Failed  = "failed"
)

// judge compares a report with the server's conversation and the relay's observations and
// returns the verdict; a final verdict (passed or failed) is kept.
func (r *run) judge(rep *Report) *Verdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.verdict != nil {
		return r.verdict
	}
	v := &Verdict{Run: r.id, Scenario: r.sc.name, Section: r.sc.section, Status: Pending}
	if len(r.failures) > 0 {
		v.Status, v.Reasons = Failed, slices.Clone(r.failures)
		r.verdict = v
		return v
	}
	if rep == nil {
		return v
	}
	truth, err := r.k.history(r) // read afresh: the kit and the client may have written since
	if err != nil {
		v.Reasons = []string{"the kit could not read its server: " + err.Error()}
		return v
	}
	rep, stillLost := r.withoutLost(rep)
	missing, wrong := compare(rep, r.conv, truth, r.sc.suffix)
	missing = append(missing, stillLost...)
	missing = append(missing, r.unsent(truth)...)
	if len(r.failures) > 0 {
		v.Status, v.Reasons = Failed, slices.Clone(r.failures)
		r.verdict = v
		return v
	}
	late := time.Now().After(r.deadline)
	done := r.s.injected && r.pending.Load() == 0
	switch {
	case len(wrong) > 0:
		v.Status, v.Reasons = Failed, wrong
	case len(missing) > 0 || !done:
		if !late {
			v.Reasons = missing
			return v
		}
		v.Status = Failed
		v.Reasons = append([]string{fmt.Sprintf("the run did not complete within %v", r.deadline.Sub(r.created).Round(time.Second))}, missing...)
		if !done {
			v.Reasons = append(v.Reasons, "the scenario never reached its end: "+r.sc.waitingFor)
		}
	default:
		if why := r.sc.check(r); len(why) > 0 {
			v.Status, v.Reasons = Failed, why
		} else {
			v.Status = Passed
		}
	}
	r.verdict = v
	return v
}

// unsent lists the driver's sends the server does not hold (exactly once) yet, by body.
func (r *run) unsent(truth []proto.Entry) []string {
	var out []string
	for _, s := range r.sends {
		n := 0
		for _, e := range truth {
			if e.Kind == proto.KindMessage && e.Sender == r.user && string(e.Body) == s.Body {
				n++
			}
		}
		switch {
		case n == 0:
			out = append(out, fmt.Sprintf("the server does not hold the driver's message %q yet", s.Body))
		case n > 1:
			r.fail("the server holds the driver's message %q %d times: a resend must repeat its client_msg_id (§8.3)", s.Body, n)
		}
	}
	return out
}

// compare checks the report's copy of conv against the server's messages: wrong lists what can
// never become right (a message twice, out of order, unknown to the server), missing what may
// still arrive. With suffixOnly (after a rebase) the client need only hold the messages after
// the earliest one it holds: older history is loaded on demand (§8.4 TooOld).
func compare(rep *Report, conv string, truth []proto.Entry, suffixOnly bool) (missing, wrong []string) {
	var want []proto.Entry
	for _, e := range truth {
		if e.Kind == proto.KindMessage {
			want = append(want, e)
		}
	}
	var got []ReportMessage
	for _, c := range rep.Conversations {
		if c.Conv == conv {
			got = append(got, c.Messages...)
		}
	}
	index := map[string]int{}
	for i, e := range want {
		index[string(e.MsgID)] = i
	}
	seen := map[string]bool{}
	last, first := -1, len(want)
	for _, m := range got {
		i, ok := index[m.MsgID]
		switch {
		case seen[m.MsgID]:
			wrong = append(wrong, fmt.Sprintf("message %s (conv_seq %d) is stored twice (%s: dedup by msg_id)", m.MsgID, m.ConvSeq, secBatch))
		case !ok:
			wrong = append(wrong, fmt.Sprintf("message %s (conv_seq %d) is not a message of %s on the server", m.MsgID, m.ConvSeq, conv))
		case uint64(want[i].ConvSeq) != m.ConvSeq:
			wrong = append(wrong, fmt.Sprintf("message %s is at conv_seq %d, the server has it at %d", m.MsgID, m.ConvSeq, want[i].ConvSeq))
		case i < last:
			wrong = append(wrong, fmt.Sprintf("message %s (conv_seq %d) comes after conv_seq %d: out of order", m.MsgID, m.ConvSeq, want[last].ConvSeq))
		}
		seen[m.MsgID] = true
		if ok {
			last = max(last, i)
			first = min(first, i)
		}
	}
	from := 0
	if suffixOnly {
		from = min(first, len(want))
	}
	if len(wrong) > 3 {
		wrong = append(wrong[:3], fmt.Sprintf("and %d more such findings", len(wrong)-3))
	}
	var gone []string
	for _, e := range want[from:] {
		if !seen[string(e.MsgID)] {
			gone = append(gone, fmt.Sprintf("%d", e.ConvSeq))
		}
	}
	if len(gone) > 0 {
		missing = append(missing, fmt.Sprintf("%d of %d messages of %s not stored yet (conv_seq %s)", len(gone), len(want)-from, conv, abbreviate(gone)))
	}
	return missing, wrong
}

// abbreviate joins at most ten items.
func abbreviate(items []string) string {
	var b bytes.Buffer
	for i, s := range items {
		if i == 10 {
			fmt.Fprintf(&b, ", … (%d more)", len(items)-10)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(s)
	}
	return b.String()
}

// summary is one line of the kit's printed report.
func (v *Verdict) summary() string {
	line := fmt.Sprintf("%-7s %-16s %s", strings.ToUpper(v.Status), v.Scenario, v.Run)
	if len(v.Reasons) > 0 {
		line += ": " + strings.Join(v.Reasons, "; ") + " [" + v.Section + "]"
	}
	return line
}
