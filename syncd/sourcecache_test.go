package syncd

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
)

// fakeConvLog is a conversation log for the source cache's tests: it answers ReadConv as
// log.Shard does (readForward: the epoch, TooOld, caught up, then entries within the limits) and
// counts its reads. Safe for concurrent use.
type fakeConvLog struct {
	mu      sync.Mutex
	epoch   log.Epoch
	first   log.Position
	entries []log.Entry // first, first+1, …
	err     error       // answered by every read (ErrMoved: the conversation moved away)
	reads   atomic.Int64
}

func newFakeConvLog(n int) *fakeConvLog {
	l := &fakeConvLog{epoch: 1, first: 1}
	l.append(n)
	return l
}

func (l *fakeConvLog) head() log.Position { return l.first + log.Position(len(l.entries)) - 1 }

// append adds n messages, each naming its epoch and position in its body.
func (l *fakeConvLog) append(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for range n {
		seq := l.head() + 1
		l.entries = append(l.entries, log.Entry{Seq: seq, ConvSeq: seq, Conv: "g", Kind: log.KindMessage,
			Sender: "owner", Body: fmt.Appendf(nil, "e%d/%d", l.epoch, seq)})
	}
}

// recreate makes the log a new one, of the next epoch, with n entries.
func (l *fakeConvLog) recreate(n int) {
	l.mu.Lock()
	l.epoch, l.first, l.entries = l.epoch+1, 1, nil
	l.mu.Unlock()
	l.append(n)
}

// trim removes the entries below first (retention).
func (l *fakeConvLog) trim(first log.Position) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = l.entries[first-l.first:]
	l.first = first
}

func (l *fakeConvLog) ReadConv(conv string, epoch log.Epoch, from log.Position, lim log.Limit) (log.Read, error) {
	l.reads.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return log.Read{}, l.err
	}
	info := log.LogInfo{Epoch: l.epoch, First: l.first, Head: l.head()}
	switch {
	case from == 0:
		return log.Read{}, errors.New("read position must be 1 or more")
	case epoch != 0 && epoch != l.epoch:
		return log.Read{Status: log.ReadEpochChanged, Info: info}, nil
	case from < l.first:
		return log.Read{Status: log.ReadTooOld, Info: info}, nil
	case from > info.Head:
		return log.Read{Status: log.ReadCaughtUp, Info: info}, nil
	}
	if lim.Count <= 0 {
		lim.Count = log.DefaultReadCount
	}
	if lim.Bytes <= 0 {
		lim.Bytes = log.DefaultReadBytes
	}
	var out []log.Entry
	size := 0
	for i := int(from - l.first); i < len(l.entries) && len(out) < lim.Count && (len(out) == 0 || size < lim.Bytes); i++ {
		out = append(out, l.entries[i]) // a copy, as the store's decoded entries are the caller's
		size += l.entries[i].Size()
	}
	return log.Read{Status: log.ReadEntries, Info: info, Entries: out}, nil
}

// cacheFollower is one follower's side of the test: its cursor, read through the cache as readSource
// reads it (the wake channel first).
type cacheFollower struct {
	n     *notifier
	l     *fakeConvLog
	epoch log.Epoch
	pos   log.Position
}

const testShard raftstore.ShardID = 3

