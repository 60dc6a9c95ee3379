package test

import (
	"fmt"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/test/testkit"
)

// TestLossyNetworkNothingLostNothingTwice: two users' devices talk through a relay that drops,
// duplicates and delays (reorders) packets and goes down completely for a few seconds mid-way.
// The sender keeps sending; at the end every message is in both users' stores exactly once, in
// the order it was sent.
func TestLossyNetworkNothingLostNothingTwice(t *testing.T) {
	skipShort(t)
	srv := startServer(t)
	relay, err := testkit.NewUDPRelay(srv.Addr().String(), 42)
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	relay.SetFaults(0.05, 0.05, 15*time.Millisecond)

	alice := dialDeviceAt(t, srv, relay.Addr(), "alice", "phone", t.TempDir())
	defer alice.Close()
	bob := dialDeviceAt(t, srv, relay.Addr(), "bob", "phone", t.TempDir())
	defer bob.Close()

	const n = 40
	var want []string
	for i := range n {
		body := fmt.Sprint("m", i)
		want = append(want, body)
		if _, err := alice.Send("d:alice:bob", "bob", []byte(body)); err != nil {
			t.Fatal(err)
		}
		if i == n/2 { // an outage of a few seconds while messages are in flight
			before := relay.Stats().Down
			relay.SetDown(true)
			// The sleep is the outage's length, long enough for QUIC's retransmissions to back
			// off; it asserts nothing. The count below shows the outage did hit traffic.
			time.Sleep(3 * time.Second)
			relay.SetDown(false)
			if lost := relay.Stats().Down - before; lost == 0 {
				t.Fatal("no packet was sent during the outage: it tested nothing")
			}
		}
	}
	waitBodies(t, "d:alice:bob", want, alice, bob)
	t.Logf("relay: %+v", relay.Stats())
}
