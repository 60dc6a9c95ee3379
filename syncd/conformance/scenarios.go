package conformance

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/proto"
)

// A scenario is one fault the kit injects, what it expects a correct client to do about it, and
// how it tells. Its hooks run with the run's lock held and must not block: what takes time (the
// kit writing messages, an operator action) runs in a goroutine of its own (run.later).
type scenario struct {
	name    string
	section string // the spec sections a correct client follows here
	summary string // what the kit does
	correct string // what a correct client does
	// waitingFor says, in a failed verdict, what the scenario was still waiting for when the run
	// ran out of time.
	waitingFor string

	seeds    int // messages written to the client's conversation before the run starts
	bodySize int // bytes of each seeded body (default a short text)
	suffix   bool
	tokenTTL time.Duration // of the run's first token (default an hour)
	// largeGroup makes the run's conversation a large group (of the client's user, the kit's
	// writer and two more), which the client reads from the group's own log as a source.
	largeGroup bool

	setup    func(k *Kit, r *run) error // after seeding, before the driver gets the run
	onClient func(r *run, st *relayStream, f proto.Frame) bool
	onServer func(r *run, st *relayStream, f proto.Frame) []proto.Frame
	onClosed func(r *run, c *relayConn, code proto.Code)
	verify   func(r *run) []string
}

// scenarioState is the scenarios' bookkeeping in a run (each uses what it needs).
type scenarioState struct {
	injected bool
	at       time.Time // when the fault was injected
	conn     int       // the connection it was injected on
	count    int
	epoch    proto.Epoch
	pos      proto.Position
	frame    []byte       // max_frame: the bytes of batch, exactly max_frame + 4
	batch    *proto.Batch // max_frame: positions 1-3 in one batch
	// restore and restore_behind: an EpochChanged with continues went to the client; the
	// messages the restore lost (msg_id → conv_seq), which a correct client replaces.
	continued bool
	lost      map[string]proto.Position
	reset     bool // request_reset: the request stream of the first History was abandoned
}

func (sc *scenario) client(r *run, st *relayStream, f proto.Frame) bool {
	if sc.onClient == nil {
		return true
	}
	return sc.onClient(r, st, f)
}

func (sc *scenario) server(r *run, st *relayStream, f proto.Frame) []proto.Frame {
	if sc.onServer == nil {
		return nil
	}
	return sc.onServer(r, st, f)
}

func (sc *scenario) closed(r *run, c *relayConn, code proto.Code) {
	if sc.onClosed != nil {
		sc.onClosed(r, c, code)
	}
}

func (sc *scenario) check(r *run) []string {
	if sc.verify == nil {
		return nil
	}
	return sc.verify(r)
}

// heartbeat is the kit server's heartbeat_ms: short, so silence scenarios take seconds.
const heartbeat = time.Second

