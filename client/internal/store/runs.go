package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/syncd-dev/syncd/proto"
)

// What the digest checks (PROTOCOL.md §8.7) read, and the rewind that repairs what they find.
// A check compares the server's digest of a range of a sub-log with the digest of the entries
// stored at those positions, so it must know which positions the device stored: a rebase jumps
// the cursor over entries it never stores, and comparing the server's entries there with nothing
// would be a mismatch every time. The store therefore keeps, per sub-log, its run: the first
// position of the entries stored without a break up to the cursor. A check covers the run only.

// ErrDamaged: a stored entry cannot be decoded (its bytes were changed under the store: a storage
// bug, a bad restore). Entries returns it; the caller treats the range as differing from the
// server's and repairs it with Rewind.
var ErrDamaged = errors.New("client: a stored entry cannot be read")

// Run is what the device holds of one sub-log of the user's stream: its cursor and the run of
// entries stored up to it.
type Run struct {
	Epoch proto.Epoch    // the cursor's epoch; 0 for a sub-log never synced
	Pos   proto.Position // the cursor's position
	// Base is the first position of the run: every entry from Base to Pos was stored from a
	// Batch, and none below Base is known to be — a rebase or an epoch change jumped the cursor
	// over them, or the store was written by an SDK that did not keep runs (then the run starts
	// at its first batch after). Pos+1 when the run is empty.
	Base proto.Position
	// RepairTo is, after a Rewind, the cursor it moved back from: an entry at a position up to
	// it that arrives again replaces the stored copy of its msg_id in the message view instead
	// of being deduplicated, since that copy may be the damaged one. 0: no repair pending. It
	// lasts until the cursor reaches it again, across restarts.
	RepairTo proto.Position
}

// getRun reads the cursor and the run of sub-log sub from r. A run never stored (a store from
// before runs, or a sub-log never synced) is empty: Base is Pos+1. Nothing below the cursor of
// such a store is checked until it stores more: its entries may have breaks nobody recorded.
func getRun(r pebble.Reader, sub uint32) (Run, error) {
	epoch, pos, err := getCursor(r, sub)
	if err != nil {
		return Run{}, err
	}
	run := Run{Epoch: epoch, Pos: pos, Base: pos + 1}
	v, ok, err := getValue(r, sk.run(sub))
	if err != nil || !ok {
		return run, err
	}
	if len(v) != 16 {
		return Run{}, fmt.Errorf("client: run value of %d bytes", len(v))
	}
	run.Base = min(proto.Position(binary.BigEndian.Uint64(v)), pos+1)
	run.RepairTo = proto.Position(binary.BigEndian.Uint64(v[8:]))
	return run, nil
}

// setRun writes the run of sub-log sub into b.
func setRun(b *pebble.Batch, sub uint32, base, repairTo proto.Position) error {
	v := binary.BigEndian.AppendUint64(nil, uint64(base))
	return b.Set(sk.run(sub), binary.BigEndian.AppendUint64(v, uint64(repairTo)), nil)
}

// Run returns what the device holds of sub-log sub: its cursor and its run of stored entries.
func (s *Store) Run(sub uint32) (Run, error) {
	if err := checkSub(sub); err != nil {
		return Run{}, err
	}
	db, err := s.read()
	if err != nil {
		return Run{}, err
	}
	defer s.mu.RUnlock()
	return getRun(db, sub)
}

// Entries returns the stored entries of sub-log sub at positions from through to, ascending, as
// they were received, with the sub-log's run as it stood when they were read (one consistent
// view). A position with no stored entry is simply absent from the result (below the run's Base,
// above its cursor, or lost): the caller compares what it gets with what it expected. The
// caller bounds the range (a check reads at most a page of proto.MaxPage). An entry that cannot
// be decoded fails the whole read with ErrDamaged.
func (s *Store) Entries(sub uint32, from, to proto.Position) (_ []proto.Entry, _ Run, err error) {
	if err := checkSub(sub); err != nil {
		return nil, Run{}, err
	}
	db, err := s.read()
	if err != nil {
		return nil, Run{}, err
	}
	defer s.mu.RUnlock()
	run, err := getRun(db, sub)
	if err != nil || to < from {
		return nil, run, err
	}
	// Entry keys are fixed-width, so the smallest key above the entry at to is that key
	// followed by any byte: no key lies between.
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: sk.entry(sub, from), UpperBound: append(sk.entry(sub, to), 0)})
	if err != nil {
		return nil, Run{}, fmt.Errorf("client: store scan: %w", err)
	}
	defer func() { err = errors.Join(err, it.Close()) }()
	var out []proto.Entry
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, Run{}, fmt.Errorf("client: store read: %w", err)
		}
		var e proto.Entry
		if err := decode(v, &e); err != nil {
			return nil, Run{}, fmt.Errorf("%w: sub-log %d, key %x: %v", ErrDamaged, sub, it.Key(), err)
		}
		out = append(out, e)
	}
	if err := it.Error(); err != nil {
		return nil, Run{}, fmt.Errorf("client: store scan: %w", err)
	}
	return out, run, nil
}

// Rewind repairs sub-log sub after a digest mismatch from position from on (PROTOCOL.md §8.7):
// in one synced batch it moves the cursor back to (epoch, from-1) — the one move back within an
// epoch the store makes — deletes the stored entries at from and above, and records the cursor
// it moved back from as the run's RepairTo, so the entries that the sync stream sends again
// replace the stored copies in the message view (ApplyBatch). The message view, read marks and
// members stay until then: the app keeps showing the conversation meanwhile.
//
// It reports false and changes nothing when the stored state moved since the check that found
// the mismatch: the cursor is of another epoch, or from is not within the run (Base … Pos).
func (s *Store) Rewind(sub uint32, epoch proto.Epoch, from proto.Position) (bool, error) {
	if err := checkSub(sub); err != nil {
		return false, err
	}
	db, err := s.write()
	if err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	run, err := getRun(db, sub)
	if err != nil {
		return false, err
	}
	if epoch == 0 || run.Epoch != epoch || from < run.Base || from > run.Pos || from == 0 {
		return false, nil
	}
	b := db.NewBatch()
	defer b.Close()
	if err := errors.Join(
		b.DeleteRange(sk.entry(sub, from), prefixEnd(sk.entryPrefix(sub)), nil),
		setCursor(b, sub, epoch, from-1),
		setRun(b, sub, run.Base, max(run.RepairTo, run.Pos)),
	); err != nil {
		return false, err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return false, fmt.Errorf("client: rewind sub-log %d: %w", sub, err)
	}
	return true, nil
}

// Repairing reports whether a sub-log has a repair pending (a Rewind whose entries have not all
// come again): the sync stream then asks for a replay whatever the distance to the head, since
// a rebase would jump over the entries to repair.
func (s *Store) Repairing() (bool, error) {
	db, err := s.read()
	if err != nil {
		return false, err
	}
	defer s.mu.RUnlock()
	repairing := false
	err = scan(db, sk.runPrefix(), func(_, v []byte) error {
		if len(v) != 16 {
			return fmt.Errorf("client: run value of %d bytes", len(v))
		}
		repairing = repairing || binary.BigEndian.Uint64(v[8:]) != 0
		return nil
	})
	return repairing, err
}
