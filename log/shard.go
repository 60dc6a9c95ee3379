package log

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// Shard is one shard's state inside a node's Pebble database.
//
// Reads (the Read… methods, Applied, Cursors, checksums, snapshots) are safe for concurrent use
// with each other and with one writer. Writes go through [Shard.Begin], and at most one [Tx] per
// shard may be open at a time: the shard's state machine is the only writer.
type Shard struct {
	id ShardID
	db *pebble.DB
	k  keys

	// metas caches committed log metas (conversation and user) by key for the writer, so a send
	// does not search Pebble for the conversation's head. Only the writer (a Tx, Restore) touches
	// it; readers go to Pebble.
	metas map[string]logMeta

	// moves is set while a user of this shard may have a move marker (move.go), so that
	// deliveries and reads look for markers only then.
	moves atomic.Bool
	// marked holds every key a move marker was written under since the shard was opened (or
	// restored), so that the lookups of keys without one need not read the store (readMarker).
	markedMu sync.RWMutex
	marked   map[string]struct{}
	// cutovers is set once this shard's outbox routes a moved user by a cutover (cutover.go).
	cutovers atomic.Bool
	// splits is set once this shard's outbox routes a split user's records to sub-logs
	// (split.go).
	splits atomic.Bool
	// barriers is set once a conversation moved into this shard holds its deliveries back behind
	// its old home's (convmove.go).
	barriers atomic.Bool
	// ranges holds the slot moves' markers and cutovers (rangemove.go), as committed.
	ranges atomic.Pointer[shardRanges]
	// routing counts the committed changes to how ReadOutbox routes records (cutovers,
	// barriers): RoutingVersion.
	routing atomic.Uint64
}

// Metadata names under tagMeta.
const (
	metaFormat      = "format"       // key layout version (formatVersion)
	metaApplied     = "applied"      // last Raft index applied to this state
	metaOutboxHead  = "outbox_head"  // last outbox position written
	metaOutboxFirst = "outbox_first" // first outbox position not yet trimmed
	metaDeadLetters = "dead_letters" // number of dead letters held
	metaRestoring   = "restoring"    // present while a snapshot restore is incomplete
)

// OpenShard returns the shard id inside db. It writes the format version of an empty shard and
// refuses a shard written in a format this code does not know.
func OpenShard(db *pebble.DB, id ShardID) (*Shard, error) {
	s := &Shard{id: id, db: db, k: newKeys(id), metas: map[string]logMeta{}}
	v, ok, err := getUint(db, s.k.meta(metaFormat))
	switch {
	case err != nil:
		return nil, err
	case !ok:
		if err := db.Set(s.k.meta(metaFormat), encodeUint(formatVersion), pebble.Sync); err != nil {
			return nil, fmt.Errorf("log: write format version of shard %d: %w", id, err)
		}
	case v != formatVersion:
		return nil, fmt.Errorf("log: shard %d has key format %d, this build reads %d: run a newer syncd",
			id, v, formatVersion)
	}
	if err := s.loadMoves(); err != nil {
		return nil, err
	}
	return s, nil
}

// ID returns the shard's id.
func (s *Shard) ID() ShardID { return s.id }

// Applied returns the last Raft index applied to this shard's state (0 if none).
func (s *Shard) Applied() (uint64, error) {
	v, _, err := getUint(s.db, s.k.meta(metaApplied))
	return v, err
}

// NeedsRestore reports whether a snapshot restore was interrupted (by a crash) and the shard's
// state is incomplete. The caller must restore a snapshot again before serving the shard.
func (s *Shard) NeedsRestore() (bool, error) {
	_, ok, err := getUint(s.db, s.k.meta(metaRestoring))
	return ok, err
}

// getValue returns a copy of the value at key, or ok=false if there is none.
func getValue(r pebble.Reader, key []byte) (val []byte, ok bool, err error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("log: read: %w", err)
	}
	val = append([]byte(nil), v...)
	return val, true, closer.Close()
}

// readIDTable returns every record of table tag in r, each key one id (keyID), its value decoded
// with decode: the routing tables ReadOutbox reads whole (cutovers, barriers, splits).
func readIDTable[T any](r pebble.Reader, k keys, tag byte, decode func([]byte) (T, error)) (map[string]T, error) {
	lo, hi := k.tableBounds(tag)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, fmt.Errorf("log: read: %w", err)
	}
	defer it.Close()
	out := map[string]T{}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := decode(it.Value())
		if err != nil {
			return nil, err
		}
		id, err := keyID(it.Key(), len(lo))
		if err != nil {
			return nil, err
		}
		out[id] = v
	}
	return out, it.Error()
}

func getUint(r pebble.Reader, key []byte) (uint64, bool, error) {
	v, ok, err := getValue(r, key)
	if err != nil || !ok {
		return 0, ok, err
	}
	n, err := decodeUint(v)
	return n, true, err
}

func getLogMeta(r pebble.Reader, key []byte) (logMeta, bool, error) {
	v, ok, err := getValue(r, key)
	if err != nil || !ok {
		return logMeta{First: 1}, ok, err
	}
	m, err := decodeLogMeta(v)
	return m, true, err
}

// DeleteShard deletes every key of shard id's state from db, durably: the node no longer hosts a
// replica of it. No Shard of id may be in use.
func DeleteShard(db *pebble.DB, id ShardID) error {
	lower, upper := newKeys(id).shardBounds()
	if err := db.DeleteRange(lower, upper, pebble.Sync); err != nil {
		return fmt.Errorf("log: delete shard %d: %w", id, err)
	}
	return nil
}
