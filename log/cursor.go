package log

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// DeviceCursor is the stored cursor of one device of a user.
type DeviceCursor struct {
	Device string
	Cursor Cursor
	// Seen is when the device was last seen: the proposer time (Unix ns) of the cursor store
	// that last moved its cursor. Zero for a cursor stored before last sightings were kept
	// (retention counts it as seen at the first trim that would drop an entry it has not acked;
	// see [Retention.InactiveAfter]).
	Seen int64
}

// SetCursor records that device of uid has stored its log up to c, seen at st.Time. Cursor
// updates may be coalesced and arrive out of order, so within one epoch the stored cursor only
// moves forward; a cursor of another epoch replaces it (the device rebased). A store that does
// not move the cursor writes nothing, its sighting included: a device whose cursor stays put
// has nothing more for retention to keep. A position past the log's head, or a cursor of an
// epoch the log does not have, is refused with ErrInvalid: no device can have stored what the
// log never held. A cursor beyond the log's reported cursor makes its deliveries due
// (report.go).
func (t *Tx) SetCursor(st Stamp, uid, device string, c Cursor) error {
	if !ValidLog(uid) || !ValidID(device) {
		return invalidf("bad user or device id %q/%q", uid, device)
	}
	if err := t.checkNotMoving(uid); err != nil {
		return err
	}
	k := t.s.k
	m, _, err := t.logMeta(k.user(uid))
	if err != nil {
		return err
	}
	if c.Epoch != m.Epoch || c.Pos > m.Head {
		return invalidf("cursor %d@%d is not in the log of %q (epoch %d, head %d)", c.Pos, c.Epoch, uid, m.Epoch, m.Head)
	}
	v, ok, err := getValue(t.b, k.cursor(uid, device))
	if err != nil {
		return err
	}
	if ok {
		old, err := decodeDeviceCursor(v)
		if err != nil {
			return err
		}
		if old.Epoch == c.Epoch && old.Pos >= c.Pos {
			return nil
		}
	}
	if err := t.noteCursor(uid, c); err != nil { // before the write: it reads the cursors as they were
		return err
	}
	return t.set(k.cursor(uid, device), encodeDeviceCursor(deviceCursor{Cursor: c, Seen: st.Time}))
}

// Cursors returns the stored cursors of every device of uid, ordered by device id.
func (s *Shard) Cursors(uid string) ([]DeviceCursor, error) {
	if !ValidLog(uid) {
		return nil, invalidf("bad user id %q", uid)
	}
	prefix := s.k.cursorPrefix(uid)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("log: read: %w", err)
	}
	defer it.Close()
	var out []DeviceCursor
	for ok := it.First(); ok; ok = it.Next() {
		key := it.Key()
		if len(key) <= len(prefix) { // a well-formed key names a device: a damaged store
			return nil, corruptf("cursor key %x names no device", key)
		}
		c, err := decodeDeviceCursor(it.Value())
		if err != nil {
			return nil, err
		}
		out = append(out, DeviceCursor{Device: string(key[len(prefix) : len(key)-1]), Cursor: c.Cursor, Seen: c.Seen})
	}
	return out, it.Error()
}

// deviceCursor is the stored value of a device cursor (table 0x22): the cursor, and the proposer
// time of the store that last moved it.
//
//	v1: version 0x01 | epoch uvarint | pos uvarint
//	v2: version 0x02 | epoch uvarint | pos uvarint | seen varint (Unix ns)
//
// A record with Seen 0 is written as v1, so records from before v2 and records stored without a
// time read and re-encode alike; v1 decodes with Seen 0.
type deviceCursor struct {
	Cursor
	Seen int64
}

func encodeDeviceCursor(c deviceCursor) []byte {
	if c.Seen == 0 {
		return encodeCursor(c.Cursor)
	}
	e := encoder{b: make([]byte, 0, 30)}
	e.u8(valueV2)
	e.uvarint(uint64(c.Epoch))
	e.uvarint(uint64(c.Pos))
	e.varint(c.Seen)
	return e.b
}

func decodeDeviceCursor(b []byte) (deviceCursor, error) {
	d := decoder{b: b}
	v := d.version("device cursor", valueV2)
	c := deviceCursor{Cursor: Cursor{Epoch: Epoch(d.uvarint()), Pos: Position(d.uvarint())}}
	if v >= valueV2 {
		c.Seen = d.varint()
	}
	return c, d.done("device cursor")
}

// deviceHold returns the first position of uid's log, of meta m, that some active device has not
// acked: one past the lowest cursor of m's epoch among the devices seen within inactiveAfter of
// now (every device if inactiveAfter is 0), or m.Head+1 if no active device lacks anything.
// A cursor of another epoch holds nothing (its device is told "epoch changed" whatever is kept).
// A record from before last sightings were kept (Seen 0) is passed to legacy, which says whether
// its device counts as active; legacy receives a copy of the key.
func deviceHold(r pebble.Reader, k keys, uid string, m logMeta, now, inactiveAfter int64, legacy func(key []byte, c Cursor) bool) (Position, error) {
	prefix := k.cursorPrefix(uid)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return 0, fmt.Errorf("log: read: %w", err)
	}
	defer it.Close()
	hold := m.Head + 1
	for ok := it.First(); ok; ok = it.Next() {
		c, err := decodeDeviceCursor(it.Value())
		if err != nil {
			return 0, err
		}
		if c.Epoch != m.Epoch || c.Pos+1 >= hold {
			continue
		}
		active := inactiveAfter <= 0 || now-c.Seen <= inactiveAfter
		if c.Seen == 0 {
			active = legacy(append([]byte(nil), it.Key()...), c.Cursor)
		}
		if active {
			hold = c.Pos + 1
		}
	}
	return hold, it.Error()
}