// scenarios are the kit's scenarios, in the order a full pass runs them.
var scenarios = []*scenario{
	{
		name: "gap", section: "PROTOCOL §6 (Batch), §8.4 (Batch, steps 2-3)", seeds: 12,
		summary:    "removes the entry at position 5 from the first batch that carries it, so the batch skips a position",
		correct:    "stores nothing from the batch, acknowledges nothing past position 4, restarts the sync stream from its stored cursor and gets position 5 then",
		waitingFor: "every message, position 5 included (a client that skips the gap never gets it)",
		onServer: func(r *run, st *relayStream, f proto.Frame) []proto.Frame {
			b, ok := f.(*proto.Batch)
			i := seqIndex(b, 5)
			if !ok || st.role != roleSync || r.s.injected || i < 0 {
				return nil
			}
			r.s.injected = true
			c := *b
			c.Entries = slices.Delete(slices.Clone(b.Entries), i, i+1)
			if len(c.Entries) == 0 {
				return []proto.Frame{}
			}
			return []proto.Frame{&c}
		},
	},
	{
		name: "source_gap", section: "PROTOCOL §6 (Sources: large groups), §8.4 (Batch, steps 2-3)", seeds: 12, largeGroup: true,
		summary:    "makes the run's conversation a large group, read as a source, and removes the entry at conv_seq 5 from the first batch of the source that carries it",
		correct:    "stores nothing from the source's batch, acknowledges nothing of the source past 4, restarts the sync stream from its stored cursors and gets conv_seq 5 then",
		waitingFor: "every message of the group, conv_seq 5 included",
		onServer: func(r *run, st *relayStream, f proto.Frame) []proto.Frame {
			b, i := firstSourceBatchAt(r, st, f, 5)
			if i < 0 {
				return nil
			}
			r.s.injected = true
			c := *b
			c.Entries = slices.Delete(slices.Clone(b.Entries), i, i+1)
			if len(c.Entries) == 0 {
				return []proto.Frame{}
			}
			return []proto.Frame{&c}
		},
	},
	{
		name: "folded", section: "PROTOCOL §5 (Folded entries), §6 (Digest), §8.4 (Batch, step 4), §8.7", seeds: 6,
		summary:    "before the client connects, edits the first message twice, puts a reaction on it and takes it off, and marks the conversation read twice, so the client's log holds entries the server has folded (positions 7, 8 and 11)",
		correct:    "stores the folded entries at their positions without applying them, acknowledges past them, and, if it checks its log with Digest, finds it equal (a folded entry digests with its body_hash): no mismatch or gap reported",
		waitingFor: "a batch carrying a folded entry",
		setup:      func(k *Kit, r *run) error { return k.supersede7(r) },
		onServer: func(r *run, st *relayStream, f proto.Frame) []proto.Frame {
			b, ok := f.(*proto.Batch)
			if !ok || st.role != roleSync || r.s.count > 0 || !slices.ContainsFunc(b.Entries, func(e proto.Entry) bool { return e.Folded != 0 }) {
				return nil
			}
			// The run ends a while after the folded entries went out: time for the check
			// of the log a client makes once caught up (§8.7), whose answer it must accept.
			r.s.count = 1
			r.later(func(*Kit) error {
				time.Sleep(3 * heartbeat)
				r.mu.Lock()
				r.s.injected = true
				r.mu.Unlock()
				return nil
			})
			return nil
		},
		onClient: func(r *run, st *relayStream, f proto.Frame) bool {
			if rep, ok := f.(*proto.Report); ok {
				r.fail("the client reported %s over %d-%d: a folded entry is neither a gap nor a mismatch (its record digests with body_hash, §6 Digest)",
					rep.Kind, rep.From, rep.To)
			}
			return true
		},
		verify: func(r *run) []string {
			if r.acked < 12 {
				return []string{fmt.Sprintf("the client acknowledged its log up to %d, not past the folded entries (12)", r.acked)}
			}
			return nil
		},
	},
	{
		name: "source_after", section: "PROTOCOL §6 (Sources: where a source starts, after), §8.4 (Batch, steps 2-3)", seeds: 12, largeGroup: true,
		summary:    "makes the run's conversation a large group read as a source, and rewrites the first batch of the source that carries conv_seq 5 so that it starts at 5 with after 4, as if the positions before were not the user's",
		correct:    "accepts an after other than its cursor only where its log shows why (the entry that started the following at after, or a removal and re-addition); here it shows neither: a gap, so it stores nothing of that batch, restarts from its stored cursors and gets every message",
		waitingFor: "every message of the group, those before conv_seq 5 included",
		onServer: func(r *run, st *relayStream, f proto.Frame) []proto.Frame {
			b, i := firstSourceBatchAt(r, st, f, 5)
			if i <= 0 { // the batch must have entries before 5 to leave out
				return nil
			}
			r.s.injected, st.forged, st.realAfter = true, true, b.After
			c := *b
			c.Entries, c.After = slices.Clone(b.Entries[i:]), 4
			return []proto.Frame{&c}
		},
	},
	{
		name: "duplicate", section: "PROTOCOL §8.4 (Batch, steps 2-4)", seeds: 12,
		summary: "sends the first batch that carries position 5 and then its entries from position 5 on again, so the client gets those entries twice",
		correct: "stores each entry once: the repeated batch does not continue the cursor, so it is not stored (a restart from the stored cursor is fine); no message appears twice",
		onServer: func(r *run, st *relayStream, f proto.Frame) []proto.Frame {
			b, ok := f.(*proto.Batch)
			i := seqIndex(b, 5)
			if !ok || st.role != roleSync || r.s.injected || i < 0 {
				return nil
			}
			r.s.injected = true
			again := *b
			again.Entries = slices.Clone(b.Entries[i:])
			return []proto.Frame{f, &again}
		},
	},
	{
		name: "reorder", section: "PROTOCOL §8.4 (Batch, steps 2-3)", seeds: 12,
		summary: "swaps the entries at positions 4 and 5 in the first batch that carries both",
		correct: "stores nothing from the batch (its positions are not consecutive), restarts from its stored cursor, and ends with every message once, in order",
		onServer: func(r *run, st *relayStream, f proto.Frame) []proto.Frame {
			b, ok := f.(*proto.Batch)
			i, j := seqIndex(b, 4), seqIndex(b, 5)
			if !ok || st.role != roleSync || r.s.injected || i < 0 || j < 0 {
				return nil
			}
			r.s.injected = true
			c := *b
			c.Entries = slices.Clone(b.Entries)
			c.Entries[i], c.Entries[j] = c.Entries[j], c.Entries[i]
			return []proto.Frame{&c}
		},
	},
	tooOldScenario(false),
	tooOldScenario(true),
	{
		name: "epoch_change", section: "PROTOCOL §1 (epochs), §6 (EpochChanged), §8.4 (EpochChanged)", seeds: 6,
		summary:    "once the client has acknowledged position 6, resets the user's log as an operator would (syncctl reset-user: a new epoch, empty), then writes 4 messages",
		correct:    "on EpochChanged drops its cursor but keeps its messages, syncs the new epoch from first-1 (or 0), and ends with all 10 messages once",
		waitingFor: "a cursor ack of position 6, after which the kit resets the log and writes 4 messages",
		onClient: func(r *run, st *relayStream, f proto.Frame) bool {
			if a, ok := f.(*proto.CursorAck); ok && a.Pos >= 6 && !r.s.injected {
				r.s.injected = true
				r.later(func(k *Kit) error {
					epoch, err := k.resetUser(r.user)
					if err != nil {
						return err
					}
					r.mu.Lock()
					r.s.epoch = epoch
					r.mu.Unlock()
					return k.post(r, 4, 0)
				})
			}
			return true
		},
		verify: func(r *run) []string {
			for _, s := range r.starts {
				if s.epoch == r.s.epoch {
					return nil
				}
			}
			return []string{fmt.Sprintf("no sync stream of the new epoch %d: after EpochChanged a client syncs the new epoch (§8.4)", r.s.epoch)}
		},
	},
	restoreScenario(0),
	restoreScenario(2),
	{
		name: "stale_silence", section: "PROTOCOL §6 (Stale), §8.4 (Stale; no frame for 3 × heartbeat_ms)", seeds: 4,
		summary:    "once the client has acknowledged position 4, sends Stale instead of the next two heartbeats, then nothing at all on that sync stream, and writes a message",
		correct:    "keeps the stream while Stale comes, takes it for dead after 3 × heartbeat_ms without any frame, restarts it (or reconnects) and gets the message",
		waitingFor: "a cursor ack of position 4 and two heartbeats, after which the kit goes silent and writes a message",
		onServer: func(r *run, st *relayStream, f proto.Frame) []proto.Frame {
			h, ok := f.(*proto.Heartbeat)
			if !ok || st.role != roleSync || r.acked < 4 || r.s.injected {
				return nil
			}
			r.s.count++
			if r.s.count == 2 {
				r.s.injected, r.s.at, r.s.conn = true, time.Now(), st.c.n
				st.silent = true
				r.later(func(k *Kit) error { return k.post(r, 1, 0) })
			}
			return []proto.Frame{&proto.Stale{Epoch: h.Epoch, Head: h.Head, UnheardMs: uint64(3 * heartbeat / time.Millisecond)}}
		},
		verify: func(r *run) []string {
			return restartedWithin(r, 2*heartbeat, 3*heartbeat+3*time.Second, "after the last Stale, silence")
		},
	},
	{
		name: "superseded", section: "PROTOCOL §2 (one sync stream per device and node), §8.4 (Error superseded)", seeds: 4,
		summary:    "once the client has acknowledged position 4, opens a sync stream of the same device itself, so the server ends the client's stream with superseded",
		correct:    "stops syncing on that connection: opens no new sync stream on it (and does not fight the other instance in a loop)",
		waitingFor: "a cursor ack of position 4, then 3 × heartbeat_ms after the server superseded the client's stream",
		onClient: func(r *run, st *relayStream, f proto.Frame) bool {
			if a, ok := f.(*proto.CursorAck); ok && a.Pos >= 4 && !r.s.injected {
				r.s.injected = true
				epoch := a.Epoch
				r.later(func(k *Kit) error { return k.supersede(r, epoch) })
			}
			return true
		},
		onServer: func(r *run, st *relayStream, f proto.Frame) []proto.Frame {
			if e, ok := f.(*proto.Error); ok && e.Code == proto.CodeSuperseded && st.role == roleSync && r.s.at.IsZero() {
				r.s.at, r.s.conn = time.Now(), st.c.n
			}
			return nil
		},
		verify: func(r *run) []string {
			if r.s.at.IsZero() {
				return []string{"the server never superseded the client's stream (a kit problem, not the client's)"}
			}
			var why []string
			for _, s := range r.starts {
				if s.conn == r.s.conn && s.at.After(r.s.at) {
					why = append(why, fmt.Sprintf("opened another sync stream on connection %d %v after its stream was superseded (§8.4: stop syncing on this connection)",
						s.conn, s.at.Sub(r.s.at).Round(time.Millisecond)))
					break
				}
			}
			if n := connsAfter(r, r.s.at); n > 2 {
				why = append(why, fmt.Sprintf("opened %d connections within %v of being superseded: a client does not fight another instance of its device", n, 3*heartbeat))
			}
			return why
		},
	},
	{
		name: "max_frame", section: "PROTOCOL §3 (max_frame), §8.2 (Welcome limits)", seeds: 3, bodySize: 50000,
		summary:    "announces a max_frame (in Welcome) equal to the size of one batch of the three 50,000-byte messages, and sends them in that batch: a frame of exactly max_frame",
		correct:    "accepts a frame whose length is exactly max_frame (the limit is inclusive) and stores the three messages",
		waitingFor: "the client storing the batch of exactly max_frame bytes (a client whose reader refuses a frame at the limit never does)",
		setup: func(k *Kit, r *run) error {
			return k.frameAtLimit(r)
		},
		onServer: func(r *run, st *relayStream, f proto.Frame) []proto.Frame {
			switch f := f.(type) {
			case *proto.Welcome:
				w := *f
				w.Limits.MaxFrame = uint32(len(r.s.frame) - 4)
				return []proto.Frame{&w}
			case *proto.Batch:
				if st.role != roleSync || f.Entries[0].Seq > 3 {
					return nil
				}
				// The batch of exactly max_frame bytes stands for the server's batches of
				// positions 1-3 (however it cut them); only the one ending at 3 brings it.
				if f.Entries[len(f.Entries)-1].Seq < 3 {
					return []proto.Frame{}
				}
				r.s.injected = true
				return []proto.Frame{&rawBatch{f: r.s.frame, b: r.s.batch}}
			}
			return nil
		},
	},
	{
		name: "slow_stream", section: "PROTOCOL §8.4 (no frame for 3 × heartbeat_ms)", seeds: 6, bodySize: 16384,
		summary: "delivers the catch-up one entry per batch and every frame of the sync stream slowly, in pieces over 0.7 × heartbeat_ms: the 6 messages take longer than 3 × heartbeat_ms",
		correct: "keeps the stream (frames are arriving: the stream is not silent), stores every message, and neither restarts the stream nor reconnects",
		onServer: func(r *run, st *relayStream, f proto.Frame) []proto.Frame {
			if st.role != roleSync {
				return nil
			}
			st.pace = 7 * heartbeat / 10
			r.s.injected = true
			b, ok := f.(*proto.Batch)
			if !ok || len(b.Entries) == 1 {
				return nil
			}
			out := make([]proto.Frame, len(b.Entries)) // valid batches still: 1 to max_batch entries
			for i := range b.Entries {
				one := *b
				one.Entries = b.Entries[i : i+1]
				out[i] = &one
			}
			return out
		},
		verify: func(r *run) []string {
			if len(r.starts) > 1 || len(r.conns) > 1 {
				return []string{fmt.Sprintf("gave up on a slow stream: %d sync streams on %d connections for one catch-up", len(r.starts), len(r.conns))}
			}
			return nil
		},
	},
	{
		name: "retry_after", section: "PROTOCOL §2 (connection close reason), §8.3 step 4, §8.6", seeds: 2,
		summary:    "when the client sends its second message (of the 5 the driver sends), drops it and closes the connection as an overloaded server does: Error{overloaded, retry_after_ms: 3000} on the control stream, then the connection close carrying it",
		correct:    "reconnects no sooner than 3 s later (and not much later), resends what was not acknowledged with the same client_msg_id, and each of the 5 messages is stored once",
		waitingFor: "the client's second Send",
		onClient: func(r *run, st *relayStream, f proto.Frame) bool {
			if _, ok := f.(*proto.Send); !ok || r.s.injected {
				return true
			}
			if r.s.count++; r.s.count < 2 {
				return true
			}
			r.s.injected, r.s.at, r.s.conn = true, time.Now(), st.c.n
			e := &proto.Error{Code: proto.CodeOverloaded, Message: "conformance kit: closing with a retry-after", RetryAfterMs: uint32(retryAfter / time.Millisecond)}
			st.c.blackhole = true
			go st.c.closeWith(e)
			return false
		},
		verify: func(r *run) []string {
			d, ok := reconnected(r)
			switch {
			case !ok:
				return []string{"never reconnected after the close"}
			case d < retryAfter-100*time.Millisecond:
				return []string{fmt.Sprintf("reconnected %v after a close with retry_after_ms %d: never sooner (§8.6)", d.Round(time.Millisecond), retryAfter/time.Millisecond)}
			case d > retryAfter*3/2+2*time.Second:
				return []string{fmt.Sprintf("reconnected only %v after a close with retry_after_ms %d: the backoff of a first failure is far shorter (§8.6)", d.Round(time.Millisecond), retryAfter/time.Millisecond)}
			}
			return nil
		},
	},
	{
		name: "token_expiry", section: "PROTOCOL §2.2 (tokens), §8.2 steps 3-4", seeds: 2, tokenTTL: 4 * time.Second,
		summary:    "gives the client a token that expires 4 s after the run starts (fresh ones come from the run's token URL), and writes 2 messages 2 s after that",
		correct:    "refreshes the token before it expires (Refresh) or, when the server closes with token_expired, fetches a new one and reconnects; it never retries with the expired token in a loop, and gets the 2 messages",
		waitingFor: "the kit writing 2 messages 2 s after the first token's expiry",
		setup: func(k *Kit, r *run) error {
			expiry := r.firstExpiry()
			r.s.injected = true // the fault is the token's lifetime, in place from the start
			r.later(func(k *Kit) error {
				select {
				case <-time.After(time.Until(expiry) + 2*time.Second):
				case <-k.ctx.Done():
					return k.ctx.Err()
				}
				return k.post(r, 2, 0)
			})
			return nil
		},
		onClient: func(r *run, st *relayStream, f proto.Frame) bool {
			if h, ok := f.(*proto.Hello); ok {
				if exp, ok := r.tokens[h.Token]; ok && time.Now().After(exp) {
					r.s.count++
				}
			}
			return true
		},
		verify: func(r *run) []string {
			if r.s.count > 1 {
				return []string{fmt.Sprintf("said Hello %d times with an expired token: on token_expired a client obtains a new token before it reconnects (§8.2 step 3)", r.s.count)}
			}
			return nil
		},
	},
	{
		name: "unresponsive", section: "PROTOCOL §8.4 (silence), §8.5, §8.6", seeds: 4,
		summary:    "once the client has acknowledged position 4, stops answering on that connection altogether (no frame either way, on any stream, new ones included) and writes 2 messages",
		correct:    "notices (silence on the sync stream, an unanswered request), reconnects within seconds, and gets the 2 messages once",
		waitingFor: "a cursor ack of position 4, after which the connection goes dead",
		onClient: func(r *run, st *relayStream, f proto.Frame) bool {
			if a, ok := f.(*proto.CursorAck); ok && a.Pos >= 4 && !r.s.injected {
				r.s.injected, r.s.at, r.s.conn = true, time.Now(), st.c.n
				st.c.blackhole = true
				r.later(func(k *Kit) error { return k.post(r, 2, 0) })
				return false
			}
			return true
		},
		verify: func(r *run) []string {
			d, ok := reconnected(r)
			switch {
			case !ok:
				return []string{"never reconnected after its node stopped answering"}
			case d > 6*heartbeat+12*time.Second:
				return []string{fmt.Sprintf("reconnected only %v after its node stopped answering (§8.4: the stream is dead after 3 × heartbeat_ms of silence)", d.Round(time.Millisecond))}
			}
			return nil
		},
	},
}

