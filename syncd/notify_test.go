package syncd

import "testing"

// A wake-up reaches the streams of the users whose logs grew, not the others on the shard; a
// shard-wide wake-up (after a snapshot restore) reaches all of them.
func TestNotifierWakesOnlyTouchedUsers(t *testing.T) {
	n := newNotifier()
	closed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	a, b, other := n.wait(1, "a"), n.wait(1, "b"), n.wait(2, "a")
	n.notify(1, []string{"a"})
	if !closed(a) || closed(b) || closed(other) {
		t.Fatalf("after notifying a on shard 1: a=%v b=%v shard2/a=%v", closed(a), closed(b), closed(other))
	}
	if a2 := n.wait(1, "a"); closed(a2) {
		t.Fatal("a fresh wait is already woken")
	}
	n.notify(1, nil)
	if !closed(b) || closed(other) {
		t.Fatalf("after a shard-wide notify: b=%v shard2/a=%v", closed(b), closed(other))
	}
}
