package syncd

import (
	"sync"

	"github.com/syncd-dev/syncd/raftstore"
)

// notifier wakes sync streams when a shard applies new entries. Waiters take the shard's current
// channel and block on it; notify closes it (a broadcast) and installs a fresh one. A waiter then
// re-reads the log: a wake-up is a hint, the log is the truth, so a spurious or coalesced wake-up
// costs one read and never an entry.
//
// Safe for concurrent use; notify never blocks (it runs on the shard's apply goroutine).
type notifier struct {
	mu sync.Mutex
	ch map[raftstore.ShardID]chan struct{}
}

func newNotifier() *notifier { return &notifier{ch: map[raftstore.ShardID]chan struct{}{}} }

// wait returns a channel that is closed at the next notify of shard.
func (n *notifier) wait(shard raftstore.ShardID) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	c, ok := n.ch[shard]
	if !ok {
		c = make(chan struct{})
		n.ch[shard] = c
	}
	return c
}

// notify wakes every waiter of shard.
func (n *notifier) notify(shard raftstore.ShardID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c, ok := n.ch[shard]; ok {
		close(c)
		delete(n.ch, shard)
	}
}
