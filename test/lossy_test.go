package test

import (
	"fmt"
	"testing"
	"time"
)

// TestLossyNetworkNothingLostNothingTwice: two users' devices talk through a relay that drops,
// duplicates and delays (reorders) packets and goes down completely for a few seconds mid-way.
// The sender keeps sending; at the end every message is in both users' stores exactly once, in
// the order it was sent.
func TestLossyNetworkNothingLostNothingTwice(t *testing.T) {
	srv := startServer(t)
	relay, err := newLossyRelay(srv.Addr().String(), 42)
	if err != nil {
		t.Fatal(err)
	}
	defer relay.close()
	relay.setFaults(0.05, 0.05, 15*time.Millisecond)

	alice := dialDeviceAt(t, srv, relay.addr(), "alice", "phone", t.TempDir())
	defer alice.Close()
	bob := dialDeviceAt(t, srv, relay.addr(), "bob", "phone", t.TempDir())
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
			relay.setDown(true)
			time.Sleep(3 * time.Second)
			relay.setDown(false)
		}
	}
	waitBodies(t, "d:alice:bob", want, alice, bob)
}
