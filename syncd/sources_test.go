package syncd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// follower reads one device's sync stream as a client of sources does: the user log's entries
// and each source's, each checked contiguous from its cursor (a source's from its batch's after
// where it has no cursor yet, or where the batch says it starts a later period).
type follower struct {
	t       *testing.T
	c       *prototest.Conn
	userPos proto.Position
	user    []proto.Entry
	pos     map[string]proto.Position // source → cursor
	epochs  map[string]proto.Epoch
	got     map[string][]proto.Entry  // source → entries
	ends    map[string]proto.Position // source → last of its SourceEnd
}

func newFollower(t *testing.T, c *prototest.Conn) *follower {
	return &follower{t: t, c: c, pos: map[string]proto.Position{}, epochs: map[string]proto.Epoch{},
		got: map[string][]proto.Entry{}, ends: map[string]proto.Position{}}
}

// start opens the sync stream from the follower's cursors.
func (f *follower) start() {
	s := &proto.SyncStart{Epoch: f.c.Epoch, Pos: f.userPos}
	for conv, pos := range f.pos {
		s.Sources = append(s.Sources, proto.SourceCursor{Conv: conv, Epoch: f.epochs[conv], Pos: pos})
	}
	f.c.StartSyncWith(s)
}

// until reads frames until done says so, failing the test on a gap or after a while.
func (f *follower) until(what string, done func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(prototest.Timeout)
	for !done() {
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out waiting for %s; user log %d entries, sources %v, ends %v", what, len(f.user), f.pos, f.ends)
		}
		f.c.Sync.SetReadDeadline(deadline)
		fr, err := f.c.SyncR.Next()
		if err != nil {
			f.t.Fatalf("sync, waiting for %s: %v", what, err)
		}
		switch b := fr.(type) {
		case *proto.Batch:
			if b.Source == "" {
				f.c.Epoch = b.Epoch
				for _, e := range b.Entries {
					if e.Seq != f.userPos+1 {
						f.t.Fatalf("user log: entry %d after %d", e.Seq, f.userPos)
					}
					f.userPos = e.Seq
					f.user = append(f.user, e)
				}
				continue
			}
			pos, known := f.pos[b.Source]
			switch {
			case !known && b.After == 0:
				f.t.Fatalf("source %s: a first batch without after", b.Source)
			case !known || b.After > pos:
				pos = b.After // a start, or a later period (the test checks where)
			case b.After != 0 && b.After != pos:
				f.t.Fatalf("source %s: batch after %d, cursor %d", b.Source, b.After, pos)
			}
			for _, e := range b.Entries {
				if e.Seq != pos+1 || e.ConvSeq != e.Seq || e.Conv != b.Source {
					f.t.Fatalf("source %s: entry %+v after %d", b.Source, e, pos)
				}
				pos = e.Seq
				f.got[b.Source] = append(f.got[b.Source], e)
			}
			f.pos[b.Source], f.epochs[b.Source] = pos, b.Epoch
			delete(f.ends, b.Source)
		case *proto.SourceEnd:
			if pos, ok := f.pos[b.Source]; ok && pos != b.Last {
				f.t.Fatalf("source %s ends at %d, cursor %d", b.Source, b.Last, pos)
			}
			f.ends[b.Source] = b.Last
			delete(f.pos, b.Source)
		case *proto.Error:
			f.t.Fatalf("sync, waiting for %s: %v", what, b)
		}
	}
}

func (f *follower) bodies(conv string) []string {
	var out []string
	for _, e := range f.got[conv] {
		if e.Kind == proto.KindMessage {
			out = append(out, string(e.Body))
		}
	}
	return out
}

