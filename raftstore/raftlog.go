package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// Key layout of the raft keyspace inside the node's shared Pebble DB.
//
// Every shard of a node writes into the same DB, so every key starts with a
// keyspace byte and the shard ID. All integers are fixed-width big-endian so
// that Pebble's bytewise ordering equals numeric ordering: a shard's log is
// one contiguous, index-ordered key range, which is what makes FirstIndex /
// LastIndex a single seek and DeleteRange a single range tombstone.
//
//	raft log entry (14 bytes):
//	+------+----------------+------+------------------------+
//	| 0x02 | shard u32 BE   | 0x01 | index u64 BE           |
//	+------+----------------+------+------------------------+
//	  1 B       4 B            1 B          8 B
//	value: encoded raft.Log (see encodeLog)
//
//	stable store (6 bytes + key):
//	+------+----------------+------+------------------------+
//	| 0x02 | shard u32 BE   | 0x02 | key bytes (raft's own) |
//	+------+----------------+------+------------------------+
//	value: raw bytes; SetUint64 stores 8 bytes big-endian
//
// Keyspace 0x01 is the shard STATE keyspace owned by package log; nothing
// here may read or write it.
const (
	raftKeyspace    byte = 0x02 // first byte of every key owned by raftLog
	raftLogSpace    byte = 0x01 // sub-keyspace: raft log entries
	raftStableSpace byte = 0x02 // sub-keyspace: raft stable store

	shardPrefixLen = 1 + 4 // keyspace | shard
	subPrefixLen   = shardPrefixLen + 1
	logKeyLen      = subPrefixLen + 8
)

// logFormatV1 is the leading version byte of every encoded raft.Log value.
// Bump it (and keep decoding the old one) if the layout ever changes.
const logFormatV1 byte = 1

// errKeyNotFound is returned by the stable store for a missing key.
//
// hashicorp/raft does not use errors.Is here: NewRaft, HasExistingState and
// vote restoration compare err.Error() == "not found" (the raft-boltdb
// convention) and treat anything else as a fatal storage error. The message
// must therefore be exactly "not found", without our usual prefix, or a
// shard could never start for the first time.
var errKeyNotFound = errors.New("not found")

// errStoreClosed is returned by reads after the node closed the store.
var errStoreClosed = errors.New("raftstore: raft log closed")

// raftLog is one shard's raft.LogStore and raft.StableStore, stored in the
// node's shared Pebble DB under the shard's own key prefix (see the key
// layout above).
//
// It is safe for concurrent use: raft calls FirstIndex/LastIndex/GetLog from
// replication and metrics goroutines while its main loop calls StoreLogs and
// the snapshot goroutine calls DeleteRange. Writers are serialised by a
// mutex so the cached first/last indexes are updated in the same order the
// writes were applied; readers only load atomics and never block.
//
// Every write is committed with pebble.Sync. Durability is the product: raft
// acknowledges an entry (and a vote or term) to its peers as soon as the
// store returns, so anything acked must already be fsynced or a crash could
// lose a committed message or let a node vote twice in one term.
type raftLog struct {
	db    *pebble.DB
	shard ShardID
	// writeTime, if set, records each StoreLogs (the node's latencies; set before raft starts).
	writeTime prometheus.Histogram

	// writeMu serialises StoreLogs, DeleteRange and dropAll so that the
	// index caches below always describe the latest applied write.
	writeMu sync.Mutex

	// first and last cache the lowest and highest stored log index; 0 when
	// the log is empty. Loaded from disk once at construction.
	first atomic.Uint64
	last  atomic.Uint64

	// closed is set when the node closes the store. hashicorp/raft leaves a leader's log-metrics
	// goroutine running briefly after Shutdown; it must get an error, not touch a closed DB.
	closed atomic.Bool
}

var (
	_ raft.LogStore    = (*raftLog)(nil)
	_ raft.StableStore = (*raftLog)(nil)
)

