package syncd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestAnswersHeldAreBounded is issue 21's point 2 through real QUIC: one user's devices open
// many request streams, ask for the History of a conversation of 64 KiB messages (each answer
// about max_frame) at the allowed query rate and never read the answers. The server used to keep
// every answer, and a goroutine for it, until the client read it — forever (1.1 GB from one
// connection; 4.6 GB and about 4,000 goroutines from three devices). Now what it holds is
// bounded by the answer budgets (max_answer_bytes_per_conn, _per_device, _per_user): the heap
// and the goroutines stay under a bound while the attack runs, the excess is refused with
// overloaded and a retry_after_ms, another user sends and syncs meanwhile, and a stream whose
// client reads nothing is reset with timeout after write_timeout, which releases what it held.
func TestAnswersHeldAreBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("holds answers until the write timeout (about 15 s)")
	}
	ts := startServer(t, nil)
	def := DefaultConfig()
	maxBody := int(ts.cfg.Limits.MaxBody)

	// The attacker's conversation: 20 messages of max_body, so every History page is a full
	// frame.
	eve := connect(t, ts, "eve", "d0")
	eve.Ack(&proto.CreateGroup{ID: eve.ID(), Conv: "eve-room", ClientMsgID: "g", Members: []string{"carol"}})
	for i := range 20 {
		eve.Ack(&proto.Send{ID: eve.ID(), Conv: "eve-room", ClientMsgID: fmt.Sprint("m", i), Body: make([]byte, maxBody)})
	}
	// The victim's traffic before the attack, so the baseline has what it needs warm.
	alice, bob := connect(t, ts, "alice", "phone"), connect(t, ts, "bob", "laptop")
	bob.StartSync(0, 0)
	alice.Ack(&proto.Send{ID: alice.ID(), Conv: proto.DirectConv("alice", "bob"), ClientMsgID: "a0", Body: []byte("before"), Peer: "bob"})
	if _, ok := eve.Do(&proto.History{ID: eve.ID(), Conv: "eve-room"}).(*proto.HistoryResult); !ok {
		t.Fatal("eve's history before the attack was refused")
	}
	heap0, goroutines0 := heapAfterGC(), runtime.NumGoroutine()

	// The attack: 3 devices × 2 connections × 14 request streams × 4 History requests (336
	// answers of about 1 MiB, within the devices' query bursts), none read. The clients'
	// receive windows are small, so the test process itself buffers little of what it is sent.
	const devices, connsPerDevice, streams, perStream = 3, 2, 14, 4
	var attack []*quic.Stream
	for d := range devices {
		device := fmt.Sprint("d", d+1)
		for range connsPerDevice {
			conn := dialSmallWindows(t, ts)
			if w, ok := prototest.Hello(t, conn, mustToken(t, ts, "eve", device), device).(*proto.Welcome); !ok {
				t.Fatalf("eve's %s was not welcomed: %#v", device, w)
			}
			for range streams {
				st, err := conn.OpenStreamSync(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				for i := range perStream {
					if err := proto.WriteFrame(st, &proto.History{ID: uint64(i + 1), Conv: "eve-room"}); err != nil {
						t.Fatal(err)
					}
				}
				attack = append(attack, st)
			}
		}
	}

	// What the server holds stays bounded while the attack goes on: sampled for 3 s, each
	// sample after a GC (the server runs in this process). Answers are counted by their encoded
	// size; the slack covers QUIC's own buffers, both sides, and the clients in this process.
	heapBound := uint64(def.MaxAnswerBytesPerUser) + 32<<20
	goroutineBound := devices*connsPerDevice*streams + // a reader per stream
		int(def.MaxAnswerBytesPerUser/(int64(proto.DefaultMaxFrame))) + // answers of a full frame each
		100 // the connections' own
	var maxHeap uint64
	maxGoroutines := 0
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		h, g := heapAfterGC(), runtime.NumGoroutine()
		maxHeap, maxGoroutines = max(maxHeap, h-min(h, heap0)), max(maxGoroutines, g-goroutines0)
		if maxHeap > heapBound || maxGoroutines > goroutineBound {
			t.Fatalf("under attack the server holds %d MiB more heap (bound %d MiB) and %d more goroutines (bound %d)",
				maxHeap>>20, heapBound>>20, maxGoroutines, goroutineBound)
		}
	}
	t.Logf("under attack: heap +%d MiB (bound %d MiB), goroutines +%d (bound %d)", maxHeap>>20, heapBound>>20, maxGoroutines, goroutineBound)

	// The excess is refused with overloaded and a retry-after: a third connection of a device
	// (over its device's budget), and a fourth device (over the user's).
	for _, device := range []string{"d1", "d4"} {
		c := connect(t, ts, "eve", device)
		e, ok := c.Do(&proto.History{ID: c.ID(), Conv: "eve-room"}).(*proto.Error)
		if !ok || e.Code != proto.CodeOverloaded || e.RetryAfterMs == 0 {
			t.Fatalf("eve's %s asks for History while her answers fill her budget: %#v, want overloaded with retry_after_ms", device, e)
		}
	}

	// Meanwhile another user sends, syncs and queries as usual.
	a1 := alice.Ack(&proto.Send{ID: alice.ID(), Conv: proto.DirectConv("alice", "bob"), ClientMsgID: "a1", Body: make([]byte, maxBody), Peer: "bob"})
	if got := bob.Entries(0, 2); got[1].MsgID != a1.MsgID {
		t.Fatalf("bob synced %s, want alice's message %s", got[1].MsgID, a1.MsgID)
	}
	if h, ok := alice.Do(&proto.History{ID: alice.ID(), Conv: proto.DirectConv("alice", "bob")}).(*proto.HistoryResult); !ok || len(h.Entries) != 2 {
		t.Fatalf("alice's History during the attack: %#v", h)
	}

	if got := metric(t, ts, `syncd_request_refused_total{reason="answer_bytes"}`); got == "0" || got == "" {
		t.Errorf("syncd_request_refused_total{reason=\"answer_bytes\"} = %q after refusals", got)
	}

	// A stream on which the server has an answer waiting for a client that reads nothing is
	// reset with timeout once the write has waited write_timeout (the test reads nothing before,
	// which would let the writes go on), and what it held is released.
	testkit.WaitTrue(t, def.WriteTimeout+10*time.Second, "the server to reset the streams nobody reads", func() bool {
		return metric(t, ts, "syncd_answer_bytes") == "0"
	})
	testkit.WaitTrue(t, 10*time.Second, "the heap and the goroutines to come back", func() bool {
		h := heapAfterGC()
		return h-min(h, heap0) < 16<<20 && runtime.NumGoroutine()-goroutines0 < devices*connsPerDevice*streams+100
	})
	// Now the client reads: each stream was reset with timeout, or carries the refusals of
	// requests beyond the budgets (small frames, which QUIC took in without waiting), and is idle.
	type outcome struct {
		reset    bool
		refusals int
		err      error
	}
	outcomes := make([]outcome, len(attack))
	var wg sync.WaitGroup
	for i, st := range attack {
		wg.Go(func() {
			r := proto.NewReader(st, proto.DefaultMaxFrame)
			st.SetReadDeadline(time.Now().Add(3 * time.Second))
			for {
				f, err := r.Next()
				var se *quic.StreamError
				switch e, _ := f.(*proto.Error); {
				case errors.As(err, &se) && se.ErrorCode == quic.StreamErrorCode(proto.CodeTimeout):
					outcomes[i].reset = true
					return
				case errors.Is(err, os.ErrDeadlineExceeded):
					return // idle
				case err != nil:
					outcomes[i].err = err
					return
				case e != nil && e.Code == proto.CodeOverloaded && e.RetryAfterMs > 0:
					outcomes[i].refusals++
				default:
					outcomes[i].err = fmt.Errorf("unexpected %#v", f)
					return
				}
			}
		})
	}
	wg.Wait()
	resets, refusals := 0, 0
	for i, o := range outcomes {
		if o.err != nil || !o.reset && o.refusals == 0 {
			t.Fatalf("attack stream %d: %+v, want a reset with timeout or overloaded refusals", i, o)
		}
		if o.reset {
			resets++
		}
		refusals += o.refusals
	}
	if got := metric(t, ts, "syncd_stream_write_timeouts_total"); resets == 0 || refusals == 0 || got != fmt.Sprint(resets) {
		t.Fatalf("%d streams reset with timeout (syncd_stream_write_timeouts_total %s), %d refusals on the others", resets, got, refusals)
	}
	t.Logf("%d attack streams reset with timeout, %d requests refused with overloaded on the others", resets, refusals)
}

