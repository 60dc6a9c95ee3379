package syncd

import (
	"testing"

	"github.com/syncd-dev/syncd/log"
)

// A wake-up reaches the streams of the logs that grew, not the others on the shard; a user and a
// conversation of the same id are apart; a shard-wide wake-up (after a snapshot restore) reaches
// all of them.
func TestNotifierWakesOnlyTouchedLogs(t *testing.T) {
	n := newNotifier()
	closed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	a, b, other, conv := n.wait(1, "a"), n.wait(1, "b"), n.wait(2, "a"), n.waitConv(1, "a")
	n.notify(1, log.Touched{Users: []string{"a"}})
	if !closed(a) || closed(b) || closed(other) || closed(conv) {
		t.Fatalf("after notifying user a on shard 1: a=%v b=%v shard2/a=%v conv a=%v", closed(a), closed(b), closed(other), closed(conv))
	}
	if a2 := n.wait(1, "a"); closed(a2) {
		t.Fatal("a fresh wait is already woken")
	}
	n.notify(1, log.Touched{Convs: []string{"a"}})
	if !closed(conv) || closed(b) {
		t.Fatalf("after notifying conversation a: conv=%v b=%v", closed(conv), closed(b))
	}
	n.notify(1, log.Touched{All: true})
	if !closed(b) || closed(other) {
		t.Fatalf("after a shard-wide notify: b=%v shard2/a=%v", closed(b), closed(other))
	}
}
