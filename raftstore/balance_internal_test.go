package raftstore

import (
	"testing"
	"time"
)

// TestBalancerBacksOffAFailingTarget: a node that failed to take a leadership is not picked again
// for a while, longer after each failure in a row, and at once again after one it took. (The
// failures themselves — a target too starved to win its election in time — cannot be produced
// on demand; the bookkeeping is what decides the balancer's choice.)
func TestBalancerBacksOffAFailingTarget(t *testing.T) {
	var b targetBackoff
	now := time.Now()
	if b.blocked("n2", now) {
		t.Fatal("a node no transfer failed to is blocked")
	}
	b.record("n2", false, now)
	if !b.blocked("n2", now.Add(balanceBackoffBase-time.Second)) || b.blocked("n2", now.Add(balanceBackoffBase)) {
		t.Errorf("after one failure: blocked for %v, want %v", b["n2"].until.Sub(now), balanceBackoffBase)
	}
	if b.blocked("n3", now) {
		t.Error("another node is blocked too")
	}
	b.record("n2", false, now)
	if got := b["n2"].until.Sub(now); got != 2*balanceBackoffBase {
		t.Errorf("after two failures in a row: blocked for %v, want %v", got, 2*balanceBackoffBase)
	}
	for range 20 {
		b.record("n2", false, now)
	}
	if got := b["n2"].until.Sub(now); got != balanceBackoffMax {
		t.Errorf("after many failures: blocked for %v, want the cap %v", got, balanceBackoffMax)
	}
	b.record("n2", true, now)
	if b.blocked("n2", now) {
		t.Error("a node that took a leadership is still blocked")
	}
}
