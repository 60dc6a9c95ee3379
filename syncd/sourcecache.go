package syncd

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
)

// The source cache: one read per append per node for a large group's followers (issue #24).
//
// Every device of a large group's member that is online on a node has a follower of the group's
// conversation log (sources.go). An append wakes them all (the notifier, keyed by conversation),
// and each used to read the same just-written entries from its cursor: 1,000 followers, 1,000
// reads of the conversation's meta and entries per message, a fifth of the node's CPU in the
// benchmark (docs/BENCHMARKS.md). With the cache the first follower woken reads what was
// appended — from the end of what the cache holds, not from its own cursor — and every other
// follower of the conversation on the node is answered from the entries it read, already
// decoded.
//
// What the cache holds for a conversation of a shard (convCache): the answer of its last read of
// the log (epoch, first, head) and a window of the newest entries of that epoch, contiguous, the
// fill's channel of the notifier, and when it was filled. A follower's read is answered from it
// only while it is fresh:
//
//   - no append to the conversation was applied since the fill: the follower's own wake channel,
//     taken before it asks, is the very channel the fill took before its read (the notifier makes
//     a new one at each notify, so any notify after the fill's makes them differ, and a notify
//     before it was applied before the fill read: the read saw it);
//   - and the fill is younger than sourceCacheMaxAge. Appends are not the only changes of a
//     conversation log: retention trims its start, a move takes it to another shard (ErrMoved
//     here), a re-creation gives it another epoch, and none of those notify its followers. An
//     answer from the cache is exactly the answer the log gave at the fill, so it is an answer
//     that was true at most sourceCacheMaxAge ago: a trim or a move is seen that much later (a
//     follower then reads the log itself and gets TooOld, EpochChanged or ErrMoved as before),
//     which is less than a loaded node takes to write a frame to each of 1,000 followers.
//     A snapshot restore notifies every log of the shard (Touched.All): no fresh fill survives it.
//
// A stale cache is refilled by the next follower, under the conversation's mutex, so the
// followers woken by one append wait for one read rather than each making its own: it reads the
// log from the end of the window (or from the follower's own cursor when the window cannot be
// continued) and keeps what it read. A follower whose cursor is before the window (catching up),
// of another epoch, or just past a window a read's limits cut short reads the log itself.
// Positions, contiguity and the period cut-offs are unchanged: the cache answers a log.Read as
// the log does (entries from the follower's cursor, contiguous, within its limits; caught up past
// the head), and readSource cuts it as before.
//
// Bounded: at most sourceCacheEntries entries and sourceCacheBytes bytes (log.Entry.Size) per
// conversation, the oldest dropped first, and sourceCacheTotal bytes and sourceCacheConvs
// conversations on the node, the least recently used conversation dropped first.
//
// Remote replicas are not cached: a node without a replica of the group's shard long-polls one
// that has (remoteReader.readConvWait), and the load is on that node's read handler.
//
// Locks: sourceCache.mu and a convCache.mu are never held together (get evicts after releasing
// sourceCache.mu, and a follower takes its convCache.mu after get returns), and a goroutine holds
// at most one convCache.mu: there is no order to keep.

// Bounds and freshness of the source cache (see above).
const (
	sourceCacheMaxAge  = 25 * time.Millisecond // how old a fill may be and still answer reads
	sourceCacheEntries = 1024                  // newest entries kept per conversation
	sourceCacheBytes   = 1 << 20               // bytes of entries kept per conversation
	sourceCacheTotal   = 64 << 20              // bytes of entries kept on the node
	sourceCacheConvs   = 4096                  // conversations kept on the node
)

// sourceCache is the node's cache of large groups' conversation logs, shared by every follower
// of every sync stream of the node. Safe for concurrent use. The entries it returns are shared:
// callers must not modify them (readSource and syncBatch only read and re-slice them).
type sourceCache struct {
	mu    sync.Mutex
	convs map[convCacheKey]*convCache

	held                   atomic.Int64 // bytes of entries held, over every conversation
	hits, reads, fallbacks atomic.Uint64
	evictions              atomic.Uint64
}

// convCacheKey names a conversation log of a shard: a conversation moved to another shard is
// another log for the cache (the old one answers ErrMoved).
type convCacheKey struct {
	shard raftstore.ShardID
	conv  string
}

// convCache is the cache of one conversation log of one shard (see sourceCache).
type convCache struct {
	sc   *sourceCache
	used atomic.Int64 // Unix ns of the last read: the least recently used goes first

	mu      sync.Mutex
	dead    bool            // evicted: neither used nor filled any more
	valid   <-chan struct{} // the notifier's channel the fill took before its read (nil: no fill)
	filled  time.Time       // when the fill read the log
	info    log.LogInfo     // the log's epoch, first and head as the fill read them
	lo      log.Position    // the position of entries[0] (of info.Epoch)
	entries []log.Entry     // lo, lo+1, …: contiguous, never past info.Head; shared, read-only
	bytes   int             // Size of entries
}

func newSourceCache() *sourceCache {
	return &sourceCache{convs: map[convCacheKey]*convCache{}}
}

