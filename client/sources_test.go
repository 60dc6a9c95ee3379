package client

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
)

// Sources (PROTOCOL §6 "Sources: large groups", revision 6): the sync loop's handling of a
// source's frames against a scripted server, then the SDK against a real one whose groups of more
// than three members are large.

// srcScript is a scripted server: the fake server of logger_test.go (it answers Hello with a
// Welcome for alice), whose sync streams the test plays by hand and whose requests answer
// answers. It follows the client across reconnects.
type srcScript struct {
	syncs chan *srcStream
}

// srcStream is one sync stream of the client: its SyncStart, and the CursorAcks read from it.
type srcStream struct {
	st    *quic.Stream
	start *proto.SyncStart
	acks  chan *proto.CursorAck
}

// startSrcScript starts a scripted server and a client of alice's phone connected to it. answer
// answers every request (a nil answer: an internal error, which the digest checks skip).
func startSrcScript(t *testing.T, answer func(proto.Request) proto.Frame) (*srcScript, *Client) {
	t.Helper()
	fake := startFakeServer(t)
	s := &srcScript{syncs: make(chan *srcStream, 16)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	serveStream := func(st *quic.Stream) {
		r := proto.NewReader(st, proto.DefaultMaxFrame)
		f, err := r.Next()
		if err != nil {
			return
		}
		if start, ok := f.(*proto.SyncStart); ok {
			ss := &srcStream{st: st, start: start, acks: make(chan *proto.CursorAck, 64)}
			select {
			case s.syncs <- ss:
			case <-ctx.Done():
				return
			}
			for {
				f, err := r.Next()
				if err != nil {
					return
				}
				if ack, ok := f.(*proto.CursorAck); ok {
					select {
					case ss.acks <- ack:
					case <-ctx.Done():
						return
					}
				}
			}
		}
		for ; err == nil; f, err = r.Next() { // the request stream
			req, ok := f.(proto.Request)
			if !ok {
				continue
			}
			ans := answer(req)
			if ans == nil {
				ans = &proto.Error{ID: req.RequestID(), Code: proto.CodeInternal, Message: "not scripted"}
			}
			if proto.WriteFrame(st, ans) != nil {
				return
			}
		}
	}
	wg.Go(func() {
		for {
			var q *quic.Conn
			select {
			case q = <-fake.conns:
			case <-ctx.Done():
				return
			}
			wg.Go(func() {
				for {
					st, err := q.AcceptStream(ctx)
					if err != nil {
						return
					}
					wg.Go(func() { serveStream(st) })
				}
			})
		}
	})
	c := dialWith(t, Config{Addr: fake.ln.Addr().String(), Token: "token", Device: "phone", Fingerprint: fake.fingerprint})
	return s, c
}

// next returns the client's next sync stream.
func (s *srcScript) next(t *testing.T) *srcStream {
	t.Helper()
	select {
	case ss := <-s.syncs:
		return ss
	case <-time.After(15 * time.Second):
		t.Fatal("no new sync stream within 15s")
		return nil
	}
}

// send writes frames on the stream.
func (ss *srcStream) send(t *testing.T, frames ...proto.Frame) {
	t.Helper()
	for _, f := range frames {
		if err := proto.WriteFrame(ss.st, f); err != nil {
			t.Fatalf("write %v: %v", f.FrameType(), err)
		}
	}
}

// ack returns the next CursorAck the client sent on the stream and checks it.
func (ss *srcStream) ack(t *testing.T, want proto.CursorAck) {
	t.Helper()
	select {
	case a := <-ss.acks:
		if *a != want {
			t.Fatalf("cursor ack %+v, want %+v", *a, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no cursor ack within 10s (want %+v)", want)
	}
}

// wantStart checks the stream's SyncStart: the user log's cursor and the sources named.
func (ss *srcStream) wantStart(t *testing.T, epoch proto.Epoch, pos proto.Position, sources ...proto.SourceCursor) {
	t.Helper()
	if s := ss.start; s.Epoch != epoch || s.Pos != pos || !slices.Equal(s.Sources, sources) {
		t.Fatalf("SyncStart (%d, %d) sources %+v; want (%d, %d) sources %+v", s.Epoch, s.Pos, s.Sources, epoch, pos, sources)
	}
}

// srcAwait reads c's events until done says it has seen what it waits for, failing the test after
// timeout; it returns the events read.
func srcAwait(t *testing.T, c *Client, timeout time.Duration, what string, done func(Event) bool) []Event {
	t.Helper()
	var seen []Event
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-c.Events():
			if !ok {
				t.Fatalf("events closed while waiting for %s", what)
			}
			seen = append(seen, ev)
			if done(ev) {
				return seen
			}
		case <-deadline:
			t.Fatalf("no %s within %v; saw %+v", what, timeout, seen)
		}
	}
}

// srcNone fails the test if c emits an event of type E within d.
func srcNone[E Event](t *testing.T, c *Client, d time.Duration) {
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

// is returns a predicate matching one event exactly.
func is(want Event) func(Event) bool {
	return func(ev Event) bool { return fmt.Sprint(ev) == fmt.Sprint(want) }
}

// msgAt builds a message of conversation conv at conv_seq seq, as a source's Batch carries it.
func msgAt(conv string, seq proto.Position, sender string) proto.Entry {
	return proto.Entry{Seq: seq, Kind: proto.KindMessage, MsgID: proto.MsgID(fmt.Sprintf("%s.%d", conv, seq)), Conv: conv,
		ConvSeq: seq, Sender: sender, Body: fmt.Appendf(nil, "%s %d", conv, seq)}
}

// follow builds alice's user-log entry at seq that starts (kind member_add) or ends
// (member_remove) her following of conv at convSeq.
func follow(seq proto.Position, kind proto.Kind, conv string, convSeq proto.Position) proto.Entry {
	return proto.Entry{Seq: seq, Kind: kind, MsgID: proto.MsgID(fmt.Sprintf("%s.%d", conv, convSeq)), Conv: conv,
		ConvSeq: convSeq, Sender: "owner", Members: []string{"alice"}, Source: true}
}

// TestSDKSyncsSources plays a sync stream with sources at the SDK: a source's batch is stored and
// acknowledged with its source, from the After of its first batch, and its entries come as
// EntryEvents naming it; SyncedEvent waits for the sources too; every restart names the stored
// source cursors; a gap (a hole, an After the user log does not justify, a SourceEnd beyond the
// cursor) restarts from them; an After beyond the cursor where the user log shows the user
// removed and added again is accepted; SourceEnd drops the cursor; Rebase of a source rebases it
// alone (ConvState, History); EpochChanged of a source resyncs it from the new log's first
// retained entry; heartbeats of a source are checked like a sub-log's.
func TestSDKSyncsSources(t *testing.T) {
	answer := func(req proto.Request) proto.Frame {
		switch r := req.(type) {
		case *proto.ConvState:
			if r.Conv != "big2" {
				return nil
			}
			return &proto.ConvStateResult{ID: r.ID, Conv: proto.ConvInfo{Conv: "big2", Kind: proto.ConvGroup, Epoch: 50,
				First: 1, Head: 500, Members: []string{"alice", "bob", "carol", "dave"}, MemberCount: 4, Role: proto.RoleMember, Source: true}}
		case *proto.History:
			res := &proto.HistoryResult{ID: r.ID, Epoch: 50, First: 1, Head: 500}
			if r.Conv == "big2" && r.Before == 0 {
				res.Entries = []proto.Entry{msgAt("big2", 499, "bob"), msgAt("big2", 500, "carol")}
			}
			return res
		}
		return nil
	}
	s, c := startSrcScript(t, answer)

	// Alice joins the large group big at conv_seq 4; its source follows from there.
	ss := s.next(t)
	ss.wantStart(t, 0, 0)
	ss.send(t, &proto.Batch{Epoch: 7, Head: 1, Entries: []proto.Entry{follow(1, proto.KindMemberAdd, "big", 4)}})
	ss.ack(t, proto.CursorAck{Epoch: 7, Pos: 1})
	ss.send(t, &proto.Batch{Source: "big", Epoch: 90, After: 4, Head: 7, Entries: []proto.Entry{msgAt("big", 5, "bob"), msgAt("big", 6, "carol")}})
	ss.ack(t, proto.CursorAck{Epoch: 90, Pos: 6, Source: "big"})
	var sources []string
	srcAwait(t, c, 10*time.Second, "the source's entries", func(ev Event) bool {
		if e, ok := ev.(EntryEvent); ok {
			sources = append(sources, fmt.Sprintf("%q@%d", e.Source, e.Entry.Seq))
		}
		return len(sources) == 3
	})
	if want := []string{`""@1`, `"big"@5`, `"big"@6`}; !slices.Equal(sources, want) {
		t.Fatalf("entry events %v, want %v", sources, want)
	}
	// The user log is at its head, the source is not: not synced yet.
	ss.send(t, &proto.Heartbeat{Epoch: 7, Head: 1})
	srcNone[SyncedEvent](t, c, 300*time.Millisecond)
	ss.send(t, &proto.Batch{Source: "big", Epoch: 90, Head: 7, Entries: []proto.Entry{msgAt("big", 7, "bob")}})
	ss.ack(t, proto.CursorAck{Epoch: 90, Pos: 7, Source: "big"})
	nextEvent[SyncedEvent](t, c, 10*time.Second)
	// A hole: nothing stored, the stream restarts from the stored cursors.
	ss.send(t, &proto.Batch{Source: "big", Epoch: 90, Head: 9, Entries: []proto.Entry{msgAt("big", 9, "bob")}})
	srcAwait(t, c, 10*time.Second, "the gap", is(GapEvent{At: 8, Source: "big"}))

	ss = s.next(t)
	ss.wantStart(t, 7, 1, proto.SourceCursor{Conv: "big", Epoch: 90, Pos: 7})
	ss.send(t, &proto.Batch{Source: "big", Epoch: 90, After: 7, Head: 8, Entries: []proto.Entry{msgAt("big", 8, "bob")}})
	ss.ack(t, proto.CursorAck{Epoch: 90, Pos: 8, Source: "big"})
	// Removed at 9, added again at 12: the source goes on after 12.
	ss.send(t, &proto.Batch{Epoch: 7, Head: 3, Entries: []proto.Entry{
		follow(2, proto.KindMemberRemove, "big", 9), follow(3, proto.KindMemberAdd, "big", 12)}})
	ss.ack(t, proto.CursorAck{Epoch: 7, Pos: 3})
	ss.send(t, &proto.Batch{Source: "big", Epoch: 90, After: 12, Head: 13, Entries: []proto.Entry{msgAt("big", 13, "bob")}})
	ss.ack(t, proto.CursorAck{Epoch: 90, Pos: 13, Source: "big"})
	// An After the user log does not show is a gap.
	ss.send(t, &proto.Batch{Source: "big", Epoch: 90, After: 20, Head: 21, Entries: []proto.Entry{msgAt("big", 21, "bob")}})
	srcAwait(t, c, 10*time.Second, "the gap", is(GapEvent{At: 14, Source: "big"}))

	// A SourceEnd beyond the cursor is a gap too; at the cursor, it ends the source.
	ss = s.next(t)
	ss.wantStart(t, 7, 3, proto.SourceCursor{Conv: "big", Epoch: 90, Pos: 13})
	ss.send(t, &proto.SourceEnd{Source: "big", Last: 14})
	srcAwait(t, c, 10*time.Second, "the gap", is(GapEvent{At: 14, Source: "big"}))
	ss = s.next(t)
	ss.wantStart(t, 7, 3, proto.SourceCursor{Conv: "big", Epoch: 90, Pos: 13})
	ss.send(t, &proto.Batch{Source: "big", Epoch: 90, After: 13, Head: 14, Entries: []proto.Entry{msgAt("big", 14, "bob")}},
		&proto.SourceEnd{Source: "big", Last: 14})
	ss.ack(t, proto.CursorAck{Epoch: 90, Pos: 14, Source: "big"})
	srcAwait(t, c, 10*time.Second, "the source's end", is(SourceEndEvent{Source: "big", Last: 14}))
	msgs, err := c.Messages("big")
	if err != nil || len(msgs) != 6 {
		t.Fatalf("messages of big = %+v, %v; want 5 to 8, 13 and 14", msgs, err)
	}

	// Another source, rebased alone past the ceiling.
	ss.send(t, &proto.Batch{Source: "big2", Epoch: 50, Head: 2, Entries: []proto.Entry{msgAt("big2", 1, "bob"), msgAt("big2", 2, "bob")}})
	ss.ack(t, proto.CursorAck{Epoch: 50, Pos: 2, Source: "big2"})
	ss.send(t, &proto.Rebase{Source: "big2", Epoch: 50, Head: 480})
	ev := srcAwait(t, c, 10*time.Second, "the source's rebase", func(ev Event) bool { _, ok := ev.(RebaseEvent); return ok })
	if got := ev[len(ev)-1].(RebaseEvent); got.Source != "big2" || got.Epoch != 50 || got.Head != 500 || !slices.Equal(got.Convs, []string{"big2"}) {
		t.Fatalf("rebase event %+v: want big2 alone, to ConvState's head 500", got)
	}
	msgs, err = c.Messages("big2")
	if err != nil || len(msgs) != 4 || msgs[2].ConvSeq != 499 || msgs[3].ConvSeq != 500 {
		t.Fatalf("messages of big2 after its rebase = %+v, %v; want 1, 2, 499, 500", msgs, err)
	}

	// Its log re-created: resynced from the first retained entry of the new epoch.
	ss = s.next(t)
	ss.wantStart(t, 7, 3, proto.SourceCursor{Conv: "big2", Epoch: 50, Pos: 500})
	ss.send(t, &proto.EpochChanged{Source: "big2", Epoch: 60, First: 10, Head: 20})
	srcAwait(t, c, 10*time.Second, "the source's epoch change", is(EpochEvent{Epoch: 60, Source: "big2"}))

	// Heartbeats of a source: a head the cursor never reaches restarts the stream as stalled,
	// one of another epoch restarts it too.
	ss = s.next(t)
	ss.wantStart(t, 7, 3, proto.SourceCursor{Conv: "big2", Epoch: 60, Pos: 9})
	for range stallIntervals + 1 {
		ss.send(t, &proto.Heartbeat{Source: "big2", Epoch: 60, Head: 30})
	}
	ss = s.next(t)
	ss.wantStart(t, 7, 3, proto.SourceCursor{Conv: "big2", Epoch: 60, Pos: 9})
	ss.send(t, &proto.Heartbeat{Source: "big2", Epoch: 61, Head: 9})
	ss = s.next(t) // two restarts without progress: a new connection
	ss.wantStart(t, 7, 3, proto.SourceCursor{Conv: "big2", Epoch: 60, Pos: 9})
	ss.send(t, &proto.Heartbeat{Epoch: 7, Head: 3}, &proto.Heartbeat{Source: "big2", Epoch: 60, Head: 9})
	nextEvent[SyncedEvent](t, c, 10*time.Second)
}

// srcRecorder drains a client's events into a list the test reads at leisure: with hundreds of
// entries the SDK must not wait for a test that reads one device at a time.
type srcRecorder struct {
	mu  sync.Mutex
	evs []Event
}

// record drains c's events until they close.
func record(c *Client) *srcRecorder {
	r := &srcRecorder{}
	go func() {
		for ev := range c.Events() {
			r.mu.Lock()
			r.evs = append(r.evs, ev)
			r.mu.Unlock()
		}
	}()
	return r
}

// events returns the events recorded so far.
func (r *srcRecorder) events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.evs)
}