// read reads once from the cursor and, if it got entries, checks and takes them: contiguous from
// the cursor, of the follower's epoch, each entry the one the log has there.
func (f *cacheFollower) read(t *testing.T, lim log.Limit) (log.Read, <-chan struct{}) {
	t.Helper()
	wake := f.n.waitConv(testShard, "g")
	res, err := f.n.cache.read(f.l, testShard, "g", f.epoch, f.pos+1, lim, wake)
	if err != nil {
		t.Fatalf("read from %d: %v", f.pos+1, err)
	}
	if res.Status == log.ReadEntries {
		if len(res.Entries) == 0 || lim.Count > 0 && len(res.Entries) > lim.Count {
			t.Fatalf("read from %d: %d entries (limit %d)", f.pos+1, len(res.Entries), lim.Count)
		}
		for _, e := range res.Entries {
			if e.Seq != f.pos+1 {
				t.Fatalf("entry %d after %d: not contiguous", e.Seq, f.pos)
			}
			if want := fmt.Sprintf("e%d/%d", res.Info.Epoch, e.Seq); string(e.Body) != want {
				t.Fatalf("entry %d is %q, want %q", e.Seq, e.Body, want)
			}
			f.pos = e.Seq
		}
		if res.Info.Head < f.pos {
			t.Fatalf("head %d below the last entry %d", res.Info.Head, f.pos)
		}
		f.epoch = res.Info.Epoch
	}
	return res, wake
}

// The followers woken by one append share one read of the log; each gets exactly its entries.
func TestSourceCacheOneReadPerAppend(t *testing.T) {
	n := newNotifier()
	l := newFakeConvLog(5)
	fs := make([]*cacheFollower, 100)
	for i := range fs {
		fs[i] = &cacheFollower{n: n, l: l}
	}
	for _, f := range fs {
		if res, _ := f.read(t, log.Limit{}); res.Status != log.ReadEntries || f.pos != 5 {
			t.Fatalf("first read: %v at %d, want the 5 entries", res.Status, f.pos)
		}
	}
	if got := l.reads.Load(); got > 2 { // one; two if the fill aged past sourceCacheMaxAge meanwhile
		t.Fatalf("100 followers from the same cursor made %d reads of the log, want 1", got)
	}
	for round := range 3 {
		l.append(2)
		n.notify(testShard, log.Touched{Convs: []string{"g"}})
		before := l.reads.Load()
		for _, f := range fs {
			if res, _ := f.read(t, log.Limit{Count: 1}); res.Status != log.ReadEntries || f.pos != log.Position(6+2*round) {
				t.Fatalf("round %d: %v at %d", round, res.Status, f.pos)
			}
			if res, _ := f.read(t, log.Limit{Count: 1}); res.Status != log.ReadEntries || f.pos != log.Position(7+2*round) {
				t.Fatalf("round %d, second read: %v at %d", round, res.Status, f.pos)
			}
			if res, _ := f.read(t, log.Limit{}); res.Status != log.ReadCaughtUp || res.Info.Head != f.pos {
				t.Fatalf("round %d: %v with head %d at %d, want caught up", round, res.Status, res.Info.Head, f.pos)
			}
		}
		if got := l.reads.Load() - before; got > 2 { // one; two if the fill aged past sourceCacheMaxAge meanwhile
			t.Fatalf("round %d: %d reads of the log for one append and 100 followers", round, got)
		}
	}
}

// A notify makes the cache stale at once: an append is never hidden from a follower by a fill
// made before it, even a young one.
func TestSourceCacheSeesAppendAfterNotify(t *testing.T) {
	n := newNotifier()
	l := newFakeConvLog(3)
	f := &cacheFollower{n: n, l: l}
	f.read(t, log.Limit{})
	res, wake := f.read(t, log.Limit{})
	if res.Status != log.ReadCaughtUp {
		t.Fatalf("got %v, want caught up", res.Status)
	}
	l.append(1)
	n.notify(testShard, log.Touched{Convs: []string{"g"}})
	select {
	case <-wake:
	default:
		t.Fatal("the follower's wake channel is not closed by the notify")
	}
	if res, _ := f.read(t, log.Limit{}); res.Status != log.ReadEntries || f.pos != 4 {
		t.Fatalf("after the append: %v at %d, want entry 4", res.Status, f.pos)
	}
	// A follower still holding the channel of before the notify (it read just before) is not
	// answered from a fill made with it.
	old := n.waitConv(testShard, "g")
	l.append(1)
	n.notify(testShard, log.Touched{Convs: []string{"g"}})
	res, err := n.cache.read(l, testShard, "g", 1, 5, log.Limit{}, old)
	if err != nil || res.Status != log.ReadEntries || res.Entries[0].Seq != 5 {
		t.Fatalf("with a closed wake channel: %v %v, want entry 5", res.Status, err)
	}
}