// convReader reads a conversation log: a shard's local replica (log.Shard.ReadConv).
type convReader interface {
	ReadConv(conv string, epoch log.Epoch, from log.Position, lim log.Limit) (log.Read, error)
}

// read answers a follower's read of conv's log on shard from position from, in epoch epoch (0:
// any), within lim, as rd.ReadConv would: from the cache when it is fresh and covers from, else
// by a read of the log. wake is the channel of the notifier the follower took for conv before
// calling (notifier.waitConv): the cache's freshness is checked against it. The entries returned
// are shared and must not be modified.
func (sc *sourceCache) read(rd convReader, shard raftstore.ShardID, conv string, epoch log.Epoch, from log.Position, lim log.Limit, wake <-chan struct{}) (log.Read, error) {
	if from == 0 || wake == nil {
		return rd.ReadConv(conv, epoch, from, lim) // the log's own answer (an invalid position)
	}
	c := sc.get(shard, conv)
	c.mu.Lock()
	before := c.bytes
	res, served, err := c.readLocked(rd, conv, epoch, from, lim, wake)
	if !c.dead { // an evicted one's bytes are not counted any more
		sc.held.Add(int64(c.bytes - before))
	}
	c.mu.Unlock()
	if served {
		sc.hits.Add(1)
		return res, err
	}
	if err != nil {
		return res, err
	}
	sc.fallbacks.Add(1)
	return rd.ReadConv(conv, epoch, from, lim)
}

// readLocked is read's part under c's mutex: it refills c if it is stale and answers from it,
// reporting served; served false with a nil error means the follower reads the log itself. An
// error is the log's answer to the fill read (ErrMoved, ErrNoConversation…), for the follower.
// REQUIRES: c.mu.
func (c *convCache) readLocked(rd convReader, conv string, epoch log.Epoch, from log.Position, lim log.Limit, wake <-chan struct{}) (res log.Read, served bool, err error) {
	if c.dead {
		return log.Read{}, false, nil
	}
	c.used.Store(time.Now().UnixNano())
	if len(c.entries) > 0 && from < c.lo {
		return log.Read{}, false, nil // catching up from before the window: no fill for that
	}
	if c.valid != wake || closed(wake) || time.Since(c.filled) >= sourceCacheMaxAge {
		if ok, err := c.fillLocked(rd, conv, epoch, from, lim, wake); !ok || err != nil {
			return log.Read{}, false, err
		}
	}
	if epoch != 0 && epoch != c.info.Epoch {
		return log.Read{}, false, nil // another epoch: the log says which is current (EpochChanged)
	}
	return c.serveLocked(from, lim)
}

// closed reports whether ch is closed: a notify since it was taken (the fill is then stale too).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// fillLocked reads conv's log for the cache: from the end of the window (the appends since the
// last fill) when from is in it or just past it, else from from with the follower's own epoch
// and limits (the window starts again there). It reports whether the cache holds a fresh answer
// now; an error is the log's, which the follower gets. REQUIRES: c.mu.
func (c *convCache) fillLocked(rd convReader, conv string, epoch log.Epoch, from log.Position, lim log.Limit, wake <-chan struct{}) (bool, error) {
	next := c.lo + log.Position(len(c.entries))
	start, ep := from, epoch
	extend := c.valid != nil && from <= next
	if extend {
		start, ep = next, c.info.Epoch
		lim = log.Limit{Count: sourceCacheEntries, Bytes: sourceCacheBytes}
	}
	c.sc.reads.Add(1)
	res, err := rd.ReadConv(conv, ep, start, lim)
	if err != nil {
		c.dropLocked()
		return false, err
	}
	switch res.Status {
	case log.ReadEntries:
		if !extend || res.Info.Epoch != c.info.Epoch {
			c.dropLocked()
			c.lo = start
		}
		c.appendLocked(res.Entries, res.Info.First)
	case log.ReadCaughtUp:
		if res.Info.Epoch != c.info.Epoch {
			c.dropLocked()
		}
		if len(c.entries) == 0 {
			c.lo = res.Info.Head + 1
		}
		c.trimLocked(res.Info.First)
	default: // TooOld, EpochChanged: the follower reads the log itself, and gets that answer
		c.dropLocked()
		return false, nil
	}
	c.valid, c.filled, c.info = wake, time.Now(), res.Info
	return true, nil
}

// appendLocked adds es (read from the end of the window) and keeps the window within its bounds
// and at or after first, the log's first retained position. REQUIRES: c.mu.
func (c *convCache) appendLocked(es []log.Entry, first log.Position) {
	for i := range es {
		c.bytes += es[i].Size()
	}
	c.entries = append(c.entries, es...)
	c.trimLocked(first)
}