// retryAfter is the retry_after_ms of the retry_after scenario's close.
const retryAfter = 3 * time.Second

// tooOldScenario is a run whose client first syncs a log retention has trimmed, and rebases
// (§8.4 TooOld). With reset the kit also abandons the request stream carrying the client's first
// History request, as a server does when its write to a client times out (§2: RESET_STREAM and
// STOP_SENDING with code timeout, no Error): the request gets no answer and must be sent again.
func tooOldScenario(reset bool) *scenario {
	sc := &scenario{
		name: "too_old", section: "PROTOCOL §6 (TooOld, a new device on a truncated log), §8.4 (TooOld)", seeds: 100, suffix: true,
		summary:    "has retention trim the client's log (100 entries, 64 kept) before the client first syncs from nothing, then writes 3 messages once the client syncs again",
		correct:    "rebases on TooOld: loads the conversation list and recent history, sets its cursor to the head TooOld named and syncs from there; it gets the 3 new messages once, and never loops on TooOld",
		waitingFor: "a SyncStart from the head TooOld named, after which the kit writes 3 messages",
	}
	if reset {
		sc.name, sc.section = "request_reset", "PROTOCOL §2 (a client reads what the server sends: an abandoned stream), §8.4 (TooOld)"
		sc.summary = "as too_old, and abandons the request stream that carries the client's first History request (RESET_STREAM and STOP_SENDING with code timeout, no Error, as a server whose write timed out): the request is never answered"
		sc.correct = "sends the unanswered History again on another stream (or restarts its rebase), completes the rebase, gets the 3 new messages once, and never loops on TooOld"
	}
	sc.setup = func(k *Kit, r *run) error { return k.waitTrimmed(r) }
	sc.onServer = func(r *run, st *relayStream, f proto.Frame) []proto.Frame {
		if t, ok := f.(*proto.TooOld); ok {
			r.s.count++
			r.s.epoch, r.s.pos = t.Epoch, t.Head
		}
		return nil
	}
	sc.onClient = func(r *run, st *relayStream, f proto.Frame) bool {
		if _, ok := f.(*proto.History); ok && reset && st.role == roleRequest && !r.s.reset {
			r.s.reset = true
			r.tracef("connection %d: abandons the request stream of the client's first History", st.c.n)
			st.down.CancelWrite(uint64(proto.CodeTimeout))
			st.down.CancelRead(uint64(proto.CodeTimeout))
			st.up.CancelWrite(0)
			st.up.CancelRead(0)
			return false
		}
		if s, ok := f.(*proto.SyncStart); ok && r.s.count > 0 && !r.s.injected && s.Epoch == r.s.epoch && s.Pos >= r.s.pos {
			r.s.injected = true
			r.later(func(k *Kit) error { return k.post(r, 3, 0) })
		}
		return true
	}
	sc.verify = func(r *run) []string {
		var why []string
		if r.s.count > 3 {
			why = append(why, fmt.Sprintf("synced %d times into TooOld: after TooOld a client rebases and syncs from the head it named (§8.4 TooOld)", r.s.count))
		}
		if reset && !r.s.reset {
			why = append(why, "the client sent no History while it rebased: a rebase loads recent history (§8.4 TooOld)")
		}
		return why
	}
	return sc
}

