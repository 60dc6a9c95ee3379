package testkit

import (
	"strings"
	"testing"
	"time"
)

// TestMesh: a mesh of three nodes has a relay per ordered pair, hands each node the relays
// towards the others, partitions a node in both directions and only its links, reconnects it,
// and heals blocks and delays.
func TestMesh(t *testing.T) {
	echo := newEchoServer(t)
	addr := echo.addr()
	nodes := []string{"n1", "n2", "n3"}
	m, err := NewMesh(map[string]string{"n1": addr, "n2": addr, "n3": addr})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if len(m.relays) != 6 {
		t.Fatalf("mesh of three nodes has %d relays", len(m.relays))
	}
	dm := m.DialMap("n1")
	if len(dm) != 2 || dm["n2"] != m.Relay("n1", "n2").Addr() || dm["n3"] != m.Relay("n1", "n3").Addr() {
		t.Fatalf("n1 dials %v", dm)
	}
	if m.Relay("n1", "n1") != nil || m.Relay("n1", "n9") != nil {
		t.Fatal("a relay for a pair that is not in the mesh")
	}

	// checkBlocked compares every relay with want(from, to).
	checkBlocked := func(when string, want func(from, to string) bool) {
		t.Helper()
		for _, from := range nodes {
			for _, to := range nodes {
				if from == to {
					continue
				}
				if got := m.Relay(from, to).Blocked(); got != want(from, to) {
					t.Errorf("%s: %s→%s blocked %v, want %v", when, from, to, got, want(from, to))
				}
			}
		}
	}
	m.Partition("n1")
	checkBlocked("partitioned n1", func(from, to string) bool { return from == "n1" || to == "n1" })
	c, br := dial(t, m.DialMap("n2")["n1"])
	if _, err := roundTrip(c, br, "across"); err == nil {
		t.Fatal("n2 reached n1 across the partition")
	}
	c, br = dial(t, m.DialMap("n2")["n3"])
	if got, err := roundTrip(c, br, "beside"); err != nil || got != "beside" {
		t.Fatalf("n2 → n3 during n1's partition: %q %v", got, err)
	}
	m.Reconnect("n1")
	checkBlocked("reconnected n1", func(from, to string) bool { return false })

	m.Partition("n2")
	const d = 30 * time.Millisecond
	m.SetDelay(d)
	c, br = dial(t, m.DialMap("n1")["n3"])
	start := time.Now()
	if got, err := roundTrip(c, br, "slow"); err != nil || got != "slow" {
		t.Fatalf("delayed n1 → n3: %q %v", got, err)
	}
	if took := time.Since(start); took < 2*d {
		t.Fatalf("a round trip through a mesh delayed by %v took %v", d, took)
	}
	m.Heal()
	checkBlocked("healed", func(from, to string) bool { return false })
	c, br = dial(t, m.DialMap("n1")["n2"])
	if got, err := roundTrip(c, br, "healed"); err != nil || got != "healed" {
		t.Fatalf("after heal: %q %v", got, err)
	}
	for _, r := range m.relays {
		if r.mu.Lock(); r.delay != 0 {
			t.Errorf("a relay still delays by %v after Heal", r.delay)
		}
		r.mu.Unlock()
	}
	// Counted after the write, so the last echo may be read before it is counted: wait.
	Wait(t, 5*time.Second, "the summary to count every connection and byte", func() (bool, string) {
		sum := m.Summary()
		return strings.HasPrefix(sum, "n1→n2: 1 conns, 0 refused, 14 bytes; n1→n3: 1 conns, 0 refused, 10 bytes;") &&
			strings.Contains(sum, "n2→n1: 0 conns, 1 refused, 0 bytes;"), sum
	})
	t.Log(m.Summary())
}
