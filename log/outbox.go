package log

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// The outbox is the transactional-outbox half of fan-out: every conversation entry is written in
// the same batch as an outbox record holding a copy of it and naming its recipients, at the next
// outbox position of the shard (1, 2, 3…). Fan-out workers read the outbox in order and deliver to user logs; once every
// destination has applied a prefix, the leader trims it.

// OutboxItem is one outbox record: a conversation entry and who must receive it.
type OutboxItem struct {
	Pos uint64 // outbox position in the source shard
	// Recipients are the logs to append the entry to, sorted and unique: the recipients' own,
	// or for a split user the sub-log of the entry's conversation, as this record's position
	// decides it (split.go).
	Recipients []string
	Entry      Entry // the conversation entry; Seq is unused
	// Pinned gives the destination shard of the recipients whose user has moved, on its own or
	// with a slot range (a cutover, cutover.go, rangemove.go), as this record's position decides
	// it; the others are routed by the cluster map. Nil when none has.
	Pinned map[string]ShardID
	// After is the barrier of the record's conversation, moved here from another shard whose
	// last records of it must be delivered first (convmove.go); zero for most.
	After Barrier
}

// OutboxInfo is the retained range [First, Head] of the outbox.
type OutboxInfo struct {
	First uint64
	Head  uint64
}

func (t *Tx) appendOutbox(rec outboxRecord) error {
	k := t.s.k
	if !t.outboxHeadLoaded { // read once per Tx; this Tx is the only writer
		head, _, err := getUint(t.b, k.meta(metaOutboxHead))
		if err != nil {
			return err
		}
		t.outboxHead, t.outboxHeadLoaded = head, true
	}
	t.outboxHead++
	t.outboxHeadDirty = true // written once, at Commit: one write per batch, not per append
	return t.set(k.outbox(t.outboxHead), rec.encode())
}

// outboxInfo is the outbox's retained range as this Tx sees it.
func (t *Tx) outboxInfo() (OutboxInfo, error) {
	info, err := outboxInfo(t.b, t.s.k)
	if t.outboxHeadLoaded {
		info.Head = t.outboxHead
	}
	return info, err
}

// Outbox returns the retained range of the outbox.
func (s *Shard) Outbox() (OutboxInfo, error) {
	return outboxInfo(s.db, s.k)
}

func outboxInfo(r pebble.Reader, k keys) (OutboxInfo, error) {
	head, _, err := getUint(r, k.meta(metaOutboxHead))
	if err != nil {
		return OutboxInfo{}, err
	}
	first, ok, err := getUint(r, k.meta(metaOutboxFirst))
	if !ok {
		first = 1
	}
	return OutboxInfo{First: first, Head: head}, err
}

// RoutingVersion changes whenever a committed command changes how ReadOutbox routes the records
// it returns (a cutover gives a moved user's records their shard by position, a barrier holds a
// moved conversation's records back): a reader that keeps items read earlier (the fan-out does)
// must read them again once it changes, or it routes a moved user's earlier records by the
// cluster map of the moment, which after the move's switch names the wrong shard.
func (s *Shard) RoutingVersion() uint64 { return s.routing.Load() }

// ReadOutbox returns up to limit outbox items at positions from and after, in order. Positions
// before the retained range return ErrInvalid: the caller's fan-out cursor is behind a trim.
func (s *Shard) ReadOutbox(from uint64, limit int) ([]OutboxItem, error) {
	snap := s.db.NewSnapshot() // range and records read at one point in time
	defer snap.Close()
	info, err := outboxInfo(snap, s.k)
	if err != nil {
		return nil, err
	}
	if from < info.First {
		return nil, invalidf("outbox position %d was trimmed (first retained %d)", from, info.First)
	}
	if limit <= 0 {
		limit = DefaultReadCount
	}
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: s.k.outbox(from), UpperBound: s.k.outbox(info.Head + 1)})
	if err != nil {
		return nil, fmt.Errorf("log: read: %w", err)
	}
	defer it.Close()
	cuts, err := s.readCutovers(snap)
	if err != nil {
		return nil, err
	}
	barriers, err := s.readBarriers(snap)
	if err != nil {
		return nil, err
	}
	splits, err := s.readSplits(snap)
	if err != nil {
		return nil, err
	}
	ranges := s.committedRanges() // its cutovers route no record of snap differently from snap's own
	if err := ranges.check(); err != nil {
		return nil, err
	}
	var out []OutboxItem
	for ok := it.First(); ok && len(out) < limit; ok = it.Next() {
		key := it.Key()
		pos := binary.BigEndian.Uint64(key[len(key)-8:])
		rec, err := decodeOutboxRecord(it.Value())
		if err != nil {
			return nil, fmt.Errorf("outbox %d: %w", pos, err)
		}
		item := OutboxItem{Pos: pos, Recipients: rec.Recipients, Entry: rec.Entry, After: barriers[rec.Entry.Conv]}
		if splits != nil {
			item.Recipients = toSubLogs(splits, rec.Recipients, rec.Entry.Conv, pos)
		}
		for _, uid := range item.Recipients {
			to, pinned := ShardID(0), false
			if c := cuts[uid]; c != nil {
				to, pinned = c.route(pos), true
			} else if ranges != nil && len(ranges.cuts) > 0 {
				to, pinned = ranges.routeSlot(UserSlot(uid), pos)
			}
			if pinned {
				if item.Pinned == nil {
					item.Pinned = map[string]ShardID{}
				}
				item.Pinned[uid] = to
			}
		}
		out = append(out, item)
	}
	return out, it.Error()
}

// TrimOutbox deletes outbox records at positions up to and including upTo, once every
// destination has applied them. Trimming past the head is clamped to the head.
func (t *Tx) TrimOutbox(upTo uint64) error {
	k := t.s.k
	info, err := t.outboxInfo()
	if err != nil {
		return err
	}
	upTo = min(upTo, info.Head)
	if upTo < info.First {
		return nil
	}
	if err := t.b.DeleteRange(k.outbox(info.First), k.outbox(upTo+1), nil); err != nil {
		return fmt.Errorf("log: write: %w", err)
	}
	if err := t.pruneCutovers(upTo + 1); err != nil {
		return err
	}
	return t.set(k.meta(metaOutboxFirst), encodeUint(upTo+1))
}
