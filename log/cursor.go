package log

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// DeviceCursor is the stored cursor of one device of a user.
type DeviceCursor struct {
	Device string
	Cursor Cursor
}

// SetCursor records that device of uid has stored its log up to c. Cursor updates may be
// coalesced and arrive out of order, so within one epoch the stored cursor only moves forward; a
// cursor of another epoch replaces it (the device rebased). A position past the log's head, or a
// cursor of an epoch the log does not have, is refused with ErrInvalid: no device can have stored
// what the log never held. A cursor beyond the log's reported cursor makes its deliveries due
// (report.go).
func (t *Tx) SetCursor(uid, device string, c Cursor) error {
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
		old, err := decodeCursor(v)
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
	return t.set(k.cursor(uid, device), encodeCursor(c))
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
		c, err := decodeCursor(it.Value())
		if err != nil {
			return nil, err
		}
		out = append(out, DeviceCursor{Device: string(key[len(prefix) : len(key)-1]), Cursor: c})
	}
	return out, it.Error()
}