// Followers behind the window, of another epoch, or past a window cut short read the log
// themselves and get its answer.
func TestSourceCacheFallsBack(t *testing.T) {
	n := newNotifier()
	l := newFakeConvLog(sourceCacheEntries + 100)
	ahead := &cacheFollower{n: n, l: l, pos: 50}
	ahead.read(t, log.Limit{Count: sourceCacheEntries}) // the window: 51 … 50+sourceCacheEntries
	behind := &cacheFollower{n: n, l: l, pos: 10}
	before := l.reads.Load()
	for behind.pos < l.head() {
		if res, _ := behind.read(t, log.Limit{Count: 7}); res.Status != log.ReadEntries {
			t.Fatalf("behind: %v at %d", res.Status, behind.pos)
		}
	}
	if l.reads.Load() == before {
		t.Fatal("a follower from before the window read nothing from the log")
	}
	for ahead.pos < l.head() {
		ahead.read(t, log.Limit{Count: 100})
	}
	if res, _ := ahead.read(t, log.Limit{}); res.Status != log.ReadCaughtUp {
		t.Fatalf("ahead: %v at %d, want caught up", res.Status, ahead.pos)
	}
}

// A re-created log (another epoch) is seen: at once when it notifies, within sourceCacheMaxAge
// when it does not; followers of the old epoch get EpochChanged, new ones the new log's entries,
// never one of the old.
func TestSourceCacheEpochChange(t *testing.T) {
	for _, notify := range []bool{true, false} {
		t.Run(fmt.Sprintf("notify=%v", notify), func(t *testing.T) {
			n := newNotifier()
			l := newFakeConvLog(10)
			old := &cacheFollower{n: n, l: l, pos: 4}
			old.read(t, log.Limit{Count: 3})
			l.recreate(12)
			if notify {
				n.notify(testShard, log.Touched{All: true}) // a snapshot restore
			} else {
				time.Sleep(sourceCacheMaxAge + 5*time.Millisecond)
			}
			wake := n.waitConv(testShard, "g")
			res, err := n.cache.read(l, testShard, "g", old.epoch, old.pos+1, log.Limit{}, wake)
			if err != nil || res.Status != log.ReadEpochChanged || res.Info.Epoch != 2 {
				t.Fatalf("old epoch: %v epoch %d, %v; want EpochChanged to 2", res.Status, res.Info.Epoch, err)
			}
			fresh := &cacheFollower{n: n, l: l, epoch: 2}
			if fresh.read(t, log.Limit{}); fresh.pos != 12 {
				t.Fatalf("new epoch: at %d, want 12", fresh.pos)
			}
			zero := &cacheFollower{n: n, l: l} // epoch 0: whatever the log's is
			if res, _ := zero.read(t, log.Limit{}); res.Info.Epoch != 2 || zero.pos != 12 {
				t.Fatalf("epoch 0: epoch %d at %d, want 2 at 12", res.Info.Epoch, zero.pos)
			}
		})
	}
}

// A trim is seen within sourceCacheMaxAge: a follower below the log's first retained position
// gets TooOld, and the cache keeps nothing below it.
func TestSourceCacheTrim(t *testing.T) {
	for _, appendToo := range []bool{false, true} {
		t.Run(fmt.Sprintf("append=%v", appendToo), func(t *testing.T) { testSourceCacheTrim(t, appendToo) })
	}
}

