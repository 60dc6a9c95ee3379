package client

import (
	"testing"
	"time"

	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
)

// TestSDKResumesTLSOnReconnect: the SDK keeps a TLS session cache per Client, and syncd's
// listener issues session tickets, so when the connection is lost the reconnect to the same node
// resumes the TLS session (a shorter handshake, no certificate sent) — and the pinned
// fingerprint, checked on the first handshake, is not bypassed by another Client's ticket.
func TestSDKResumesTLSOnReconnect(t *testing.T) {
	srv := syncdtest.Start(t, func(c *syncd.Config) { c.Shards = 2 })
	bob := dialTo(t, srv, srv.Addr().String(), srv.Fingerprint(), "bob", "phone")
	if first := nextEvent[ConnectedEvent](t, bob, 10*time.Second); first.Resumed {
		t.Fatal("the first connection of a new Client resumed a TLS session")
	}
	nextEvent[SyncedEvent](t, bob, 10*time.Second)

	bob.curMu.Lock()
	bob.cur.q.CloseWithError(0, "test: connection lost")
	bob.curMu.Unlock()
	if again := nextEvent[ConnectedEvent](t, bob, 10*time.Second); !again.Resumed {
		t.Fatal("the reconnect did a full TLS handshake: the session was not resumed")
	}
	bob.curMu.Lock()
	resumed := bob.cur != nil && bob.cur.q.ConnectionState().TLS.DidResume
	bob.curMu.Unlock()
	if !resumed {
		t.Fatal("ConnectedEvent said resumed, the connection's TLS state does not")
	}
	nextEvent[SyncedEvent](t, bob, 10*time.Second)

	// Another Client, with a cache of its own, starts with a full handshake (and the pin).
	other := dialTo(t, srv, srv.Addr().String(), srv.Fingerprint(), "bob", "laptop")
	if c := nextEvent[ConnectedEvent](t, other, 10*time.Second); c.Resumed {
		t.Fatal("a second Client resumed the first one's TLS session")
	}
}