// newRaftLog opens the raft log and stable store of shard inside db and
// recovers the first/last log index from disk.
func newRaftLog(db *pebble.DB, shard ShardID) (*raftLog, error) {
	if db == nil {
		return nil, errors.New("raftstore: newRaftLog: nil pebble DB")
	}
	l := &raftLog{db: db, shard: shard}
	first, last, err := l.scanBounds()
	if err != nil {
		return nil, err
	}
	l.first.Store(first)
	l.last.Store(last)
	return l, nil
}

// FirstIndex implements raft.LogStore. It returns 0 for an empty log.
func (l *raftLog) FirstIndex() (uint64, error) { return l.first.Load(), nil }

// LastIndex implements raft.LogStore. It returns 0 for an empty log.
func (l *raftLog) LastIndex() (uint64, error) { return l.last.Load(), nil }

// GetLog implements raft.LogStore; it returns raft.ErrLogNotFound for a
// missing index.
func (l *raftLog) GetLog(index uint64, out *raft.Log) error {
	if l.closed.Load() {
		return errStoreClosed
	}
	val, closer, err := l.db.Get(l.logKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return fmt.Errorf("raftstore: shard %d: get log %d: %w", l.shard, index, err)
	}
	defer closer.Close()
	// decodeLog copies out of val, which is only valid until closer.Close.
	if err := decodeLog(val, out); err != nil {
		return fmt.Errorf("raftstore: shard %d: log %d: %w", l.shard, index, err)
	}
	if out.Index != index {
		return fmt.Errorf("raftstore: shard %d: log key %d holds entry with index %d", l.shard, index, out.Index)
	}
	return nil
}

// StoreLog implements raft.LogStore.
func (l *raftLog) StoreLog(entry *raft.Log) error {
	return l.StoreLogs([]*raft.Log{entry})
}

