package syncd

import (
	"sync"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
)

// notifier wakes sync streams when a log they read grows: a user's log, or a large group's
// conversation log that its members' devices follow as a source. A stream takes the current
// channel of its (shard, log) and blocks on it; a notify closes it (a broadcast to every stream
// reading that log) and the next wait creates a fresh one. A stream then re-reads the log: a
// wake-up is a hint, the log is the truth, so a spurious or coalesced wake-up costs one read and
// never an entry.
//
// Wake-ups are per log (raftstore.App.LogsChanged reports which logs a batch touched), so an
// append for one user does not make every idle stream of the shard read its log, and a large
// group's message wakes its followers, not every stream.
//
// Safe for concurrent use; the notify methods never block (they run on a shard's apply
// goroutine).
type notifier struct {
	mu sync.Mutex
	ch map[raftstore.ShardID]map[logKey]chan struct{}

	// cache answers the followers of a large group woken by one append from one read of its log
	// (sourcecache.go). It lives here because its freshness is this notifier's channels: a fill
	// is current while the channel of its conversation it took is the one a follower takes.
	cache *sourceCache
}

// logKey names a log of a shard: a user's (or a sub-log's), or a conversation's. User and
// conversation ids are apart: a user and a group may have the same id.
type logKey struct {
	conv bool
	id   string
}

func newNotifier() *notifier {
	return &notifier{ch: map[raftstore.ShardID]map[logKey]chan struct{}{}, cache: newSourceCache()}
}

// wait returns a channel that is closed at the next notify of uid's log (or of its whole shard).
func (n *notifier) wait(shard raftstore.ShardID, uid string) <-chan struct{} {
	return n.waitLog(shard, logKey{id: uid})
}

// waitConv returns a channel that is closed at the next notify of conv's log (or of its whole
// shard).
func (n *notifier) waitConv(shard raftstore.ShardID, conv string) <-chan struct{} {
	return n.waitLog(shard, logKey{conv: true, id: conv})
}

func (n *notifier) waitLog(shard raftstore.ShardID, k logKey) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	logs := n.ch[shard]
	if logs == nil {
		logs = map[logKey]chan struct{}{}
		n.ch[shard] = logs
	}
	c, ok := logs[k]
	if !ok {
		c = make(chan struct{})
		logs[k] = c
	}
	return c
}

// notify wakes the waiters of the logs of shard that t names; t.All wakes every waiter of the
// shard (after a snapshot restore, any log may have changed).
func (n *notifier) notify(shard raftstore.ShardID, t log.Touched) {
	n.mu.Lock()
	defer n.mu.Unlock()
	logs := n.ch[shard]
	if t.All {
		for _, c := range logs {
			close(c)
		}
		delete(n.ch, shard)
		return
	}
	wake := func(k logKey) {
		if c, ok := logs[k]; ok {
			close(c)
			delete(logs, k)
		}
	}
	for _, uid := range t.Users {
		wake(logKey{id: uid})
	}
	for _, conv := range t.Convs {
		wake(logKey{conv: true, id: conv})
	}
}