// restoreScenario is a run whose cluster is lost and restored from a backup (restore.go) taken
// when the client had acknowledged its whole log (6 seeded messages, and any receipt it wrote). With lost 0 the client's
// cursor is within what the backup holds, so the server tells it to continue (EpochChanged with
// continues); with lost messages more, written and acknowledged after the backup, its cursor is
// past it, and the server tells it to resync: the lost messages' conv_seqs are given to new ones.
func restoreScenario(lost int) *scenario {
	sc := &scenario{name: "restore", section: "PROTOCOL §1 (backups), §6 (EpochChanged, continues), §8.4 (EpochChanged)", seeds: 6}
	what := "a cursor ack of the log's head (6 messages and what the client appended), after which the kit backs up its server, loses and restores it, and writes 4 messages"
	sc.summary = "once the client has acknowledged its whole log (the 6 messages, and any receipt it wrote itself), backs up the server, loses it (closes the client's connection as a node shutting down does and refuses new ones until the restore is done), restores the backup into a new server where every log has a new epoch, and writes 4 messages there"
	sc.correct = "reconnects, and on EpochChanged with continues keeps its messages and sets its cursor to the new epoch at its stored position (a resync of the new epoch is also correct); ends with all 10 messages once"
	if lost > 0 {
		sc.name, sc.section = "restore_behind", "PROTOCOL §1 (backups), §6 (EpochChanged), §8.4 (EpochChanged: conv_seqs given to new messages)"
		what = fmt.Sprintf("a cursor ack of the log's head, then of the %d messages after the backup, after which the kit loses its server, restores the backup, and writes 4 messages", lost)
		sc.summary = fmt.Sprintf("once the client has acknowledged its whole log (the 6 messages, and any receipt it wrote itself), backs up the server, then writes %d messages and waits for the client to acknowledge them; loses the server and restores the backup, which does not hold them, into a new server where every log has a new epoch; writes 4 messages there, which take the lost messages' conv_seqs", lost)
		sc.correct = "reconnects, and on EpochChanged (no continues: its cursor is past what the backup holds) drops its cursor and syncs the new epoch from first-1 (or 0); replaces each lost message with the new one of its conv_seq; ends with the server's 10 messages once"
	}
	sc.waitingFor = what
	sc.onClient = func(r *run, st *relayStream, f proto.Frame) bool {
		if a, ok := f.(*proto.CursorAck); ok && a.Pos >= 6 && !r.s.injected {
			r.s.injected = true
			r.later(func(k *Kit) error { return k.loseAndRestore(r, lost) })
		}
		return true
	}
	sc.onServer = func(r *run, st *relayStream, f proto.Frame) []proto.Frame {
		if e, ok := f.(*proto.EpochChanged); ok && e.Sub == 0 && e.Source == "" {
			r.s.count++
			r.s.epoch = e.Epoch
			r.s.continued = r.s.continued || e.Continues
		}
		return nil
	}
	sc.verify = func(r *run) []string {
		var why []string
		switch {
		case r.s.count == 0:
			why = append(why, "the server never told the client its epoch changed: it did not resume from its stored cursor (§8.1)")
		case r.s.count > 3:
			why = append(why, fmt.Sprintf("synced %d times into EpochChanged: after it a client syncs the new epoch (§8.4 EpochChanged)", r.s.count))
		case lost == 0 && !r.s.continued:
			why = append(why, fmt.Sprintf("no EpochChanged with continues reached the client, though the backup holds its log up to %d, past all it had acknowledged: it did not resume from its stored cursor (§8.1)", r.s.pos))
		}
		if !slices.ContainsFunc(r.starts, func(s syncStart) bool { return s.epoch == r.s.epoch }) {
			why = append(why, fmt.Sprintf("no sync stream of the new epoch %d: after EpochChanged a client syncs the new epoch (§8.4)", r.s.epoch))
		}
		return why
	}
	return sc
}

