package client

import (
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
)

// The sync stream's liveness against a real server behind a proxy that makes its heartbeats lie
// or vanish (PROTOCOL §8.4). The server sends one every heartbeatMs while the stream is idle.
const heartbeatMs = 300

// heartbeatSetup starts a server heartbeating every heartbeatMs and a proxy that passes each
// Heartbeat through fault while faulty is set; bob, whose log holds one entry, syncs through it.
// Delivery reports are off: bob's ack of that entry would append a delivered entry to his log,
// and the heads these tests expect must not depend on when it comes.
func heartbeatSetup(t *testing.T, fault func(*proto.Heartbeat) proto.Frame) (bob *Client, faulty *atomic.Bool, proxy *prototest.Proxy) {
	t.Helper()
	srv := syncdtest.Start(t, func(c *syncd.Config) {
		c.Shards, c.Limits.HeartbeatMs = 2, heartbeatMs
		c.DisableDeliveryReports = true
	})
	faulty = new(atomic.Bool)
	proxy = prototest.NewProxy(t, srv.Addr().String(), srv.Fingerprint(), func(f proto.Frame) proto.Frame {
		if hb, ok := f.(*proto.Heartbeat); ok && faulty.Load() {
			return fault(hb)
		}
		return f
	})
	tokA, err := srv.MintToken("alice", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	alice := prototest.Connect(t, srv.Addr().String(), srv.Fingerprint(), tokA, "alice", "phone")
	alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "hi", Body: []byte("hi"), Peer: "bob"})
	bob = dialTo(t, srv, proxy.Addr(), proxy.Fingerprint(), "bob", "phone")
	if e := nextEvent[SyncedEvent](t, bob, 10*time.Second); e.Head != 1 {
		t.Fatalf("synced up to %d, want 1", e.Head)
	}
	return bob, faulty, proxy
}

// TestSDKTakesASilentSyncStreamForDead: a sync stream that carries no frame for three heartbeat
// intervals — the proxy drops the server's heartbeats, while the connection itself stays up — is
// taken for dead: the SDK drops the connection (OfflineEvent, saying why) no sooner than two
// intervals after the last heartbeat could have come and soon after the third, reconnects, and
// syncs again once heartbeats flow.
func TestSDKTakesASilentSyncStreamForDead(t *testing.T) {
	bob, mute, proxy := heartbeatSetup(t, func(*proto.Heartbeat) proto.Frame { return nil })
	mute.Store(true)
	muted := time.Now()
	off := nextEvent[OfflineEvent](t, bob, 10*time.Second)
	took := time.Since(muted)
	// The last heartbeat came at most one interval before the mute, so the stream is silent for
	// three intervals at the earliest two after it.
	if interval := heartbeatMs * time.Millisecond; took < 2*interval || took > 3*interval+2*time.Second {
		t.Fatalf("the silent stream was given up %v after the heartbeats stopped; want after 3 intervals of %v", took, interval)
	}
	if !errors.Is(off.Err, os.ErrDeadlineExceeded) {
		t.Fatalf("OfflineEvent says %v; want the silence", off.Err)
	}
	mute.Store(false)
	nextEvent[ConnectedEvent](t, bob, 10*time.Second)
	nextEvent[SyncedEvent](t, bob, 10*time.Second)
	if n := proxy.Accepted(); n != 2 {
		t.Fatalf("%d connections; want the first and one reconnect", n)
	}
}

// TestSDKActsOnHeartbeats: a heartbeat is more than a sign of life. One whose head is beyond the
// cursor while no batch comes (the proxy raises the head) means the stream is stalled: after two
// heartbeat intervals the SDK restarts it, and when restarting does not help, reconnects. One of
// another epoch (the proxy changes it) means the log was re-created: the SDK restarts at once
// (the server would answer EpochChanged), and, as the lie persists on every new stream,
// reconnects. Either way it syncs again once the heartbeats tell the truth.
func TestSDKActsOnHeartbeats(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fault    func(*proto.Heartbeat) proto.Frame
		earliest time.Duration // the soonest the SDK may give the connection up
	}{
		{"head beyond the cursor", func(hb *proto.Heartbeat) proto.Frame { hb.Head += 5; return hb },
			// The stream it was on, then two restarted ones, each given two intervals of the lie
			// from its first lying heartbeat (a new stream gets one at once): six intervals; five
			// leave room for the first lie landing late in an interval.
			5 * heartbeatMs * time.Millisecond},
		{"another epoch", func(hb *proto.Heartbeat) proto.Frame { hb.Epoch++; return hb }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bob, lie, proxy := heartbeatSetup(t, tc.fault)
			lie.Store(true)
			lied := time.Now()
			off := nextEvent[OfflineEvent](t, bob, 20*time.Second)
			took := time.Since(lied)
			if took < tc.earliest || !errors.Is(off.Err, errRestartLoop) {
				t.Fatalf("gave the connection up %v after the lie began, with %v; want %v at the earliest, for streams "+
					"that keep restarting", took, off.Err, tc.earliest)
			}
			t.Logf("connection given up %v after the lie began", took)
			lie.Store(false)
			nextEvent[ConnectedEvent](t, bob, 10*time.Second)
			if e := nextEvent[SyncedEvent](t, bob, 10*time.Second); e.Head != 1 {
				t.Fatalf("synced up to %d after the lie, want 1", e.Head)
			}
			if n := proxy.Accepted(); n < 2 {
				t.Fatalf("%d connections; want a reconnect", n)
			}
			if msgs, _ := bob.Messages("d:alice:bob"); len(msgs) != 1 {
				t.Fatalf("%d messages stored, want 1", len(msgs))
			}
		})
	}
}
