package syncd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// Every frame the server sends fits the max_frame its Welcome announced, however large the
// entries (issue #10: 16 messages of 64 KiB, or 120 of 10 KB, made a Batch of 1,050,063 bytes
// against a limit of 1,048,576, and the receiving device could never sync again). The raw
// client's readers apply the announced max_frame, so an oversize frame fails the read.

// body returns the i-th test body of n bytes: its index, then a filler that differs per body.
func body(i, n int) []byte {
	b := bytes.Repeat([]byte{byte(i)}, n)
	binary.BigEndian.PutUint32(b, uint32(i))
	return b
}

// sendAll sends the messages pipelined on c's request stream and checks each is acked.
func sendAll(t *testing.T, c *prototest.Conn, sends []*proto.Send) {
	t.Helper()
	errs := make(chan error, 1)
	go func() { // writes while the answers are read, so neither side's window can fill up
		for _, s := range sends {
			if err := proto.WriteFrame(c.Req, s); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	for range sends {
		c.Req.SetReadDeadline(time.Now().Add(prototest.Timeout))
		f, err := c.ReqR.Next()
		if err != nil {
			t.Fatalf("answers: %v", err)
		}
		if _, ok := f.(*proto.Ack); !ok {
			t.Fatalf("answer %#v, want an ack", f)
		}
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// waitHead waits until c's user log holds head entries.
func waitHead(t *testing.T, c *prototest.Conn, head proto.Position) {
	t.Helper()
	testkit.WaitTrue(t, 20*time.Second, fmt.Sprintf("the user log to reach %d", head), func() bool {
		h, ok := c.Do(&proto.HeadCheck{ID: c.ID()}).(*proto.Head)
		return ok && h.Head == head
	})
}

// frameLen returns the length field the server wrote for f: encoding is deterministic.
func frameLen(t *testing.T, f proto.Frame) int {
	t.Helper()
	b, err := proto.AppendFrame(nil, f)
	if err != nil {
		t.Fatal(err)
	}
	return len(b) - 4
}

// checkEntries checks that got are the n messages sent, each once and intact, at positions 1..n
// (pipelined sends may be applied in any order).
func checkEntries(t *testing.T, got []proto.Entry, n, size int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("%d entries, want %d", len(got), n)
	}
	seen := map[int]bool{}
	for i, e := range got {
		idx := -1
		if len(e.Body) >= 4 {
			idx = int(binary.BigEndian.Uint32(e.Body))
		}
		if e.Seq != proto.Position(i+1) || idx < 0 || idx >= n || seen[idx] || !bytes.Equal(e.Body, body(idx, size)) {
			t.Fatalf("entry %d: seq %d, a %d-byte body of message %d (seen before: %v)", i, e.Seq, len(e.Body), idx, seen[idx])
		}
		seen[idx] = true
	}
}

// TestServerFramesFitMaxFrame: large messages sync as several batches, each within max_frame,
// and a conversation's history pages back within it too, with nothing lost or repeated — at the
// default max_frame and at the protocol's smallest, where a full-size message fills a frame.
func TestServerFramesFitMaxFrame(t *testing.T) {
	cases := []struct {
		name     string
		maxFrame uint32 // 0: the default, 1 MiB
		n, size  int
	}{
		{"16 bodies of 64 KiB", 0, 16, proto.MaxBody},
		{"120 bodies of 10 KB", 0, 120, 10_000},
		{"full bodies at the smallest max_frame", proto.MinFrameLimit, 5, proto.MaxBody},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, func(c *Config) {
				c.Limits.MaxFrame = tc.maxFrame
				c.SendRate, c.SendBurst = 1000, 1000
			})
			alice := connect(t, ts, "alice", "phone")
			bob := connect(t, ts, "bob", "laptop")
			maxFrame := bob.MaxFrame()
			sends := make([]*proto.Send, tc.n)
			for i := range sends {
				sends[i] = &proto.Send{ID: uint64(i + 1), Conv: "d:alice:bob", ClientMsgID: fmt.Sprint("m", i), Body: body(i, tc.size), Peer: "bob"}
			}
			sendAll(t, alice, sends)
			waitHead(t, bob, proto.Position(tc.n)) // all stored: the sync replays them, no live pushes

			// The sync stream: several batches, each within max_frame.
			bob.StartSync(0, 0)
			var got []proto.Entry
			batches := 0
			for len(got) < tc.n {
				bob.Sync.SetReadDeadline(time.Now().Add(prototest.Timeout))
				f, err := bob.SyncR.Next() // fails on a frame beyond the announced max_frame
				if err != nil {
					t.Fatalf("sync after %d entries in %d batches: %v", len(got), batches, err)
				}
				b, ok := f.(*proto.Batch)
				if !ok {
					continue
				}
				if l := frameLen(t, b); l > maxFrame {
					t.Fatalf("batch of %d bytes, max_frame %d", l, maxFrame)
				}
				batches++
				got = append(got, b.Entries...)
			}
			checkEntries(t, got, tc.n, tc.size)
			if total := tc.n * tc.size; total > maxFrame && batches < 2 {
				t.Errorf("%d bytes of bodies in %d batch(es)", total, batches)
			}

			// History, paged back from the head: each page within max_frame, ending where asked.
			var hist []proto.Entry
			pages := 0
			for before := proto.Position(0); ; {
				r, ok := bob.Do(&proto.History{ID: bob.ID(), Conv: "d:alice:bob", Before: before}).(*proto.HistoryResult)
				if !ok {
					t.Fatalf("history before %d: %#v", before, r)
				}
				if len(r.Entries) == 0 {
					break
				}
				if l := frameLen(t, r); l > maxFrame {
					t.Fatalf("history page of %d bytes, max_frame %d", l, maxFrame)
				}
				if last := r.Entries[len(r.Entries)-1].Seq; (before == 0 && last != r.Head) || (before != 0 && last != before-1) {
					t.Fatalf("history page before %d ends at %d (head %d)", before, last, r.Head)
				}
				pages++
				hist = append(r.Entries, hist...)
				before = r.Entries[0].Seq
			}
			checkEntries(t, hist, tc.n, tc.size)
			if pages < 2 && tc.n*tc.size > maxFrame {
				t.Errorf("history in %d page(s)", pages)
			}
			t.Logf("%d entries: %d batches, %d history pages, max_frame %d", tc.n, batches, pages, maxFrame)
		})
	}
}