// StoreLogs implements raft.LogStore. All entries are written in one Pebble
// batch committed with pebble.Sync, so either all of them are durable or
// none is. Entries need not be contiguous with the existing log (raft leaves
// a gap after restoring a snapshot), which is why the caches track the
// min/max stored index rather than assuming density.
func (l *raftLog) StoreLogs(entries []*raft.Log) error {
	if len(entries) == 0 {
		return nil
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.writeTime != nil {
		defer since(l.writeTime, time.Now())
	}

	b := l.db.NewBatch()
	defer b.Close()
	lo, hi := uint64(math.MaxUint64), uint64(0)
	var buf []byte
	for _, e := range entries {
		if e == nil {
			return fmt.Errorf("raftstore: shard %d: StoreLogs: nil entry", l.shard)
		}
		// Batch.Set copies key and value, so buf can be reused.
		buf = encodeLog(buf[:0], e)
		if err := b.Set(l.logKey(e.Index), buf, nil); err != nil {
			return fmt.Errorf("raftstore: shard %d: batch log %d: %w", l.shard, e.Index, err)
		}
		lo, hi = min(lo, e.Index), max(hi, e.Index)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("raftstore: shard %d: commit logs %d..%d: %w", l.shard, lo, hi, err)
	}
	// Widen the caches only after the commit so a reader never sees an
	// index it cannot GetLog yet.
	if f := l.first.Load(); f == 0 || lo < f {
		l.first.Store(lo)
	}
	if hi > l.last.Load() {
		l.last.Store(hi)
	}
	return nil
}

// DeleteRange implements raft.LogStore; the range [lo, hi] is inclusive.
// It is one range tombstone committed with pebble.Sync: deletions are rare
// (compaction after a snapshot, truncation of a conflicting suffix) and a
// truncation that silently came back after a crash would resurrect entries
// raft has already replaced.
func (l *raftLog) DeleteRange(lo, hi uint64) error {
	if lo > hi {
		return nil
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()

	// Narrow the caches before committing: an index about to disappear must
	// not be advertised. Keys outside [lo, hi] are untouched by the delete,
	// so the new bounds can be found on the pre-delete state.
	first, last := l.first.Load(), l.last.Load()
	newFirst, newLast := first, last
	switch {
	case first == 0 || hi < first || lo > last:
		// Nothing stored in range; still issue the tombstone (harmless).
	case lo <= first && hi >= last:
		newFirst, newLast = 0, 0
	case lo <= first:
		f, err := l.seekFirstFrom(hi + 1) // hi < last, so no overflow
		if err != nil {
			return err
		}
		newFirst = f
	case hi >= last:
		la, err := l.seekLastBefore(lo) // lo > first >= 1
		if err != nil {
			return err
		}
		newLast = la
	}
	// A hole in the middle leaves both bounds unchanged.
	l.first.Store(newFirst)
	l.last.Store(newLast)

	end := l.logKeyEnd()
	if hi < math.MaxUint64 {
		end = l.logKey(hi + 1)
	}
	b := l.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(l.logKey(lo), end, nil); err != nil {
		return l.restoreAfter(fmt.Errorf("raftstore: shard %d: batch delete logs %d..%d: %w", l.shard, lo, hi, err))
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return l.restoreAfter(fmt.Errorf("raftstore: shard %d: delete logs %d..%d: %w", l.shard, lo, hi, err))
	}
	return nil
}

// Set implements raft.StableStore. Committed with pebble.Sync: raft stores
// its current term and vote here, and forgetting a vote after a crash could
// let this node vote twice in one term.
func (l *raftLog) Set(key, val []byte) error {
	if err := l.db.Set(l.stableKey(key), val, pebble.Sync); err != nil {
		return fmt.Errorf("raftstore: shard %d: stable set %q: %w", l.shard, key, err)
	}
	return nil
}

// Get implements raft.StableStore. A missing key returns errKeyNotFound,
// whose message is exactly "not found" as hashicorp/raft expects.
func (l *raftLog) Get(key []byte) ([]byte, error) {
	val, closer, err := l.db.Get(l.stableKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, errKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("raftstore: shard %d: stable get %q: %w", l.shard, key, err)
	}
	defer closer.Close()
	return append([]byte{}, val...), nil
}

// SetUint64 implements raft.StableStore; the value is 8 bytes big-endian.
func (l *raftLog) SetUint64(key []byte, val uint64) error {
	return l.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 implements raft.StableStore. A missing key returns 0 and
// errKeyNotFound.
func (l *raftLog) GetUint64(key []byte) (uint64, error) {
	val, err := l.Get(key)
	if err != nil {
		return 0, err
	}
	if len(val) != 8 {
		return 0, fmt.Errorf("raftstore: shard %d: stable key %q: want 8-byte uint64, got %d bytes", l.shard, key, len(val))
	}
	return binary.BigEndian.Uint64(val), nil
}

// dropAll deletes the shard's whole raft keyspace (log and stable store),
// used when the shard is removed from this node. Committed with pebble.Sync
// so a removed shard cannot reappear with stale votes after a crash.
func (l *raftLog) dropAll() error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.first.Store(0)
	l.last.Store(0)
	if err := l.db.DeleteRange(l.shardPrefix(), l.shardPrefixEnd(), pebble.Sync); err != nil {
		return l.restoreAfter(fmt.Errorf("raftstore: shard %d: drop raft keyspace: %w", l.shard, err))
	}
	return nil
}

// restoreAfter re-reads the index caches from disk after a failed delete
// (which narrowed them optimistically) and returns err.
func (l *raftLog) restoreAfter(err error) error {
	if first, last, serr := l.scanBounds(); serr == nil {
		l.first.Store(first)
		l.last.Store(last)
	}
	return err
}

// scanBounds reads the lowest and highest stored log index from disk.
func (l *raftLog) scanBounds() (first, last uint64, err error) {
	first, err = l.seekIndex(func(it *pebble.Iterator) bool { return it.SeekGE(l.logKey(0)) })
	if err != nil || first == 0 {
		return 0, 0, err
	}
	last, err = l.seekIndex(func(it *pebble.Iterator) bool { return it.SeekLT(l.logKeyEnd()) })
	if err != nil {
		return 0, 0, err
	}
	return first, last, nil
}

// seekFirstFrom returns the lowest stored index >= from, or 0 if none.
func (l *raftLog) seekFirstFrom(from uint64) (uint64, error) {
	return l.seekIndex(func(it *pebble.Iterator) bool { return it.SeekGE(l.logKey(from)) })
}

// seekLastBefore returns the highest stored index < before, or 0 if none.
func (l *raftLog) seekLastBefore(before uint64) (uint64, error) {
	return l.seekIndex(func(it *pebble.Iterator) bool { return it.SeekLT(l.logKey(before)) })
}

// seekIndex positions a bounded iterator over the shard's log keys with
// seek and returns the index under it, or 0 if seek found nothing.
func (l *raftLog) seekIndex(seek func(*pebble.Iterator) bool) (idx uint64, err error) {
	it, err := l.db.NewIter(&pebble.IterOptions{
		LowerBound: l.logKey(0),
		UpperBound: l.logKeyEnd(),
	})
	if err != nil {
		return 0, fmt.Errorf("raftstore: shard %d: open log iterator: %w", l.shard, err)
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("raftstore: shard %d: close log iterator: %w", l.shard, cerr)
		}
	}()
	if !seek(it) {
		if err := it.Error(); err != nil {
			return 0, fmt.Errorf("raftstore: shard %d: seek log: %w", l.shard, err)
		}
		return 0, nil
	}
	k := it.Key()
	if len(k) != logKeyLen {
		return 0, fmt.Errorf("raftstore: shard %d: malformed log key %x", l.shard, k)
	}
	return binary.BigEndian.Uint64(k[subPrefixLen:]), nil
}

// shardPrefix is 0x02 | shard: every key of this shard's raft keyspace.
func (l *raftLog) shardPrefix() []byte {
	return binary.BigEndian.AppendUint32([]byte{raftKeyspace}, uint32(l.shard))
}

// logKey is 0x02 | shard | 0x01 | index.
func (l *raftLog) logKey(index uint64) []byte {
	k := make([]byte, 0, logKeyLen)
	k = append(k, raftKeyspace)
	k = binary.BigEndian.AppendUint32(k, uint32(l.shard))
	k = append(k, raftLogSpace)
	return binary.BigEndian.AppendUint64(k, index)
}

// logKeyEnd is the exclusive upper bound of the shard's log keys.
func (l *raftLog) logKeyEnd() []byte {
	return append(l.shardPrefix(), raftLogSpace+1)
}

// stableKey is 0x02 | shard | 0x02 | key.
func (l *raftLog) stableKey(key []byte) []byte {
	k := make([]byte, 0, subPrefixLen+len(key))
	k = append(k, raftKeyspace)
	k = binary.BigEndian.AppendUint32(k, uint32(l.shard))
	k = append(k, raftStableSpace)
	return append(k, key...)
}

// shardPrefixEnd is the exclusive upper bound of every key of this shard's
// raft keyspace: the next shard's prefix, or 0x03 after the last shard.
func (l *raftLog) shardPrefixEnd() []byte {
	if l.shard == math.MaxUint32 {
		return []byte{raftKeyspace + 1}
	}
	return binary.BigEndian.AppendUint32([]byte{raftKeyspace}, uint32(l.shard)+1)
}

// encodeLog appends the v1 encoding of e to dst:
//
//	version byte (1)
//	Index       uvarint
//	Term        uvarint
//	Type        1 byte
//	Data        uvarint length, bytes
//	Extensions  uvarint length, bytes
//	AppendedAt  varint unix nanoseconds (0 = zero time.Time)
//
// A hand-rolled format instead of msgpack/gob: it is on the fsync hot path,
// allocation-free, and its compatibility is explicit in the version byte.
func encodeLog(dst []byte, e *raft.Log) []byte {
	dst = append(dst, logFormatV1)
	dst = binary.AppendUvarint(dst, e.Index)
	dst = binary.AppendUvarint(dst, e.Term)
	dst = append(dst, byte(e.Type))
	dst = binary.AppendUvarint(dst, uint64(len(e.Data)))
	dst = append(dst, e.Data...)
	dst = binary.AppendUvarint(dst, uint64(len(e.Extensions)))
	dst = append(dst, e.Extensions...)
	var nanos int64
	if !e.AppendedAt.IsZero() {
		// UnixNano is only defined for years 1678..2262; raft stamps
		// time.Now(), well inside that range.
		nanos = e.AppendedAt.UnixNano()
	}
	return binary.AppendVarint(dst, nanos)
}

// decodeLog parses an encodeLog value into out. Byte slices are copied, so
// out stays valid after src is reused. Malformed input yields an error,
// never a panic.
func decodeLog(src []byte, out *raft.Log) error {
	d := logDecoder{buf: src}
	if v := d.byte("version"); d.err == nil && v != logFormatV1 {
		return fmt.Errorf("raftstore: decode raft log: unknown format version %d", v)
	}
	var e raft.Log
	e.Index = d.uvarint("index")
	e.Term = d.uvarint("term")
	e.Type = raft.LogType(d.byte("type"))
	e.Data = d.bytes("data")
	e.Extensions = d.bytes("extensions")
	if nanos := d.varint("appended-at"); nanos != 0 {
		e.AppendedAt = time.Unix(0, nanos)
	}
	if d.err != nil {
		return d.err
	}
	if len(d.buf) != 0 {
		return fmt.Errorf("raftstore: decode raft log: %d trailing bytes", len(d.buf))
	}
	*out = e
	return nil
}

// logDecoder reads fields off buf, remembering the first error so decodeLog
// reads linearly; after an error every read returns a zero value.
type logDecoder struct {
	buf []byte
	err error
}

func (d *logDecoder) fail(field string) {
	if d.err == nil {
		d.err = fmt.Errorf("raftstore: decode raft log: truncated or corrupt %s", field)
	}
	d.buf = nil
}

func (d *logDecoder) byte(field string) byte {
	if d.err != nil || len(d.buf) < 1 {
		d.fail(field)
		return 0
	}
	b := d.buf[0]
	d.buf = d.buf[1:]
	return b
}

func (d *logDecoder) uvarint(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail(field)
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *logDecoder) varint(field string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail(field)
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// bytes reads a uvarint length and that many bytes; empty decodes as nil.
func (d *logDecoder) bytes(field string) []byte {
	n := d.uvarint(field + " length")
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.buf)) {
		d.fail(field)
		return nil
	}
	if n == 0 {
		return nil
	}
	b := append([]byte(nil), d.buf[:n]...)
	d.buf = d.buf[n:]
	return b
}

// raftShardsOnDisk lists the shards with a Raft keyspace in db: the replicas this node held when
// it stopped.
func raftShardsOnDisk(db *pebble.DB) ([]ShardID, error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{raftKeyspace}, UpperBound: []byte{raftKeyspace + 1}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []ShardID
	for ok := it.First(); ok; {
		k := it.Key()
		if len(k) < 5 {
			ok = it.Next()
			continue
		}
		id := binary.BigEndian.Uint32(k[1:5])
		out = append(out, ShardID(id))
		if id == ^uint32(0) {
			break
		}
		ok = it.SeekGE(binary.BigEndian.AppendUint32([]byte{raftKeyspace}, id+1))
	}
	return out, it.Error()
}