func testSourceCacheTrim(t *testing.T, appendToo bool) {
	n := newNotifier()
	l := newFakeConvLog(20)
	f := &cacheFollower{n: n, l: l}
	f.read(t, log.Limit{}) // the window: 1 … 20
	l.trim(15)
	if appendToo {
		l.append(2) // the fill then reads entries, not a caught-up answer
	}
	time.Sleep(sourceCacheMaxAge + 5*time.Millisecond)
	wake := n.waitConv(testShard, "g")
	res, err := n.cache.read(l, testShard, "g", 1, 3, log.Limit{}, wake)
	if err != nil || res.Status != log.ReadTooOld || res.Info.First != 15 {
		t.Fatalf("below the trim: %v first %d, %v; want TooOld at 15", res.Status, res.Info.First, err)
	}
	c := n.cache.get(testShard, "g")
	c.mu.Lock()
	lo := c.lo
	c.mu.Unlock()
	if lo < 15 {
		t.Fatalf("the cache keeps entries from %d after a trim to 15", lo)
	}
	g := &cacheFollower{n: n, l: l, pos: 14, epoch: 1}
	if g.read(t, log.Limit{}); g.pos != l.head() {
		t.Fatalf("at the trim: at %d, want %d", g.pos, l.head())
	}
}

// A conversation that moved away answers ErrMoved to its followers (within sourceCacheMaxAge), so
// they follow it; the cache keeps nothing of it.
func TestSourceCacheMoved(t *testing.T) {
	n := newNotifier()
	l := newFakeConvLog(5)
	f := &cacheFollower{n: n, l: l}
	f.read(t, log.Limit{})
	l.mu.Lock()
	l.err = log.ErrMoved
	l.mu.Unlock()
	time.Sleep(sourceCacheMaxAge + 5*time.Millisecond)
	wake := n.waitConv(testShard, "g")
	if _, err := n.cache.read(l, testShard, "g", 1, 6, log.Limit{}, wake); !errors.Is(err, log.ErrMoved) {
		t.Fatalf("after the move: %v, want ErrMoved", err)
	}
	if _, err := n.cache.read(l, testShard, "g", 1, 2, log.Limit{}, wake); !errors.Is(err, log.ErrMoved) {
		t.Fatalf("after the move, from inside the old window: %v, want ErrMoved", err)
	}
}

// Many followers and an appender at once (run with -race): every follower gets every entry once,
// in order, and the followers share reads.
func TestSourceCacheConcurrentAppends(t *testing.T) {
	n := newNotifier()
	l := newFakeConvLog(1)
	const appends, followers = 300, 40
	var wg sync.WaitGroup
	errs := make(chan error, followers)
	for i := range followers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := &cacheFollower{n: n, l: l}
			lim := log.Limit{Count: 1 + i%4}
			deadline := time.Now().Add(30 * time.Second)
			for f.pos < appends+1 {
				if time.Now().After(deadline) {
					errs <- fmt.Errorf("follower %d stuck at %d", i, f.pos)
					return
				}
				wake := n.waitConv(testShard, "g")
				res, err := n.cache.read(l, testShard, "g", f.epoch, f.pos+1, lim, wake)
				if err != nil {
					errs <- err
					return
				}
				switch res.Status {
				case log.ReadEntries:
					for _, e := range res.Entries {
						if e.Seq != f.pos+1 || string(e.Body) != fmt.Sprintf("e1/%d", e.Seq) {
							errs <- fmt.Errorf("follower %d: entry %d (%q) after %d", i, e.Seq, e.Body, f.pos)
							return
						}
						f.pos = e.Seq
					}
					f.epoch = res.Info.Epoch
				case log.ReadCaughtUp:
					if res.Info.Head < f.pos {
						errs <- fmt.Errorf("follower %d: head %d below %d", i, res.Info.Head, f.pos)
						return
					}
					select {
					case <-wake:
					case <-time.After(time.Second):
						errs <- fmt.Errorf("follower %d: not woken at %d (head %d)", i, f.pos, l.head())
						return
					}
				default:
					errs <- fmt.Errorf("follower %d: %v", i, res.Status)
					return
				}
			}
		}()
	}
	for range appends {
		l.append(1)
		n.notify(testShard, log.Touched{Convs: []string{"g"}})
		time.Sleep(100 * time.Microsecond)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if reads := l.reads.Load(); reads >= appends*followers/2 {
		t.Errorf("%d reads of the log for %d appends and %d followers: the cache shares too few", reads, appends, followers)
	}
}

