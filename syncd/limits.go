package syncd

import (
	"sync"
	"time"

	"github.com/syncd-dev/syncd/proto"
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

// take spends one token, or says how long until one is available.
func (b *bucket) take(now time.Time) (ok bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	if b.tokens >= 1-1e-9 { // a caller that waited exactly the advised time must get its token
		b.tokens = max(b.tokens-1, 0)
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / b.rate * float64(time.Second))
}

// retryAfterMs rounds a wait up to whole milliseconds, at least one: a client that waits what it
// was told must find the token there (rounding down made it come back a fraction too early).
func retryAfterMs(wait time.Duration) uint32 {
	return uint32(max((wait+time.Millisecond-1)/time.Millisecond, 1))
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
