package syncd

import (
	"sync"

	"github.com/syncd-dev/syncd/raftstore"
)

// notifier wakes sync streams when their user's log grows. A stream takes the current channel of
// its (shard, user) and blocks on it; a notify closes it (a broadcast to that user's devices) and
// the next wait creates a fresh one. A stream then re-reads the log: a wake-up is a hint, the log
// is the truth, so a spurious or coalesced wake-up costs one read and never an entry.
//
// Wake-ups are per user (raftstore.App.UserLogsChanged reports which user logs a batch touched),
// so an append for one user does not make every idle stream of the shard read its log.
//
// Safe for concurrent use; the notify methods never block (they run on a shard's apply
// goroutine).
type notifier struct {
	mu sync.Mutex
	ch map[raftstore.ShardID]map[string]chan struct{}
}

func newNotifier() *notifier { return &notifier{ch: map[raftstore.ShardID]map[string]chan struct{}{}} }

// wait returns a channel that is closed at the next notify of uid (or of its whole shard).
func (n *notifier) wait(shard raftstore.ShardID, uid string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	users := n.ch[shard]
	if users == nil {
		users = map[string]chan struct{}{}
		n.ch[shard] = users
	}
	c, ok := users[uid]
	if !ok {
		c = make(chan struct{})
		users[uid] = c
	}
	return c
}

// notify wakes the waiters of the given users of shard; nil users wakes every waiter of the
// shard (after a snapshot restore, any log may have changed).
func (n *notifier) notify(shard raftstore.ShardID, uids []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	users := n.ch[shard]
	if uids == nil {
		for _, c := range users {
			close(c)
		}
		delete(n.ch, shard)
		return
	}
	for _, uid := range uids {
		if c, ok := users[uid]; ok {
			close(c)
			delete(users, uid)
		}
	}
}
