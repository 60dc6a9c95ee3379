package log

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc64"

	"github.com/cockroachdb/pebble/v2"
)

var crcTable = crc64.MakeTable(crc64.ECMA)

// Checksum returns a rolling checksum of user uid's log over positions from..to (inclusive), all
// of which must be retained. The checksum chains every (position, stored entry) pair, so two
// replicas (and later a client) agree on it exactly when they hold the same entries at the same
// positions. It returns ErrInvalid for a range outside [First, Head].
func (s *Shard) Checksum(uid string, from, to Position) (uint64, error) {
	if !ValidLog(uid) {
		return 0, invalidf("bad user id %q", uid)
	}
	snap := s.db.NewSnapshot() // meta and entries from one point in time, despite the writer
	defer snap.Close()
	m, _, err := getLogMeta(snap, s.k.user(uid))
	if err != nil {
		return 0, err
	}
	if from < m.First || to > m.Head || from > to {
		return 0, invalidf("checksum range %d..%d outside retained %d..%d", from, to, m.First, m.Head)
	}
	prefix := s.k.userEntryPrefix(uid)
	sum, n, err := checksumRange(context.Background(), snap, entryKey(prefix, from), entryKey(prefix, to+1), len(prefix))
	if err == nil && n != uint64(to-from+1) {
		err = corruptf("log of %q has %d entries in %d..%d", uid, n, from, to)
	}
	return sum, err
}

// StateChecksum returns a checksum of the shard's whole state keyspace (every key and value) and
// the number of keys. Replicas that applied the same Raft index must return the same pair; tests
// and operators use it to prove replicas identical.
func (s *Shard) StateChecksum() (sum uint64, keys uint64, err error) {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	lower, upper := s.k.shardBounds()
	return checksumRange(context.Background(), snap, lower, upper, len(lower))
}

// checksumRange chains (len, key without its first strip bytes, value) over [lower, upper). It
// gives up with ctx's error once ctx ends (looked at every checksumCheckEvery keys): a whole
// shard's scan can take long, and whoever runs one in the background must be able to stop it.
func checksumRange(ctx context.Context, r pebble.Reader, lower, upper []byte, strip int) (uint64, uint64, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return 0, 0, fmt.Errorf("log: read: %w", err)
	}
	defer it.Close()
	var sum, n uint64
	var lens [16]byte
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key()[strip:], it.Value()
		binary.BigEndian.PutUint64(lens[:8], uint64(len(k)))
		binary.BigEndian.PutUint64(lens[8:], uint64(len(v)))
		sum = crc64.Update(sum, crcTable, lens[:])
		sum = crc64.Update(sum, crcTable, k)
		sum = crc64.Update(sum, crcTable, v)
		n++
		if n%checksumCheckEvery == 0 && ctx.Err() != nil {
			return 0, 0, ctx.Err()
		}
	}
	return sum, n, it.Error()
}