// TestServerConvListFitsMaxFrame: a user with more conversations than one frame can describe
// lists them in pages that each fit max_frame, every conversation once, in order.
func TestServerConvListFitsMaxFrame(t *testing.T) {
	ts := startServer(t, func(c *Config) {
		c.Limits.MaxFrame, c.Limits.MaxBatch = proto.MinFrameLimit, proto.MaxPage
		c.SendRate, c.SendBurst = 10000, 10000
	})
	alice := connect(t, ts, "alice", "phone")
	const n = 480 // of about 300 encoded bytes each: beyond one 128 KiB frame
	sends := make([]*proto.Send, n)
	for i := range sends {
		peer := fmt.Sprintf("p%03d%s", i, strings.Repeat("x", 116))
		sends[i] = &proto.Send{ID: uint64(i + 1), Conv: "d:alice:" + peer, ClientMsgID: fmt.Sprint("m", i), Body: []byte("hi"), Peer: peer}
	}
	sendAll(t, alice, sends)
	waitHead(t, alice, n)

	var convs []string
	pages := 0
	for after, more := "", true; more; pages++ {
		r, ok := alice.Do(&proto.ConvList{ID: alice.ID(), After: after}).(*proto.ConvListResult) // limit 0: max_batch, 1,000
		if !ok || len(r.Convs) == 0 {
			t.Fatalf("conversations after %q: %#v", after, r)
		}
		if l := frameLen(t, r); l > alice.MaxFrame() {
			t.Fatalf("page of %d bytes, max_frame %d", l, alice.MaxFrame())
		}
		for _, c := range r.Convs {
			convs = append(convs, c.Conv)
		}
		after, more = convs[len(convs)-1], r.More
	}
	if len(convs) != n || pages < 2 {
		t.Fatalf("%d conversations in %d pages, want %d in several", len(convs), pages, n)
	}
	for i, c := range convs {
		if c != sends[i].Conv {
			t.Fatalf("conversation %d is %s, want %s", i, c, sends[i].Conv)
		}
	}
}