// TestLargeGroupSources: past the threshold a group's messages reach its members' devices from
// the group's own log, one copy for all: every device of every member gets each message once, in
// order, pushed live; the membership entries that start and end a member's following are in its
// log, a removed member's source ends before its removal, and a member added again gets only
// what comes after; a receipt reaches the reader's other device from its own log.
func TestLargeGroupSources(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.LargeGroupThreshold = 3 })
	ann := connect(t, ts, "ann", "phone")
	phone, tablet := connect(t, ts, "bob", "phone"), connect(t, ts, "bob", "tablet")
	cat := connect(t, ts, "cat", "phone")
	ann.Ack(&proto.CreateGroup{ID: ann.ID(), Conv: "g", ClientMsgID: "c", Members: []string{"bob", "cat", "dan"}})
	devices := map[string]*follower{"ann": newFollower(t, ann), "phone": newFollower(t, phone), "tablet": newFollower(t, tablet), "cat": newFollower(t, cat)}
	for _, f := range devices {
		f.start()
	}
	send := func(from *prototest.Conn, body string) *proto.Ack {
		return from.Ack(&proto.Send{ID: from.ID(), Conv: "g", ClientMsgID: body, Body: []byte(body)})
	}
	for i := range 5 {
		send(ann, fmt.Sprint("m", i))
	}
	for name, f := range devices {
		f.until(name+": 5 messages", func() bool { return len(f.bodies("g")) == 5 })
		if len(f.user) != 1 || f.user[0].Kind != proto.KindGroupCreate || !f.user[0].Source {
			t.Errorf("%s's log: %+v, want the creation only, marked source", name, f.user)
		}
		if got := f.got["g"][0]; got.ConvSeq != 2 {
			t.Errorf("%s's first entry of the source: %+v, want conv_seq 2", name, got)
		}
	}

	// cat is removed: its source ends before the removal, which its own log brings.
	ann.Ack(&proto.RemoveMembers{ID: ann.ID(), Conv: "g", ClientMsgID: "rm", Members: []string{"cat"}}) // 7
	send(ann, "after-removal")                                                                          // 8
	fc := devices["cat"]
	fc.until("cat's removal", func() bool { _, ended := fc.ends["g"]; return ended && len(fc.user) == 2 })
	if fc.ends["g"] != 6 || fc.user[1].Kind != proto.KindMemberRemove || !fc.user[1].Source || fc.user[1].ConvSeq != 7 {
		t.Fatalf("cat's end: %v, log %+v", fc.ends, fc.user)
	}
	// Added again, cat gets what comes after the add, not what it missed.
	ann.Ack(&proto.AddMembers{ID: ann.ID(), Conv: "g", ClientMsgID: "add", Members: []string{"cat"}}) // 9
	send(ann, "welcome-back")                                                                         // 10
	fc.until("cat's messages after its add", func() bool { return len(fc.bodies("g")) == 6 })
	if b := fc.bodies("g"); b[5] != "welcome-back" || len(fc.user) != 3 || fc.user[2].ConvSeq != 9 {
		t.Fatalf("cat after its add: %v, log %+v", b, fc.user)
	}

	// Bob's other devices: every message once, with the membership changes of others, in order.
	fp := devices["phone"]
	fp.until("bob's phone: all", func() bool { return len(fp.bodies("g")) == 7 })
	want := []string{"m0", "m1", "m2", "m3", "m4", "after-removal", "welcome-back"}
	if got := fp.bodies("g"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("bob's phone: %v, want %v", got, want)
	}

	// cat's device acks the group's log: that is its delivered step, which the counts show.
	if err := proto.WriteFrame(cat.Sync, &proto.CursorAck{Epoch: fc.epochs["g"], Pos: 10, Source: "g"}); err != nil {
		t.Fatal(err)
	}
	counts := func() proto.ReceiptCount {
		r, ok := ann.Do(&proto.Receipts{ID: ann.ID(), Conv: "g", Seqs: []proto.Position{10}}).(*proto.ReceiptsResult)
		if !ok || len(r.Counts) != 1 {
			t.Fatalf("receipts: %#v", r)
		}
		return r.Counts[0]
	}
	testkit.Wait(t, 10*time.Second, "cat's ack to count as delivered", func() (bool, string) {
		c := counts()
		return c.Delivered == 1 && c.Members == 4 && c.Read == 0, fmt.Sprintf("%+v", c)
	})

	// A receipt in a large group reaches the reader's other device from its own log, not the
	// sender's, and has no conv_seq.
	ack := tablet.Ack(&proto.MarkRead{ID: tablet.ID(), Conv: "g", ClientMsgID: "r", UpTo: 10})
	if ack.ConvSeq != 0 {
		t.Errorf("the receipt's ack: %+v, want conv_seq 0", ack)
	}
	fp.until("bob's receipt on his phone", func() bool { return len(fp.user) == 2 })
	if r := fp.user[1]; r.Kind != proto.KindReceipt || r.ConvSeq != 0 || r.UpTo != 10 || r.Sender != "bob" {
		t.Errorf("the receipt in bob's log: %+v", r)
	}
	if c := counts(); c.Delivered != 2 || c.Read != 1 {
		t.Errorf("counts after bob's receipt: %+v, want 2 delivered, 1 read", c)
	}

	// Acks of a source: within what was sent, else refused.
	if err := proto.WriteFrame(phone.Sync, &proto.CursorAck{Epoch: fp.epochs["g"], Pos: 10, Source: "g"}); err != nil {
		t.Fatal(err)
	}
	if err := proto.WriteFrame(phone.Sync, &proto.CursorAck{Epoch: fp.epochs["g"], Pos: 11, Source: "g"}); err != nil {
		t.Fatal(err)
	}
	phone.Sync.SetReadDeadline(time.Now().Add(prototest.Timeout))
	for {
		fr, err := phone.SyncR.Next()
		if err != nil {
			t.Fatal(err)
		}
		if e, ok := fr.(*proto.Error); ok {
			if e.Code != proto.CodeInvalidArgument {
				t.Fatalf("an ack beyond what was sent: %v", e)
			}
			break
		}
	}

	// A device back from offline names its cursors: it gets what came after them, nothing twice.
	ft := devices["tablet"]
	ft.c.Sync.CancelRead(0)
	ft.c.Sync.Close()
	send(ann, "while-away-1")
	send(ann, "while-away-2")
	ft.pos["g"] -= 2 // as if it had stored two fewer
	ft.got["g"] = ft.got["g"][:len(ft.got["g"])-2]
	ft.start()
	ft.until("the tablet catching up", func() bool { return len(ft.bodies("g")) == 9 })
	if b := ft.bodies("g"); b[5] != "after-removal" || b[8] != "while-away-2" {
		t.Errorf("the tablet after catching up: %v", b)
	}
}

