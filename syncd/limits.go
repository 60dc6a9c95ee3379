package syncd

import (
	"context"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore"
)

// bucket is a token bucket: rate tokens per second, at most burst saved up. Safe for concurrent
// use.
type bucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

func newBucket(rate float64, burst int) *bucket {
	return &bucket{rate: rate, burst: float64(burst), tokens: float64(burst), last: time.Now()}
}

// take spends n tokens (n at most the burst), or says how long until they are available.
func (b *bucket) take(now time.Time, n float64) (ok bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.After(b.last) { // callers read the clock before they find the bucket: an earlier now adds nothing
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
		b.last = now
	}
	if b.tokens >= n-1e-9 { // a caller that waited exactly the advised time must get its tokens
		b.tokens = max(b.tokens-n, 0)
		return true, 0
	}
	return false, time.Duration((n - b.tokens) / b.rate * float64(time.Second))
}

// full reports whether b has refilled completely by now: it is then the same as a new bucket.
func (b *bucket) full(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tokens+now.Sub(b.last).Seconds()*b.rate >= b.burst
}

// buckets holds one token bucket per key (a device, a user), shared by all of the key's
// connections, so that opening more connections buys no more rate. Safe for concurrent use.
type buckets struct {
	rate  float64
	burst int

	mu    sync.Mutex
	m     map[string]*bucket
	swept time.Time
}

func newBuckets(rate float64, burst int) *buckets {
	return &buckets{rate: rate, burst: burst, m: map[string]*bucket{}, swept: time.Now()}
}

// bucketSweepEvery is how often buckets drops the buckets that have refilled; their keys get a
// new, full bucket when they come back, which is what they would have had. So the map holds
// only keys active in the last refill time, not every key ever seen.
const bucketSweepEvery = time.Minute

// take spends n tokens of key's bucket; see bucket.take.
func (bs *buckets) take(key string, now time.Time, n float64) (ok bool, wait time.Duration) {
	bs.mu.Lock()
	if now.Sub(bs.swept) > bucketSweepEvery {
		bs.swept = now
		for k, b := range bs.m {
			if b.full(now) {
				delete(bs.m, k)
			}
		}
	}
	b := bs.m[key]
	if b == nil {
		b = newBucket(bs.rate, bs.burst)
		bs.m[key] = b
	}
	bs.mu.Unlock()
	return b.take(now, n)
}

// retryAfterMs rounds a wait up to whole milliseconds, at least one: a client that waits what it
// was told must find the token there (rounding down made it come back a fraction too early).
func retryAfterMs(wait time.Duration) uint32 {
	return uint32(max((wait+time.Millisecond-1)/time.Millisecond, 1))
}

// rateLimited is the answer to a request over one of the rate limits.
func rateLimited(id uint64, msg string, wait time.Duration) *proto.Error {
	return &proto.Error{ID: id, Code: proto.CodeRateLimited, Message: msg, RetryAfterMs: retryAfterMs(wait)}
}

// gate is a non-blocking counting semaphore: admission either succeeds now or is refused, so
// overload turns into fast "retry after" answers instead of queues that end in timeouts.
type gate chan struct{}

func (g gate) enter() bool {
	select {
	case g <- struct{}{}:
		return true
	default:
		return false
	}
}

func (g gate) leave() { <-g }

// overloaded is the answer to a request or connection refused by a gate.
func overloaded(id uint64, what string, retry time.Duration) *proto.Error {
	return &proto.Error{ID: id, Code: proto.CodeOverloaded, Message: "server overloaded (" + what + "); retry later",
		RetryAfterMs: retryAfterMs(retry)}
}

// counts is a counter per key with a cap (the connections of each user). Safe for concurrent use.
type counts struct {
	mu sync.Mutex
	m  map[string]int
}

// enter counts one more for key unless it has max already.
func (c *counts) enter(key string, max int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	if c.m[key] >= max {
		return false
	}
	c.m[key]++
	return true
}

// leave counts one less for key.
func (c *counts) leave(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[key]--; c.m[key] <= 0 {
		delete(c.m, key)
	}
}

// checkGroupsPerUser refuses a group creation or addition naming a user who is already in
// Config.MaxGroupsPerUser groups (the creator counts as named), or, when the adder is someone the
// user has not talked to, in the strangers' share of them (strangerGroups; groupquota.go). Each
// user's count lives on the user's own shard, read here from a replica; so it trails the
// additions being delivered, which the seats this node holds for the changes it admitted make up
// for (groupSeats); and one naming a user already in the group counts that user too (the change
// would be no change for them anyway).
func (s *Server) checkGroupsPerUser(ctx context.Context, app *log.Append) error {
	named := app.Members
	if app.Kind == log.KindGroupCreate {
		named = append([]string{app.Sender}, named...)
	}
	// Read by shard; a split user's count is the sum over its sub-logs (log.Shard.UserGroups).
	byShard := map[raftstore.ShardID][]string{}
	var order []raftstore.ShardID
	owner := map[string]int{} // log → index in named
	for i, uid := range named {
		if _, seen := owner[uid]; seen {
			continue // named twice: counted once
		}
		for _, id := range s.slots.Logs(uid) {
			sh := s.slots.UserShard(id)
			if byShard[sh] == nil {
				order = append(order, sh)
			}
			byShard[sh] = append(byShard[sh], id)
			owner[id] = i
		}
	}
	counts := make([]int, len(named))
	for _, sh := range order {
		ids := byShard[sh]
		r, err := s.reader(ctx, sh)
		if err != nil {
			return err
		}
		n, err := r.UserGroups(ids)
		if err != nil {
			return err
		}
		for j, id := range ids {
			counts[owner[id]] += n[j]
		}
	}
	// Whether each user at or past the strangers' share has talked to the adder: read before
	// the seats' lock (a read may cross nodes); a user who reaches the share meanwhile is
	// counted as not having talked to the adder.
	limit, shared := s.cfg.MaxGroupsPerUser, strangerGroups(s.cfg.MaxGroupsPerUser)
	talked := make([]bool, len(named))
	now := time.Now()
	for i, uid := range named {
		talked[i] = uid == app.Sender // the creator's own group counts against the whole quota
		if !talked[i] && s.groupSeats.effective(uid, counts[i], now) >= shared {
			talked[i] = s.talkedTo(ctx, uid, app.Sender)
		}
	}
	// In the order the users are named (the creator first), so that the refusal names the first
	// user at the limit, not one a map's order picked.
	return s.groupSeats.admit(named, counts, now, func(i, n int) error {
		switch {
		case n >= limit:
			return proto.Errorf(proto.CodeTooManyGroups, "%s is already in %d groups, at most %d (leave them out, or they leave a group first)",
				named[i], n, limit)
		case n >= shared && !talked[i]:
			return proto.Errorf(proto.CodeTooManyGroups, "%s is in %d groups and has not talked to %s: groups of people %s has not talked to fill at most %d of their %d (%s can add them once they read a message of yours in your direct conversation)",
				named[i], n, app.Sender, named[i], shared, limit, app.Sender)
		}
		return nil
	})
}