// TestServerMaxBodyAnnounced: a server announcing a max_body below the protocol's refuses larger
// bodies with too_large, and accepts one of exactly max_body.
func TestServerMaxBodyAnnounced(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.Limits.MaxBody = 1000 })
	alice := connect(t, ts, "alice", "phone")
	if got := alice.Welcome.Limits.MaxBody; got != 1000 {
		t.Fatalf("welcome announces max_body %d", got)
	}
	alice.WantCode(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "big", Body: make([]byte, 1001), Peer: "bob"}, proto.CodeTooLarge)
	alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "ok", Body: make([]byte, 1000), Peer: "bob"})
}

// TestSessionSendNeverExceedsMaxFrame: the last line of defence. A frame beyond max_frame (a
// server bug: pages are packed to fit) is not written; the client gets an internal error for the
// same request instead, and the caller learns that its frame was not sent.
func TestSessionSendNeverExceedsMaxFrame(t *testing.T) {
	cfg := Config{Limits: proto.Limits{MaxFrame: proto.MinFrameLimit}}.withDefaults()
	ss := &session{s: &Server{cfg: cfg, logger: slog.New(slog.NewTextHandler(testLog{t}, nil))}, user: "alice", device: "phone"}
	big := &proto.HistoryResult{ID: 7, Entries: []proto.Entry{{Seq: 1, Body: make([]byte, proto.MaxBody)}, {Seq: 2, Body: make([]byte, proto.MaxBody)}}}
	var w bytes.Buffer
	if err := ss.send(&w, big); !errors.Is(err, proto.ErrFrameTooLarge) {
		t.Fatalf("send of an oversize page: %v, want ErrFrameTooLarge", err)
	}
	f, err := proto.NewReader(&w, proto.MinFrameLimit).Next()
	if e, ok := f.(*proto.Error); err != nil || !ok || e.ID != 7 || e.Code != proto.CodeInternal || w.Len() != 0 {
		t.Fatalf("written instead: %#v, %v (%d bytes left); want only an internal error for request 7", f, err, w.Len())
	}
	if err := ss.send(&w, &proto.HistoryResult{ID: 8, Entries: big.Entries[:1]}); err != nil || w.Len() == 0 {
		t.Fatalf("a page that fits: %v, %d bytes written", err, w.Len())
	}
}

// userLog delivers n entries of every kind to user "u" of a real shard without Raft: message
// bodies from empty to several KB, receipts, recalls, membership entries with and without their
// member list.
func userLog(t *testing.T, n int) (*log.Shard, log.LogInfo) {
	return fillUserLog(t, n, func(pos uint64) log.Kind { return log.Kind(pos%7 + 1) }, func(pos uint64) int { return int(pos * pos % 5000) })
}