// TestLargeGroupOldClient: a client of a revision before sources, whose user follows a large
// group, is told needs_upgrade when it syncs: it would miss the group's entries.
func TestLargeGroupOldClient(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.LargeGroupThreshold = 3 })
	ann := connect(t, ts, "ann", "phone")
	ann.Ack(&proto.CreateGroup{ID: ann.ID(), Conv: "g", ClientMsgID: "c", Members: []string{"bob", "cat", "dan"}})
	conn := prototest.Dial(t, ts.Addr().String(), ts.Fingerprint())
	control, err := conn.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.WriteFrame(control, &proto.Hello{Token: mustToken(t, ts, "bob", "old"), Device: "old", ProtoVersion: 5}); err != nil {
		t.Fatal(err)
	}
	control.SetReadDeadline(time.Now().Add(prototest.Timeout))
	if f, err := proto.NewReader(control, proto.DefaultMaxFrame).Next(); err != nil {
		t.Fatal(err)
	} else if _, ok := f.(*proto.Welcome); !ok {
		t.Fatalf("hello: %#v", f)
	}
	st, err := conn.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.WriteFrame(st, &proto.SyncStart{Subs: []proto.SubCursor{{}}}); err != nil {
		t.Fatal(err)
	}
	st.SetReadDeadline(time.Now().Add(prototest.Timeout))
	r := proto.NewReader(st, proto.DefaultMaxFrame)
	for {
		f, err := r.Next()
		if err != nil {
			t.Fatalf("sync of an old client: %v, want needs_upgrade", err)
		}
		if e, ok := f.(*proto.Error); ok {
			if e.Code != proto.CodeNeedsUpgrade {
				t.Fatalf("sync of an old client: %v, want needs_upgrade", e)
			}
			return
		}
	}
}