// gaps returns the GapEvents recorded.
func (r *srcRecorder) gaps() []GapEvent {
	var out []GapEvent
	for _, ev := range r.events() {
		if g, ok := ev.(GapEvent); ok {
			out = append(out, g)
		}
	}
	return out
}

// await polls until ok holds, failing the test after timeout with what.
func await(t *testing.T, timeout time.Duration, what string, ok func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done, state := ok()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v (%s)", what, timeout, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// largeDevice is a device of a user in the end-to-end tests, its events recorded.
type largeDevice struct {
	name string
	user string
	cfg  Config
	c    *Client
	rec  *srcRecorder
}

// largeSetup starts a server whose groups of more than three members are large, and connects a
// device of each user named (user/device).
func largeSetup(t *testing.T, names ...string) (*syncd.Server, map[string]*largeDevice) {
	t.Helper()
	srv := syncdtest.Start(t, func(c *syncd.Config) {
		c.Shards = 2
		c.LargeGroupThreshold = 3
		c.SendRate, c.SendBurst = 1000, 1000
	})
	devs := map[string]*largeDevice{}
	for _, name := range names {
		user, device, _ := strings.Cut(name, "/")
		token, err := srv.MintToken(user, device, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		d := &largeDevice{name: name, user: user, cfg: Config{Addr: srv.Addr().String(), Token: token, Device: device,
			Fingerprint: srv.Fingerprint(), StoreDir: t.TempDir(), Logger: syncdtest.Logger(t)}}
		d.open(t)
		devs[name] = d
	}
	return srv, devs
}

// open (re)connects the device with its store, recording its events.
func (d *largeDevice) open(t *testing.T) {
	t.Helper()
	d.c = dialWith(t, d.cfg)
	d.rec = record(d.c)
}

// messages returns the device's messages of conv.
func (d *largeDevice) messages(t *testing.T, conv string) []Message {
	t.Helper()
	ms, err := d.c.Messages(conv)
	if err != nil {
		t.Fatalf("%s: messages: %v", d.name, err)
	}
	return ms
}

// awaitMessages waits until the device has n messages of conv.
func (d *largeDevice) awaitMessages(t *testing.T, conv string, n int, timeout time.Duration) []Message {
	t.Helper()
	var ms []Message
	await(t, timeout, d.name+" has every message", func() (bool, string) {
		ms = d.messages(t, conv)
		return len(ms) >= n, fmt.Sprintf("%d of %d", len(ms), n)
	})
	if len(ms) != n {
		t.Fatalf("%s: %d messages of %s, want %d", d.name, len(ms), conv, n)
	}
	return ms
}

// awaitSent waits until the device's queued mutation cmid is acknowledged and returns the ack.
func (d *largeDevice) awaitSent(t *testing.T, cmid string) *proto.Ack {
	t.Helper()
	var q Queued
	await(t, 20*time.Second, d.name+"'s mutation acknowledged", func() (bool, string) {
		var err error
		q, _, err = d.c.Lookup(cmid)
		if err != nil {
			t.Fatal(err)
		}
		return q.Status != StatusSending, fmt.Sprintf("%+v", q)
	})
	if q.Status == StatusFailed || q.Ack == nil {
		t.Fatalf("%s: %+v", d.name, q)
	}
	return q.Ack
}

// send queues n messages to conv from the device, one body each, and waits for their acks.
func (d *largeDevice) send(t *testing.T, conv, prefix string, n int) []*proto.Ack {
	t.Helper()
	var cmids []string
	for i := range n {
		cmid, err := d.c.Send(conv, "", fmt.Appendf(nil, "%s %s %d", prefix, d.name, i))
		if err != nil {
			t.Fatal(err)
		}
		cmids = append(cmids, cmid)
	}
	acks := make([]*proto.Ack, n)
	for i, cmid := range cmids {
		acks[i] = d.awaitSent(t, cmid)
	}
	return acks
}

// checkStored checks what the device stored of large group conv: its messages in conv_seq order,
// each once (by msg_id), every message entry it got from the source (EntryEvent.Source, seq =
// conv_seq) and once, no gap reported, and the source's entries stored contiguously up to its
// cursor from the first one stored.
func (d *largeDevice) checkStored(t *testing.T, conv string, ms []Message) {
	t.Helper()
	ids := map[proto.MsgID]bool{}
	for i, m := range ms {
		if i > 0 && m.ConvSeq <= ms[i-1].ConvSeq {
			t.Fatalf("%s: messages out of conv_seq order at %d: %d after %d", d.name, i, m.ConvSeq, ms[i-1].ConvSeq)
		}
		if ids[m.MsgID] {
			t.Fatalf("%s: message %s stored twice", d.name, m.MsgID)
		}
		ids[m.MsgID] = true
	}
	if g := d.rec.gaps(); len(g) > 0 {
		t.Fatalf("%s: gaps %+v", d.name, g)
	}
	got := map[proto.MsgID]int{}
	for _, ev := range d.rec.events() {
		e, ok := ev.(EntryEvent)
		if !ok || e.Entry.Conv != conv || e.Entry.Kind != proto.KindMessage {
			continue
		}
		if e.Source != conv || e.Entry.Seq != e.Entry.ConvSeq || e.Sub != 0 {
			t.Fatalf("%s: a message of the large group not from its source: %+v", d.name, e)
		}
		got[e.Entry.MsgID]++
	}
	for id, n := range got {
		if n != 1 || !ids[id] {
			t.Fatalf("%s: message %s came %d times (stored: %v)", d.name, id, n, ids[id])
		}
	}
	cur, ok, err := d.c.st.SourceCursor(conv)
	if err != nil || !ok {
		t.Fatalf("%s: no source cursor of %s (%v)", d.name, conv, err)
	}
	entries, err := d.c.st.SourceEntries(conv, 1, cur.Pos)
	if err != nil || len(entries) == 0 || entries[len(entries)-1].Seq != cur.Pos {
		t.Fatalf("%s: source entries %d, %v; want up to the cursor %d", d.name, len(entries), err, cur.Pos)
	}
	for i := 1; i < len(entries); i++ {
		if entries[i].Seq != entries[i-1].Seq+1 {
			t.Fatalf("%s: source entries jump from %d to %d", d.name, entries[i-1].Seq, entries[i].Seq)
		}
	}
}

// createLarge creates group conv from the device with members and waits for the ack.
func createLarge(t *testing.T, d *largeDevice, conv string, members ...string) {
	t.Helper()
	cmid, err := d.c.CreateGroup(conv, members)
	if err != nil {
		t.Fatal(err)
	}
	d.awaitSent(t, cmid)
}

// TestSDKLargeGroupEveryDeviceEveryMessage: in a group of five past the threshold, every device
// of every member — two devices for alice and bob — stores every message once, in conv_seq
// order, from the group's source, with no gap; a device offline during 200 messages catches up
// with no gap.
func TestSDKLargeGroupEveryDeviceEveryMessage(t *testing.T) {
	_, devs := largeSetup(t, "alice/phone", "alice/laptop", "bob/phone", "bob/laptop", "carol/phone", "dave/phone", "erin/phone")
	const conv = "big"
	createLarge(t, devs["alice/phone"], conv, "bob", "carol", "dave", "erin")
	var wg sync.WaitGroup
	for _, name := range []string{"alice/phone", "bob/phone", "carol/phone", "dave/phone"} {
		wg.Go(func() { devs[name].send(t, conv, "first", 5) })
	}
	wg.Wait()
	for _, d := range devs {
		d.checkStored(t, conv, d.awaitMessages(t, conv, 20, 20*time.Second))
	}

	// Bob's laptop is offline while 200 messages are sent.
	laptop := devs["bob/laptop"]
	if err := laptop.c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"alice/phone", "carol/phone", "dave/phone", "bob/phone"} {
		wg.Go(func() { devs[name].send(t, conv, "while away", 50) })
	}
	wg.Wait()
	want := devs["alice/phone"].awaitMessages(t, conv, 220, 30*time.Second)
	laptop.open(t)
	got := laptop.awaitMessages(t, conv, 220, 30*time.Second)
	laptop.checkStored(t, conv, got)
	// Caught up with its log and its source alike: SyncedEvent (which waits for the sources too).
	await(t, 20*time.Second, "bob's laptop synced", func() (bool, string) {
		return slices.ContainsFunc(laptop.rec.events(), func(ev Event) bool { _, ok := ev.(SyncedEvent); return ok }), ""
	})
	for i := range want {
		if got[i].MsgID != want[i].MsgID || got[i].ConvSeq != want[i].ConvSeq {
			t.Fatalf("bob's laptop message %d = %s@%d, alice's phone has %s@%d", i, got[i].MsgID, got[i].ConvSeq, want[i].MsgID, want[i].ConvSeq)
		}
	}
	for _, d := range devs {
		d.checkStored(t, conv, d.awaitMessages(t, conv, 220, 30*time.Second))
	}
}

// TestSDKLargeGroupRemovalAndReadd: a member removed from a large group gets its removal in its
// own log and then SourceEnd, and no message sent after it; added again, it gets the messages
// after its re-add only.
func TestSDKLargeGroupRemovalAndReadd(t *testing.T) {
	_, devs := largeSetup(t, "alice/phone", "bob/phone", "carol/phone", "dave/phone", "erin/phone")
	const conv = "big"
	alice, bob, erin := devs["alice/phone"], devs["bob/phone"], devs["erin/phone"]
	createLarge(t, alice, conv, "bob", "carol", "dave", "erin")
	alice.send(t, conv, "before", 3)
	erin.awaitMessages(t, conv, 3, 20*time.Second)

	cmid, err := alice.c.RemoveMembers(conv, []string{"erin"})
	if err != nil {
		t.Fatal(err)
	}
	removal := alice.awaitSent(t, cmid).ConvSeq
	// Both come, in either order: the gate holds a source's frames back until the log has
	// started the following they belong to, and SourceEnd belongs to the following that ends.
	var end *SourceEndEvent
	await(t, 20*time.Second, "erin's removal and SourceEnd", func() (bool, string) {
		removed := false
		end = nil
		for _, ev := range erin.rec.events() {
			switch e := ev.(type) {
			case EntryEvent:
				if e.Entry.Kind == proto.KindMemberRemove && e.Entry.ConvSeq == removal {
					if e.Source != "" || !e.Entry.Source {
						t.Fatalf("erin's removal %+v: want it in her own log, marked source", e)
					}
					removed = true
				}
			case SourceEndEvent:
				if end != nil {
					t.Fatalf("SourceEnd twice: %+v, %+v", *end, e)
				}
				end = &e
			}
		}
		return removed && end != nil, fmt.Sprintf("removed %v, source end %v", removed, end)
	})
	if end.Source != conv || end.Last != removal-1 {
		t.Fatalf("SourceEnd %+v, want %s up to %d", end, conv, removal-1)
	}
	if _, ok, err := erin.c.st.SourceCursor(conv); err != nil || ok {
		t.Fatalf("erin's source cursor after SourceEnd: %v, %v; want none", ok, err)
	}

	alice.send(t, conv, "while out", 3)
	bob.awaitMessages(t, conv, 6, 20*time.Second)
	time.Sleep(300 * time.Millisecond)
	if ms := erin.messages(t, conv); len(ms) != 3 {
		t.Fatalf("erin, removed, has %d messages, want the 3 before", len(ms))
	}

	cmid, err = alice.c.AddMembers(conv, []string{"erin"})
	if err != nil {
		t.Fatal(err)
	}
	readd := alice.awaitSent(t, cmid).ConvSeq
	alice.send(t, conv, "after", 2)
	ms := erin.awaitMessages(t, conv, 5, 20*time.Second)
	for _, m := range ms {
		if m.ConvSeq > removal && m.ConvSeq < readd {
			t.Fatalf("erin got %s@%d, sent while she was out (%d..%d)", m.Body, m.ConvSeq, removal, readd)
		}
	}
	if ms[3].ConvSeq <= readd {
		t.Fatalf("erin's messages after the re-add start at %d, not after %d", ms[3].ConvSeq, readd)
	}
	if g := erin.rec.gaps(); len(g) > 0 {
		t.Fatalf("erin: gaps %+v", g)
	}
	cur, ok, err := erin.c.st.SourceCursor(conv)
	if err != nil || !ok || cur.Pos < ms[4].ConvSeq {
		t.Fatalf("erin's source cursor after the re-add: %+v, %v, %v", cur, ok, err)
	}
	bob.checkStored(t, conv, bob.awaitMessages(t, conv, 8, 20*time.Second))
}

// TestSDKLargeGroupOwnReceipt: a receipt in a large group reaches the reader's other device —
// an entry of its user log with conv_seq 0, moving its read mark — and not the sender's log.
func TestSDKLargeGroupOwnReceipt(t *testing.T) {
	_, devs := largeSetup(t, "alice/phone", "bob/phone", "bob/laptop", "carol/phone", "dave/phone")
	const conv = "big"
	alice, phone, laptop := devs["alice/phone"], devs["bob/phone"], devs["bob/laptop"]
	createLarge(t, alice, conv, "bob", "carol", "dave")
	acks := alice.send(t, conv, "read me", 3)
	phone.awaitMessages(t, conv, 3, 20*time.Second)
	last := acks[2].ConvSeq
	cmid, err := phone.c.MarkRead(conv, last)
	if err != nil {
		t.Fatal(err)
	}
	phone.awaitSent(t, cmid)
	await(t, 20*time.Second, "bob's read mark on his laptop", func() (bool, string) {
		m, err := laptop.c.ReadMark(conv, "bob")
		if err != nil {
			t.Fatal(err)
		}
		return m == last, fmt.Sprintf("read mark %d, want %d", m, last)
	})
	var receipt *EntryEvent
	for _, ev := range laptop.rec.events() {
		if e, ok := ev.(EntryEvent); ok && e.Entry.Kind == proto.KindReceipt && e.Entry.Conv == conv {
			receipt = &e
		}
	}
	if receipt == nil || receipt.Source != "" || receipt.Entry.ConvSeq != 0 || receipt.Entry.UpTo != last || receipt.Entry.Sender != "bob" {
		t.Fatalf("bob's laptop got the receipt as %+v; want an entry of his log with conv_seq 0 up to %d", receipt, last)
	}
	// Alice's log gets nothing of it (it would reach every member of a large group).
	alice.send(t, conv, "later", 1)
	alice.awaitMessages(t, conv, 4, 20*time.Second)
	time.Sleep(300 * time.Millisecond)
	for _, ev := range alice.rec.events() {
		if e, ok := ev.(EntryEvent); ok && e.Entry.Kind == proto.KindReceipt {
			t.Fatalf("alice's log got a receipt: %+v", e)
		}
	}
	if m, err := alice.c.ReadMark(conv, "bob"); err != nil || m != 0 {
		t.Fatalf("alice knows bob's read mark %d (%v): no receipt entry should have reached her", m, err)
	}
}

// TestSDKRebaseOfTheLogMovesSources: a rebase of the user's log loads every conversation, and moves
// the cursor of each large group among them (ConvInfo.Source) to the head it loaded, since the log
// it jumps over may hold where the user's following of the group ended and started again; the
// next SyncStart names them. Other conversations get no source cursor.
func TestSDKRebaseOfTheLogMovesSources(t *testing.T) {
	answer := func(req proto.Request) proto.Frame {
		switch r := req.(type) {
		case *proto.ConvList:
			return &proto.ConvListResult{ID: r.ID, Convs: []proto.ConvInfo{
				{Conv: "big3", Kind: proto.ConvGroup, Epoch: 70, First: 1, Head: 40, MemberCount: 2000, Source: true},
				{Conv: "small", Kind: proto.ConvGroup, Epoch: 71, First: 1, Head: 5, Members: []string{"alice", "bob"}, MemberCount: 2},
			}}
		case *proto.History:
			res := &proto.HistoryResult{ID: r.ID, Epoch: 70, First: 1, Head: 40}
			if r.Conv == "big3" && r.Before == 0 {
				res.Entries = []proto.Entry{msgAt("big3", 40, "bob")}
			}
			return res
		}
		return nil
	}
	s, c := startSrcScript(t, answer)
	ss := s.next(t)
	ss.wantStart(t, 0, 0)
	ss.send(t, &proto.Rebase{Epoch: 7, Head: 100})
	ev := srcAwait(t, c, 10*time.Second, "the rebase", func(ev Event) bool { _, ok := ev.(RebaseEvent); return ok })
	if got := ev[len(ev)-1].(RebaseEvent); got.Source != "" || got.Head != 100 || !slices.Equal(got.Convs, []string{"big3", "small"}) {
		t.Fatalf("rebase event %+v", got)
	}
	ss = s.next(t)
	ss.wantStart(t, 7, 100, proto.SourceCursor{Conv: "big3", Epoch: 70, Pos: 40})
	// The source goes on from there.
	ss.send(t, &proto.Batch{Source: "big3", Epoch: 70, After: 40, Head: 41, Entries: []proto.Entry{msgAt("big3", 41, "carol")}})
	ss.ack(t, proto.CursorAck{Epoch: 70, Pos: 41, Source: "big3"})
	if msgs, err := c.Messages("big3"); err != nil || len(msgs) != 2 {
		t.Fatalf("messages of big3 = %+v, %v; want 40 and 41", msgs, err)
	}
}