// fillUserLog delivers n entries to user "u", of kind kind(pos) and, for messages, bodies of
// size(pos) bytes.
func fillUserLog(t testing.TB, n int, kind func(pos uint64) log.Kind, size func(pos uint64) int) (*log.Shard, log.LogInfo) {
	t.Helper()
	node := raftstoretest.OpenLocal(t, t.TempDir(), 1)
	t.Cleanup(func() { node.Close() })
	d := &log.DeliveryBatch{Source: 2, Prev: 0, Last: uint64(n)}
	for pos := uint64(1); pos <= uint64(n); pos++ {
		e := log.Entry{Kind: kind(pos), MsgID: log.MsgID{Shard: 2, Index: pos, Sub: uint32(pos % 2)},
			Conv: fmt.Sprintf("g%d", pos%3), ConvSeq: log.Position(pos), Sender: fmt.Sprintf("s%d", pos%5), Time: int64(pos) << 40}
		switch e.Kind {
		case log.KindMessage:
			e.Body = body(int(pos), size(pos))
		case log.KindReceipt:
			e.ReadUpTo = log.Position(pos - 1)
		case log.KindRecall:
			e.Target = log.MsgID{Shard: 2, Index: pos - 2}
		case log.KindRoleChange:
			e.Members, e.Role = []string{fmt.Sprintf("m%d", pos), "u"}, log.RoleAdmin
		default:
			if pos%2 == 0 {
				e.Members = []string{fmt.Sprintf("m%d", pos), "u"}
			} else {
				e.MemberCount = 40
			}
		}
		d.Items = append(d.Items, log.Delivery{Pos: pos, Users: []string{"u"}, Entry: e})
	}
	if _, err := node.Propose(context.Background(), 1, raftstore.DeliverCommand(d)); err != nil {
		t.Fatal(err)
	}
	st, err := node.State(1)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.UserInfo("u")
	if err != nil || info.Head != log.Position(n) {
		t.Fatalf("setup: %+v %v", info, err)
	}
	return st, info
}

// readOnly hides a replica's ScanUser: the path of a remote replica's answer (syncBatch.take).
type readOnly struct{ userLogReader }

// TestSyncBatchFramesAsBefore: a sync stream's batches, encoded entry by entry into a buffer kept
// from batch to batch (syncBatch), are byte for byte the frames the server sent before it had
// one — ReadUser, each entry converted and measured (EncodedLen) while the sum fits the room,
// then AppendFrame — through a local replica (scanned) and through an answer read whole (a
// remote replica's), batch after batch with a room of a few entries, so every batch leaves
// entries for the next and reuses a buffer that held larger ones; and after release.
func TestSyncBatchFramesAsBefore(t *testing.T) {
	st, info := userLog(t, 300)
	room := 6_000 // some batches are cut by the room, some by the count
	lim := log.Limit{Count: 20, Bytes: room}
	for _, rd := range []userLogReader{st, readOnly{st}} {
		var sb syncBatch
		batches := 0
		for pos := log.Position(0); pos < info.Head; batches++ {
			if batches%7 == 6 {
				sb.release() // as when the stream catches up in between
			}
			res, err := sb.readInto(rd, "u", info.Epoch, pos+1, lim, room)
			if err != nil || res.Status != log.ReadEntries || res.Entries != nil {
				t.Fatalf("read from %d: %v, %v (%d entries left in the answer)", pos+1, res.Status, err, len(res.Entries))
			}
			got := sb.frame(res.Info.Epoch, res.Info.Head, 0)

			old, err := st.ReadUser("u", info.Epoch, pos+1, lim)
			if err != nil {
				t.Fatal(err)
			}
			b := &proto.Batch{Epoch: proto.Epoch(old.Info.Epoch), Head: proto.Position(old.Info.Head)}
			used := 0
			for i := range old.Entries {
				e := wireEntry(&old.Entries[i])
				if used += e.EncodedLen(); used > room && len(b.Entries) > 0 {
					break
				}
				b.Entries = append(b.Entries, e)
			}
			if want := mustAppendFrame(t, b); !bytes.Equal(got, want) {
				t.Fatalf("%T: batch from %d: %d bytes, the old path's %d entries in %d bytes differ", rd, pos+1, len(got), len(b.Entries), len(want))
			}
			if sb.last != log.Position(b.Entries[len(b.Entries)-1].Seq) || len(sb.times) != len(b.Entries) {
				t.Fatalf("batch from %d: last %d, %d times; want %d, %d", pos+1, sb.last, len(sb.times), b.Entries[len(b.Entries)-1].Seq, len(b.Entries))
			}
			pos = sb.last
		}
		if batches < 20 {
			t.Fatalf("%T: %d batches: the room did not cut them", rd, batches)
		}
	}
}