// firstSourceBatchAt returns f as a source's Batch on a sync stream and the index of its entry at
// seq, until the run's fault is injected; -1 when f is not such a batch or lacks seq.
func firstSourceBatchAt(r *run, st *relayStream, f proto.Frame, seq proto.Position) (*proto.Batch, int) {
	b, ok := f.(*proto.Batch)
	if !ok || b.Source == "" || st.role != roleSync || r.s.injected {
		return nil, -1
	}
	return b, seqIndex(b, seq)
}

// seqIndex returns the index of the entry at position seq in b, or -1.
func seqIndex(b *proto.Batch, seq proto.Position) int {
	if b == nil {
		return -1
	}
	for i := range b.Entries {
		if b.Entries[i].Seq == seq {
			return i
		}
	}
	return -1
}

// restartedWithin checks that the first sync stream opened after the fault (on any connection)
// came between lo and hi after it.
func restartedWithin(r *run, lo, hi time.Duration, what string) []string {
	for _, s := range r.starts {
		if s.at.After(r.s.at) {
			d := s.at.Sub(r.s.at)
			switch {
			case d < lo:
				return []string{fmt.Sprintf("restarted the sync %v %s began: too eagerly (only no frame at all for 3 × heartbeat_ms = %v means dead)", d.Round(time.Millisecond), what, 3*heartbeat)}
			case d > hi:
				return []string{fmt.Sprintf("restarted the sync only %v %s began (3 × heartbeat_ms = %v)", d.Round(time.Millisecond), what, 3*heartbeat)}
			}
			return nil
		}
	}
	return []string{"never restarted the sync after " + what + " began"}
}

// reconnected returns how long after the fault the client's first later connection came, and
// whether one did.
func reconnected(r *run) (time.Duration, bool) {
	for _, c := range r.conns {
		if c.n > r.s.conn {
			return c.opened.Sub(r.s.at), true
		}
	}
	return 0, false
}

// connsAfter counts the connections opened within 3 × heartbeat after t.
func connsAfter(r *run, t time.Time) int {
	n := 0
	for _, c := range r.conns {
		if c.opened.After(t) && c.opened.Sub(t) < 3*heartbeat {
			n++
		}
	}
	return n
}

// rawBatch is a Batch the kit encoded in advance (max_frame), written as those exact bytes.
type rawBatch struct {
	f []byte
	b *proto.Batch
}

func (*rawBatch) FrameType() proto.Type { return proto.TypeBatch }

// scenarioByName finds a scenario.
func scenarioByName(name string) *scenario {
	for _, sc := range scenarios {
		if sc.name == name {
			return sc
		}
	}
	return nil
}

// scenarioNames lists the scenarios for an error message.
func scenarioNames() string {
	names := make([]string, len(scenarios))
	for i, sc := range scenarios {
		names[i] = sc.name
	}
	return strings.Join(names, ", ")
}