// TestConfigAnswerBudgets: each answer budget must hold one page of max_frame, in the order
// connection ≤ device ≤ user, and the write timeout must be sane; Validate says so.
func TestConfigAnswerBudgets(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{MaxAnswerBytesPerConn: 1 << 20}, "must each be at least 1064960"},
		{Config{Limits: proto.Limits{MaxFrame: 16 << 20}}, "must each be at least 16793600"},
		{Config{MaxAnswerBytesPerDevice: 64 << 20}, "in that order"},
		{Config{WriteTimeout: time.Millisecond}, "WriteTimeout 1ms must be between"},
		{Config{}, ""},
		{Config{Limits: proto.Limits{MaxFrame: 4 << 20}}, ""},
	} {
		err := c.cfg.Validate()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
}

// TestAnswerBudgetsAccount: a reservation counts against the connection, the device and the
// user; the first full one refuses, naming itself; a forced one passes; releases leave no key
// behind.
func TestAnswerBudgetsAccount(t *testing.T) {
	b := newAnswerBudgets(Config{MaxAnswerBytesPerConn: 10, MaxAnswerBytesPerDevice: 15, MaxAnswerBytesPerUser: 20})
	phone1 := &connAnswers{b: b, user: "u", device: "u\x00phone"}
	phone2 := &connAnswers{b: b, user: "u", device: "u\x00phone"}
	laptop := &connAnswers{b: b, user: "u", device: "u\x00laptop"}
	refused := func(c *connAnswers, n int64, which string) {
		t.Helper()
		if ok, why := c.reserve(n, false); ok || !strings.Contains(why, which) {
			t.Fatalf("reserve(%d) = %v %q, want refused by %s", n, ok, why, which)
		}
	}
	for _, step := range []struct {
		c *connAnswers
		n int64
	}{{phone1, 8}, {phone2, 7}, {laptop, 5}} {
		if ok, why := step.c.reserve(step.n, false); !ok {
			t.Fatalf("reserve(%d): %s", step.n, why)
		}
	}
	refused(phone1, 3, "connection")
	refused(phone2, 1, "device")
	refused(laptop, 1, "user")
	phone1.reserve(5, true)
	held := int64(5)
	phone1.resize(&held, 2)
	for c, n := range map[*connAnswers]int64{phone1: 10, phone2: 7, laptop: 5} {
		c.release(n)
	}
	if len(b.devices) != 0 || len(b.users) != 0 || b.held.Load() != 0 || phone1.held != 0 {
		t.Fatalf("after every release: devices %v, users %v, held %d", b.devices, b.users, b.held.Load())
	}
}

// dialSmallWindows connects to ts as a client whose receive windows are small: a client that
// does not read then holds up the server's writes at once, and buffers little itself.
func dialSmallWindows(t *testing.T, ts *testServer) *quic.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), prototest.Timeout)
	defer cancel()
	conn, err := quic.DialAddr(ctx, ts.Addr().String(), proto.PinnedTLSConfig(ts.Fingerprint()), &quic.Config{
		InitialStreamReceiveWindow: 16 << 10, MaxStreamReceiveWindow: 16 << 10,
		InitialConnectionReceiveWindow: 64 << 10, MaxConnectionReceiveWindow: 64 << 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseWithError(0, "") })
	return conn
}

// heapAfterGC returns the live heap after a collection.
func heapAfterGC() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