// trimLocked drops the entries below first and the oldest beyond the bounds. The window's array
// is shared with answers still being sent: it is never written below its length, only re-sliced
// or replaced. REQUIRES: c.mu.
func (c *convCache) trimLocked(first log.Position) {
	drop := 0
	if first > c.lo {
		drop = min(int(first-c.lo), len(c.entries))
	}
	bytes := c.bytes
	for i := range drop {
		bytes -= c.entries[i].Size()
	}
	for len(c.entries)-drop > sourceCacheEntries || len(c.entries)-drop > 1 && bytes > sourceCacheBytes {
		bytes -= c.entries[drop].Size()
		drop++
	}
	if drop == 0 {
		return
	}
	c.entries = c.entries[drop:]
	c.lo += log.Position(drop)
	c.bytes = bytes
	if cap(c.entries) > 2*sourceCacheEntries { // let the array behind the dropped entries go
		c.entries = append([]log.Entry(nil), c.entries...)
	}
}

// dropLocked empties the cache of the conversation: no fill, no entries. REQUIRES: c.mu.
func (c *convCache) dropLocked() {
	c.valid, c.entries, c.bytes, c.lo, c.info = nil, nil, 0, 0, log.LogInfo{}
}

// serveLocked answers a read from from within lim from a fresh cache, as readForward does: caught
// up past the head, else the entries from from (at least one, then while fewer than lim.Count and
// under lim.Bytes). served is false when from is not in the window (the window was cut short by
// its read's limits). REQUIRES: c.mu.
func (c *convCache) serveLocked(from log.Position, lim log.Limit) (log.Read, bool, error) {
	if from > c.info.Head {
		return log.Read{Status: log.ReadCaughtUp, Info: c.info}, true, nil
	}
	next := c.lo + log.Position(len(c.entries))
	if from < c.lo || from >= next || from < c.info.First {
		return log.Read{}, false, nil
	}
	if lim.Count <= 0 {
		lim.Count = log.DefaultReadCount
	}
	if lim.Bytes <= 0 {
		lim.Bytes = log.DefaultReadBytes
	}
	i := int(from - c.lo)
	j, size := i, 0
	for j < len(c.entries) && j-i < lim.Count && (j == i || size < lim.Bytes) {
		size += c.entries[j].Size()
		j++
	}
	return log.Read{Status: log.ReadEntries, Info: c.info, Entries: c.entries[i:j:j]}, true, nil
}

// get returns the cache of conv's log on shard, making it (and evicting the least recently used
// beyond sourceCacheConvs or sourceCacheTotal) if there is none.
func (sc *sourceCache) get(shard raftstore.ShardID, conv string) *convCache {
	k := convCacheKey{shard: shard, conv: conv}
	sc.mu.Lock()
	c := sc.convs[k]
	if c == nil {
		c = &convCache{sc: sc}
		sc.convs[k] = c
	}
	var victims []*convCache
	for len(sc.convs) > sourceCacheConvs || sc.held.Load() > sourceCacheTotal && len(sc.convs) > 1 {
		v := sc.lruLocked(c)
		if v == nil {
			break
		}
		victims = append(victims, v)
		if len(victims) >= 16 { // the bytes counted fall as the victims are emptied, below
			break
		}
	}
	sc.mu.Unlock()
	for _, v := range victims {
		v.mu.Lock()
		if !v.dead {
			v.dead = true
			sc.held.Add(-int64(v.bytes))
			v.dropLocked()
		}
		v.mu.Unlock()
		sc.evictions.Add(1)
	}
	return c
}

// lruLocked removes and returns the least recently used conversation but keep. REQUIRES: sc.mu.
func (sc *sourceCache) lruLocked(keep *convCache) *convCache {
	var vk convCacheKey
	var v *convCache
	for k, c := range sc.convs {
		if c != keep && (v == nil || c.used.Load() < v.used.Load()) {
			vk, v = k, c
		}
	}
	if v != nil {
		delete(sc.convs, vk)
	}
	return v
}

// registerSourceCacheMetrics registers the cache's metrics on reg, read at scrape time: what it
// holds, and how follower reads were answered (hits: from the cache; fills: one per append, and
// one per sourceCacheMaxAge while followers come, on a busy conversation; misses: the follower
// read the log itself). NewServer is to call it beside registerAnswerMetrics
// (registerSourceCacheMetrics(reg, s.notes.cache)); until server.go does, only tests call it.
func registerSourceCacheMetrics(reg prometheus.Registerer, sc *sourceCache) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "syncd_source_cache_bytes", Help: "Bytes of large groups' entries the node's source cache holds.",
		}, func() float64 { return float64(sc.held.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "syncd_source_cache_hits_total", Help: "Reads of large groups' logs by sync streams answered from the source cache.",
		}, func() float64 { return float64(sc.hits.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "syncd_source_cache_fills_total", Help: "Reads of large groups' logs made to fill the source cache.",
		}, func() float64 { return float64(sc.reads.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "syncd_source_cache_misses_total", Help: "Reads of large groups' logs by sync streams the source cache could not answer (a cursor before what it holds, another epoch).",
		}, func() float64 { return float64(sc.fallbacks.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "syncd_source_cache_evictions_total", Help: "Conversations dropped from the source cache to keep it within its bounds.",
		}, func() float64 { return float64(sc.evictions.Load()) }),
	)
}
