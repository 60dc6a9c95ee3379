package log

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// A cluster restored from a backup holds each shard as it was at its own Raft index, taken at
// slightly different moments, and older than what devices and other shards saw before the
// cluster was lost. Two things then must not be believed: a device's cursor past a log's restored
// head (positions after it will be reused by new entries, which the device would skip), and a
// destination's fan-out mark past its source's restored outbox (new outbox records at those
// positions would be taken for ones already delivered). RenewEpochs and RaiseOutbox repair the
// state of a restored shard for both, before it serves; they run on the one replica a restore
// writes, outside Raft, and followers copy the result with the first snapshot they receive.

// RenewEpochs gives every user and conversation log of the shard a new epoch, the greater of
// epoch (a time, as the epochs of new logs are) and the log's old epoch plus one, keeping its
// entries and positions, and records the old epoch and the head the restore kept (the restore
// fence). A device whose cursor is of the old epoch at or below the fence saw only what the
// backup holds: it is told to go on in the new epoch from where it is (LogInfo.Continues). A
// device past the fence saw entries the backup lost, whose positions new entries take: it hears
// "epoch changed" (G3) and resyncs, instead of skipping them. Entries appended after the restore
// are of the new epoch only, so no cursor of the old epoch can name one. It returns the number
// of logs renewed.
func (s *Shard) RenewEpochs(epoch Epoch) (int, error) {
	t := s.Begin()
	defer t.Close()
	n := 0
	for _, tag := range []byte{tagUser, tagConv} {
		lower, upper := s.k.tableBounds(tag)
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
		if err != nil {
			return 0, fmt.Errorf("log: read: %w", err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			m, err := decodeLogMeta(it.Value())
			if err != nil {
				it.Close()
				return 0, err
			}
			m.Renewed, m.Kept = m.Epoch, m.Head
			m.Epoch = max(epoch, m.Epoch+1)
			if err := t.putLogMeta(append([]byte(nil), it.Key()...), m); err != nil {
				it.Close()
				return 0, err
			}
			n++
		}
		if err := it.Close(); err != nil {
			return 0, err
		}
	}
	if err := t.Commit(true); err != nil {
		return 0, err
	}
	return n, nil
}

// continues reports whether a cursor (epoch, pos) of another epoch than the log's holds in the
// log's epoch: it is of the epoch a restore renewed and within what the restore kept.
func (m logMeta) continues(epoch Epoch, pos Position) bool {
	return m.Renewed != 0 && epoch == m.Renewed && pos <= m.Kept
}

// RaiseOutbox makes the shard's next outbox position greater than floor, the highest mark any
// destination holds for this shard as a source: outbox positions up to floor are never written
// again, so no destination can take a new record for one it applied before the restore. The
// positions skipped hold no record; the fan-out and the trim pass over such gaps. It changes
// nothing when the outbox is past floor already.
func (s *Shard) RaiseOutbox(floor uint64) error {
	t := s.Begin()
	defer t.Close()
	info, err := t.outboxInfo()
	if err != nil {
		return err
	}
	if info.Head >= floor {
		return nil
	}
	t.outboxHead, t.outboxHeadLoaded, t.outboxHeadDirty = floor, true, true
	return t.Commit(true)
}

// FanoutState is what the copies of a backup must agree on across shards: a shard's outbox keeps
// the records some destination has not applied, so its copy may lack a record (OutboxFirst past
// it) only if every destination's copy has applied it (its mark for this shard at OutboxFirst-1
// or beyond). Copies that break this lost the record between them (adminapi.StaleBackupShards).
type FanoutState struct {
	// OutboxFirst is the first outbox position the shard retains.
	OutboxFirst uint64
	// Marks is, per source shard, the highest outbox position of it this shard has applied.
	Marks map[ShardID]uint64
}

// Fanout returns the captured state's FanoutState.
func (sn *Snapshot) Fanout() (FanoutState, error) { return fanoutState(sn.snap, sn.s.k) }

func fanoutState(r pebble.Reader, k keys) (FanoutState, error) {
	info, err := outboxInfo(r, k)
	if err != nil {
		return FanoutState{}, err
	}
	st := FanoutState{OutboxFirst: info.First, Marks: map[ShardID]uint64{}}
	lower, upper := k.tableBounds(tagSourceMark)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return FanoutState{}, fmt.Errorf("log: read: %w", err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		key := it.Key()
		if len(key) != len(lower)+4 {
			return FanoutState{}, corruptf("source mark key %x", key)
		}
		m, err := decodeUint(it.Value())
		if err != nil {
			return FanoutState{}, err
		}
		st.Marks[ShardID(binary.BigEndian.Uint32(key[len(lower):]))] = m
	}
	return st, it.Error()
}