// TestLargeGroupSourceAfterLeaving: once a member left, a device that names the group's source
// at its end is told SourceEnd at once; one that has the removal and does not name it hears
// nothing of the group; a new device syncing from nothing gets the member's whole period — the
// entry that started it, the group's entries while it was a member, the removal — and the
// source's end.
func TestLargeGroupSourceAfterLeaving(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.LargeGroupThreshold = 3 })
	ann := connect(t, ts, "ann", "phone")
	ann.Ack(&proto.CreateGroup{ID: ann.ID(), Conv: "g", ClientMsgID: "c", Members: []string{"bob", "cat", "dan"}})
	for i := range 3 {
		ann.Ack(&proto.Send{ID: ann.ID(), Conv: "g", ClientMsgID: fmt.Sprint("m", i), Body: []byte(fmt.Sprint("m", i))})
	}
	ann.Ack(&proto.RemoveMembers{ID: ann.ID(), Conv: "g", ClientMsgID: "rm", Members: []string{"cat"}}) // 5
	ann.Ack(&proto.Send{ID: ann.ID(), Conv: "g", ClientMsgID: "late", Body: []byte("late")})            // 6

	fresh := newFollower(t, connect(t, ts, "cat", "new"))
	fresh.start()
	fresh.until("the whole period", func() bool { _, ended := fresh.ends["g"]; return ended && len(fresh.user) == 2 })
	if got := fmt.Sprint(fresh.bodies("g")); got != "[m0 m1 m2]" || fresh.ends["g"] != 4 {
		t.Fatalf("a new device of cat: %s, end %v", got, fresh.ends)
	}

	named := newFollower(t, connect(t, ts, "cat", "named"))
	named.c.Epoch, named.userPos = fresh.c.Epoch, fresh.userPos
	named.pos["g"], named.epochs["g"] = 4, fresh.epochs["g"]
	named.start()
	named.until("SourceEnd of a source named at its end", func() bool { _, ended := named.ends["g"]; return ended })
	if len(named.got["g"]) != 0 || named.ends["g"] != 4 {
		t.Fatalf("a device naming the source at its end: %v, end %v", named.got, named.ends)
	}

	quiet := connect(t, ts, "cat", "quiet")
	quiet.StartSyncWith(&proto.SyncStart{Epoch: fresh.c.Epoch, Pos: fresh.userPos})
	if hb, ok := quiet.NextSync().(*proto.Heartbeat); !ok || hb.Source != "" { // caught up
		t.Fatalf("a device that dropped the source: %#v", hb)
	}
	quiet.Sync.SetReadDeadline(time.Now().Add(time.Second)) // and nothing of the group comes
	if f, err := quiet.SyncR.Next(); err == nil {
		t.Fatalf("a device that dropped the source got %#v", f)
	}
}

// TestLargeGroupOfflineCatchUp: a member's device offline while the group gets 10,000 messages
// (2,000 under the race detector) catches up from its source cursor with every one, once, in
// order, no gap — while the other members' logs got none of them.
func TestLargeGroupOfflineCatchUp(t *testing.T) {
	n := 10_000
	if raceEnabled {
		n = 2_000
	}
	ts := startServer(t, func(c *Config) { c.LargeGroupThreshold, c.SendRate, c.SendBurst = 3, 1e6, 1e6 })
	ann := connect(t, ts, "ann", "phone")
	ann.Ack(&proto.CreateGroup{ID: ann.ID(), Conv: "g", ClientMsgID: "c", Members: []string{"bob", "cat", "dan"}})
	bob := newFollower(t, connect(t, ts, "bob", "phone"))
	bob.start()
	ann.Ack(&proto.Send{ID: ann.ID(), Conv: "g", ClientMsgID: "first", Body: []byte("first")})
	bob.until("the first message", func() bool { return len(bob.bodies("g")) == 1 })
	bob.c.Sync.CancelRead(0)
	bob.c.Sync.Close()

	// ann sends n messages, pipelined in windows: bob is offline.
	const window = 256
	for sent := 0; sent < n; {
		k := min(window, n-sent)
		for i := range k {
			s := &proto.Send{ID: ann.ID(), Conv: "g", ClientMsgID: fmt.Sprint("m", sent+i), Body: []byte(fmt.Sprint("m", sent+i))}
			if err := proto.WriteFrame(ann.Req, s); err != nil {
				t.Fatal(err)
			}
		}
		for range k {
			ann.Req.SetReadDeadline(time.Now().Add(prototest.Timeout))
			f, err := ann.ReqR.Next()
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := f.(*proto.Ack); !ok {
				t.Fatalf("send: %#v", f)
			}
		}
		sent += k
	}

	bob.start() // from its cursors: the user log's and the source's
	bob.until("the catch-up", func() bool { return len(bob.bodies("g")) == n+1 })
	// Contiguous in conv_seq (the follower checks); each message once (pipelined sends are
	// served concurrently, so their order is the server's).
	seen := map[string]bool{}
	for _, b := range bob.bodies("g")[1:] {
		if seen[b] {
			t.Fatalf("%q twice", b)
		}
		seen[b] = true
	}
	for i := range n {
		if !seen[fmt.Sprint("m", i)] {
			t.Fatalf("m%d missing after the catch-up", i)
		}
	}
	if len(bob.user) != 1 {
		t.Errorf("bob's log holds %d entries, want the group's creation only", len(bob.user))
	}
}