// The cache stays within its bounds: entries and bytes per conversation, bytes and conversations
// on the node; the bytes it counts are the bytes it holds.
func TestSourceCacheBounds(t *testing.T) {
	n := newNotifier()
	l := newFakeConvLog(3 * sourceCacheEntries)
	f := &cacheFollower{n: n, l: l}
	for f.pos < l.head() {
		f.read(t, log.Limit{Count: 500})
		time.Sleep(sourceCacheMaxAge) // each read a fill, extending the window
	}
	c := n.cache.get(testShard, "g")
	c.mu.Lock()
	if len(c.entries) > sourceCacheEntries || c.bytes > sourceCacheBytes {
		t.Errorf("one conversation holds %d entries, %d bytes (bounds %d, %d)", len(c.entries), c.bytes, sourceCacheEntries, sourceCacheBytes)
	}
	if c.lo+log.Position(len(c.entries))-1 != l.head() {
		t.Errorf("the window ends at %d, the head is %d", c.lo+log.Position(len(c.entries))-1, l.head())
	}
	c.mu.Unlock()

	// Many conversations of large entries: the node's bounds.
	big := &fakeConvLog{epoch: 1, first: 1}
	for i := range 40 {
		big.entries = append(big.entries, log.Entry{Seq: log.Position(i + 1), Body: make([]byte, 64<<10)})
	}
	for i := range sourceCacheConvs + 50 {
		conv := fmt.Sprintf("c%d", i)
		wake := n.waitConv(testShard, conv)
		if _, err := n.cache.read(big, testShard, conv, 0, 1, log.Limit{Count: 40, Bytes: 4 << 20}, wake); err != nil {
			t.Fatal(err)
		}
	}
	n.cache.mu.Lock()
	convs := len(n.cache.convs)
	held := 0
	for _, c := range n.cache.convs {
		c.mu.Lock()
		held += c.bytes
		c.mu.Unlock()
	}
	n.cache.mu.Unlock()
	if convs > sourceCacheConvs {
		t.Errorf("%d conversations held (bound %d)", convs, sourceCacheConvs)
	}
	if got := n.cache.held.Load(); got != int64(held) {
		t.Errorf("the cache counts %d bytes, holds %d", got, held)
	}
	if held > sourceCacheTotal+sourceCacheBytes+64<<10 { // the one being filled may pass the bound until the next get
		t.Errorf("%d bytes held (bound %d)", held, sourceCacheTotal)
	}
	if n.cache.evictions.Load() == 0 {
		t.Error("nothing evicted")
	}
}

// The cache's metrics register and read what it counts.
func TestSourceCacheMetrics(t *testing.T) {
	n := newNotifier()
	reg := prometheus.NewRegistry()
	registerSourceCacheMetrics(reg, n.cache)
	l := newFakeConvLog(3)
	for range 3 {
		(&cacheFollower{n: n, l: l}).read(t, log.Limit{})
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[mf.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{"syncd_source_cache_hits_total": 3, "syncd_source_cache_fills_total": 1,
		"syncd_source_cache_misses_total": 0, "syncd_source_cache_evictions_total": 0}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s = %v, want %v", name, got[name], v)
		}
	}
	if got["syncd_source_cache_bytes"] <= 0 {
		t.Errorf("syncd_source_cache_bytes = %v, want the entries held", got["syncd_source_cache_bytes"])
	}
}
