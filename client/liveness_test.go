package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
)

// Liveness of the SDK against a real server: it keeps to the limits the server announced,
// reconnects with a backoff that a persistent failure cannot reset, and tells the app when
// syncing keeps failing (issue #10: a batch beyond max_frame made it redial 1,986 times in 10 s
// while the app saw nothing).

// dialTo connects user's device through addr (the server or a proxy in front of it, whose
// certificate has fingerprint fp) with a fresh store, closed when the test ends.
func dialTo(t *testing.T, srv *syncd.Server, addr, fp, user, device string) *Client {
	t.Helper()
	token, err := srv.MintToken(user, device, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return dialWith(t, Config{Addr: addr, Token: token, Device: device, Fingerprint: fp})
}

// dialWith connects the device cfg configures, with a fresh store and the test's logger unless
// cfg names them, closed when the test ends.
func dialWith(t *testing.T, cfg Config) *Client {
	t.Helper()
	if cfg.StoreDir == "" {
		cfg.StoreDir = t.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = syncdtest.Logger(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// nextEvent returns the next event of c for which keep is true, failing the test after timeout.
func nextEvent[E Event](t *testing.T, c *Client, timeout time.Duration) E {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-c.Events():
			if !ok {
				t.Fatal("events closed")
			}
			if e, ok := ev.(E); ok {
				return e
			}
		case <-deadline:
			var zero E
			t.Fatalf("no %T within %v", zero, timeout)
		}
	}
}

// TestSDKReportsPersistentSyncFailureAndBacksOff: a server whose batches exceed the max_frame
// its Welcome announced (a proxy lowers the announcement; the server itself no longer can) makes
// every sync stream fail. The SDK redials on a growing backoff — not at once, as when any
// connection that got a Welcome reset it — reports SyncFailedEvent with the cause at the third
// failure, and syncs everything, SyncedEvent, once the frames fit again.
func TestSDKReportsPersistentSyncFailureAndBacksOff(t *testing.T) {
	srv := syncdtest.Start(t, func(c *syncd.Config) { c.Shards = 2 })
	tokA, err := srv.MintToken("alice", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	alice := prototest.Connect(t, srv.Addr().String(), srv.Fingerprint(), tokA, "alice", "phone")
	const n = 16 // of 64 KiB: about 1 MiB, batches far beyond 128 KiB
	for i := range n {
		alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: fmt.Sprint("m", i), Body: make([]byte, proto.MaxBody), Peer: "bob"})
	}

	var lie atomic.Bool // the proxy announces a max_frame below what the server sends
	lie.Store(true)
	proxy := prototest.NewProxy(t, srv.Addr().String(), srv.Fingerprint(), func(f proto.Frame) proto.Frame {
		if w, ok := f.(*proto.Welcome); ok && lie.Load() {
			w.Limits.MaxFrame = proto.MinFrameLimit
		}
		return f
	})
	start := time.Now()
	bob := dialTo(t, srv, proxy.Addr(), proxy.Fingerprint(), "bob", "laptop")

	failed := nextEvent[SyncFailedEvent](t, bob, 20*time.Second)
	took, dials := time.Since(start), proxy.Accepted()
	if failed.Failures != SyncFailureThreshold || !errors.Is(failed.Err, proto.ErrFrameTooLarge) {
		t.Fatalf("first SyncFailedEvent: %d failures, err %v; want %d and frame too large", failed.Failures, failed.Err, SyncFailureThreshold)
	}
	// Three connections, with at least 500 ms and then 1 s of backoff between them.
	if dials != SyncFailureThreshold || took < 1500*time.Millisecond {
		t.Fatalf("%d connections in %v before the report; want %d after at least 1.5 s of backoff", dials, took, SyncFailureThreshold)
	}
	if msgs, err := bob.Messages("d:alice:bob"); err != nil || len(msgs) != 0 {
		t.Fatalf("stored %d messages (%v) from oversize batches", len(msgs), err)
	}

	// The fault goes away: the next attempt (within the 2-3 s backoff) syncs everything.
	lie.Store(false)
	synced := nextEvent[SyncedEvent](t, bob, 20*time.Second)
	if synced.Head != n {
		t.Fatalf("synced up to %d, want %d", synced.Head, n)
	}
	if msgs, err := bob.Messages("d:alice:bob"); err != nil || len(msgs) != n {
		t.Fatalf("stored %d messages (%v), want %d", len(msgs), err, n)
	}
	t.Logf("reported after %v and %d connections; %d connections in all", took, dials, proxy.Accepted())
}

// TestSDKKeepsToAnnouncedLimits: the SDK refuses a body above the announced max_body at once,
// and fails a request whose frame would exceed max_frame without sending it — the server would
// reset the request stream, and the SDK would reconnect and resend it forever — while the
// connection keeps serving the next request.
func TestSDKKeepsToAnnouncedLimits(t *testing.T) {
	srv := syncdtest.Start(t, func(c *syncd.Config) {
		c.Shards, c.Limits.MaxBody, c.Limits.MaxFrame = 2, 1000, proto.MinFrameLimit
	})
	alice := dialTo(t, srv, srv.Addr().String(), srv.Fingerprint(), "alice", "phone")
	if _, err := alice.Send("d:alice:bob", "bob", make([]byte, 1001)); !proto.IsCode(err, proto.CodeTooLarge) {
		t.Fatalf("Send of 1001 bytes with max_body 1000: %v, want too_large", err)
	}
	if out, _ := alice.Outbox(); len(out) != 0 {
		t.Fatalf("refused body queued: %+v", out)
	}

	members := make([]string, proto.MaxMembers+10) // a frame beyond 128 KiB
	for i := range members {
		members[i] = fmt.Sprintf("u%04d%s", i, strings.Repeat("x", proto.MaxIDLen-5))
	}
	big, err := alice.CreateGroup("team", members)
	if err != nil {
		t.Fatal(err)
	}
	ok, err := alice.Send("d:alice:bob", "bob", []byte("still connected"))
	if err != nil {
		t.Fatal(err)
	}
	alice.curMu.Lock()
	first := alice.cur
	alice.curMu.Unlock()
	for done := 0; done < 2; done++ {
		ev := nextEvent[StatusEvent](t, alice, 20*time.Second)
		switch {
		case ev.ClientMsgID == big && (ev.Status != StatusFailed || !proto.IsCode(ev.Err, proto.CodeTooLarge)):
			t.Fatalf("oversize CreateGroup: %v %v, want failed with too_large", ev.Status, ev.Err)
		case ev.ClientMsgID == ok && ev.Status != StatusSent:
			t.Fatalf("message after it: %v %v, want sent", ev.Status, ev.Err)
		}
	}
	alice.curMu.Lock()
	same := alice.cur == first
	alice.curMu.Unlock()
	if !same {
		t.Fatal("the connection was replaced: the oversize request reached the server")
	}
}

// TestSDKPacesToAnnouncedSendRate: the SDK keeps its outbox within the send_rate_per_s and
// send_burst the Welcome announced, so a burst of messages is sent without one rate_limited
// answer — each would spend an attempt of the item's bounded retry schedule.
func TestSDKPacesToAnnouncedSendRate(t *testing.T) {
	const rate, burst, n = 10, 2, 8
	srv := syncdtest.Start(t, func(c *syncd.Config) { c.Shards, c.SendRate, c.SendBurst = 2, rate, burst })
	alice := dialTo(t, srv, srv.Addr().String(), srv.Fingerprint(), "alice", "phone")
	if l := alice.limits.Load(); l.SendRatePerS != rate || l.SendBurst != burst {
		t.Fatalf("announced send_rate_per_s %d, send_burst %d", l.SendRatePerS, l.SendBurst)
	}
	began := time.Now()
	for i := range n {
		if _, err := alice.Send(proto.DirectConv("alice", "bob"), "bob", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if ev := nextEvent[StatusEvent](t, alice, 20*time.Second); ev.Status != StatusSent {
			t.Fatalf("%s: %v %v", ev.ClientMsgID, ev.Status, ev.Err)
		}
	}
	took := time.Since(began)
	out, err := alice.Outbox()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range out {
		if q.Attempts != 1 {
			t.Fatalf("%s took %d attempts (last error %q): the server refused it", q.ClientMsgID, q.Attempts, q.LastError)
		}
	}
	if least := time.Duration(n-burst) * time.Second / rate; took < least*9/10 {
		t.Fatalf("%d messages in %v: faster than the announced rate allows (%v)", n, took, least)
	}
}

// TestSDKKeepsRequestStreamAlive: a server that closes request streams idle for
// request_idle_ms does not close the SDK's: its head checks come at least twice as often, so
// the connection stays the same and keeps serving the outbox.
func TestSDKKeepsRequestStreamAlive(t *testing.T) {
	const idle = 600 * time.Millisecond
	srv := syncdtest.Start(t, func(c *syncd.Config) { c.Shards, c.RequestIdle = 2, idle })
	proxy := prototest.NewProxy(t, srv.Addr().String(), srv.Fingerprint(), nil)
	alice := dialTo(t, srv, proxy.Addr(), proxy.Fingerprint(), "alice", "phone")
	nextEvent[SyncedEvent](t, alice, 10*time.Second)
	time.Sleep(5 * idle)
	id, err := alice.Send(proto.DirectConv("alice", "bob"), "bob", []byte("still the same connection"))
	if err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent[StatusEvent](t, alice, 10*time.Second); ev.ClientMsgID != id || ev.Status != StatusSent {
		t.Fatalf("after %v idle: %v %v", 5*idle, ev.Status, ev.Err)
	}
	if n := proxy.Accepted(); n != 1 {
		t.Fatalf("%d connections: the idle request stream was closed under the SDK", n)
	}
}

// TestReconnectSchedule: failed attempts wait 500 ms, 1 s, 2 s, … up to 30 s (plus up to 50%
// jitter), never less than the server's retry-after; a connection that ends before stableAfter
// is a failed attempt, one that stayed up longer starts the schedule over.
func TestReconnectSchedule(t *testing.T) {
	within := func(got, base time.Duration) bool { return got >= base && got <= base+base/2 }
	var r reconnect
	for _, base := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second} {
		if got := r.failed(0); !within(got, base) {
			t.Fatalf("failed attempt: wait %v, want %v + up to 50%%", got, base)
		}
	}
	if got := r.ended(stableAfter-time.Millisecond, 0); !within(got, 8*time.Second) {
		t.Fatalf("short connection: wait %v, want the next step, 8 s", got)
	}
	for range 10 {
		r.failed(0)
	}
	if got := r.failed(0); !within(got, 30*time.Second) {
		t.Fatalf("many failures: wait %v, want the 30 s cap", got)
	}
	if got := r.ended(stableAfter, 0); got != 0 {
		t.Fatalf("stable connection: wait %v, want none", got)
	}
	if got := r.failed(0); !within(got, 500*time.Millisecond) {
		t.Fatalf("after a stable connection: wait %v, want the schedule from the start", got)
	}
	if got := r.failed(5 * time.Second); !within(got, 5*time.Second) {
		t.Fatalf("retry-after 5 s: wait %v", got)
	}
	if got := r.ended(time.Hour, 3*time.Second); got != 3*time.Second {
		t.Fatalf("stable connection with retry-after 3 s: wait %v", got)
	}
}

// TestSDKSyncedOnAnEmptyLog: a device of a user whose log does not exist yet is caught up at
// once: the server's first heartbeat says so.
func TestSDKSyncedOnAnEmptyLog(t *testing.T) {
	srv := syncdtest.Start(t, func(c *syncd.Config) { c.Shards = 2 })
	c := dialTo(t, srv, srv.Addr().String(), srv.Fingerprint(), "nobody", "phone")
	if e := nextEvent[SyncedEvent](t, c, 10*time.Second); e.Head != 0 {
		t.Fatalf("synced at %d, want 0", e.Head)
	}
}