func mustAppendFrame(t *testing.T, f proto.Frame) []byte {
	t.Helper()
	b, err := proto.AppendFrame(nil, f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSessionSendEncodedNeverExceedsMaxFrame: a Batch encoded already (syncBatch) passes the same
// last line of defence as any frame: beyond max_frame it is not written, an internal error is.
func TestSessionSendEncodedNeverExceedsMaxFrame(t *testing.T) {
	cfg := Config{Limits: proto.Limits{MaxFrame: proto.MinFrameLimit}}.withDefaults()
	ss := &session{s: &Server{cfg: cfg, logger: slog.New(slog.NewTextHandler(testLog{t}, nil))}, user: "alice", device: "phone"}
	var b proto.BatchBuilder
	b.Reset(1 << 30)
	for i := range 3 {
		b.Add(&proto.Entry{Seq: proto.Position(i + 1), Body: make([]byte, proto.MaxBody)})
	}
	var w bytes.Buffer
	if err := ss.sendEncoded(&w, proto.TypeBatch, b.Frame(1, 3, 0)); !errors.Is(err, proto.ErrFrameTooLarge) {
		t.Fatalf("send of an oversize batch: %v, want ErrFrameTooLarge", err)
	}
	f, err := proto.NewReader(&w, proto.MinFrameLimit).Next()
	if e, ok := f.(*proto.Error); err != nil || !ok || e.Code != proto.CodeInternal || w.Len() != 0 {
		t.Fatalf("written instead: %#v, %v (%d bytes left); want only an internal error", f, err, w.Len())
	}
	b.Reset(1 << 30)
	b.Add(&proto.Entry{Seq: 1, Body: make([]byte, proto.MaxBody)})
	frame := b.Frame(1, 1, 0)
	if err := ss.sendEncoded(&w, proto.TypeBatch, frame); err != nil || !bytes.Equal(w.Bytes(), frame) {
		t.Fatalf("a batch that fits: %v, %d bytes written of %d", err, w.Len(), len(frame))
	}
}

// BenchmarkSyncBatch is a catching-up sync stream's read and encode of one batch: 256 messages
// of 256 bytes from a real shard, into the frame that is written. "stream" is the server's path
// (syncBatch: scanned, encoded once into a kept buffer); "read-pack-append" is the path it
// replaced (ReadUser copies, wire entries measured with EncodedLen, AppendFrame into a new
// buffer), kept here as the reference.
//
//	go test -run='^$' -bench=SyncBatch -benchmem ./syncd/
func BenchmarkSyncBatch(b *testing.B) {
	const n, batch = 20_000, 256
	st, info := fillUserLog(b, n, func(uint64) log.Kind { return log.KindMessage }, func(uint64) int { return 256 })
	room := proto.DefaultMaxFrame - proto.PageOverhead
	lim := log.Limit{Count: batch, Bytes: room}
	from := func(i int) log.Position { return log.Position(i*batch%(n-batch)) + 1 }
	b.Run("stream", func(b *testing.B) {
		var sb syncBatch
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			res, err := sb.readInto(st, "u", info.Epoch, from(i), lim, room)
			if err != nil || res.Status != log.ReadEntries || len(sb.times) != batch {
				b.Fatalf("read: %v %v, %d entries", res.Status, err, len(sb.times))
			}
			_ = sb.frame(res.Info.Epoch, res.Info.Head, 0)
			i++
		}
		b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "entries/s")
	})
	b.Run("read-pack-append", func(b *testing.B) {
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			res, err := st.ReadUser("u", info.Epoch, from(i), lim)
			if err != nil || len(res.Entries) != batch {
				b.Fatalf("read: %v %v", res.Status, err)
			}
			out := &proto.Batch{Epoch: proto.Epoch(res.Info.Epoch), Head: proto.Position(res.Info.Head)}
			used := 0
			for k := range res.Entries {
				e := wireEntry(&res.Entries[k])
				if used += e.EncodedLen(); used > room {
					break
				}
				out.Entries = append(out.Entries, e)
			}
			if _, err := proto.AppendFrame(nil, out); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "entries/s")
	})
}
