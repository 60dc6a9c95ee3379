package log

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Delivery reports: how acks of a recipient's devices become delivered marks (docs/PROTOCOL.md,
// "Delivery states and read counts").
//
// A message is delivered once one device of a recipient has stored it: its cursor passed the
// user-log entry carrying it. Cursors land on the recipient's shard; the delivered mark lives
// with the conversation on its home shard. So each user log keeps how far its entries have been
// reported, and a due flag while a device cursor is beyond that:
//
//	0x24 | uid 0x00   reported: the cursor (epoch, pos) up to which the log's entries were reported
//	0x25 | uid 0x00   empty: due, some device cursor of the reported epoch is beyond it
//
// The server's reporter takes due logs (DeliveryDue), appends a KindDelivered to each
// conversation concerned, and records the log as reported (MarkReported). A report repeated
// after a crash changes nothing: a delivered append that does not move the mark is a NoOp.
//
// A log without a reported record (new, reset, or moved in: the record does not travel) starts
// from the highest cursor its devices had before the update that creates it: only what is acked
// from then on is reported, never a whole history at once.

// MarkReported is a request to record that the entries of a user log up to Cursor have been
// reported ([Tx.MarkReported]); it travels in a Raft command.
type MarkReported struct {
	Log    string
	Cursor Cursor
}

// MarshalBinary encodes the request.
func (r *MarkReported) MarshalBinary() ([]byte, error) {
	e := encoder{b: make([]byte, 0, 24+len(r.Log))}
	e.u8(requestV1)
	e.str(r.Log)
	e.uvarint(uint64(r.Cursor.Epoch))
	e.uvarint(uint64(r.Cursor.Pos))
	return e.b, nil
}

// UnmarshalBinary decodes a request encoded by MarshalBinary. Errors wrap ErrCorrupt.
func (r *MarkReported) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	d.version("mark reported", requestV1)
	*r = MarkReported{Log: d.str(), Cursor: Cursor{Epoch: Epoch(d.uvarint()), Pos: Position(d.uvarint())}}
	return d.done("mark reported")
}

// DeliveryDue is one user log with entries acked but not reported: its devices have stored it
// up to at least To (of Epoch), and Convs is, per conversation, the highest conv_seq of a
// message of another user among the log's entries reported so far (exclusive) up to To. Convs
// may be empty (nothing to report: only record the log as reported, with To).
type DeliveryDue struct {
	Log   string // the user log (a sub-log of a split user: "bob 3")
	User  string // the user it belongs to: the delivered mark's member
	Epoch Epoch
	To    Position
	Convs []DeliveredConv // by conversation id
}

// DeliveredConv is how far a user's devices have stored one conversation.
type DeliveredConv struct {
	Conv string
	UpTo Position
}

// reportedCursor returns uid's reported cursor from r; ok is false if there is none.
func reportedCursor(r pebble.Reader, k keys, uid string) (Cursor, bool, error) {
	v, ok, err := getValue(r, k.reported(uid))
	if err != nil || !ok {
		return Cursor{}, false, err
	}
	c, err := decodeCursor(v)
	return c, err == nil, err
}

// maxCursor returns the highest position of uid's device cursors of epoch in r (0: none).
func maxCursor(r pebble.Reader, k keys, uid string, epoch Epoch) (Position, error) {
	prefix := k.cursorPrefix(uid)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return 0, fmt.Errorf("log: read: %w", err)
	}
	defer it.Close()
	var most Position
	for ok := it.First(); ok; ok = it.Next() {
		c, err := decodeDeviceCursor(it.Value())
		if err != nil {
			return 0, err
		}
		if c.Epoch == epoch {
			most = max(most, c.Pos)
		}
	}
	return most, it.Error()
}

// noteCursor keeps uid's delivery reporting with the cursor c a device is about to store: a log
// without a reported record (or with one of another epoch) gets one at the highest cursor of
// c's epoch so far, and a cursor beyond it makes the log due.
func (t *Tx) noteCursor(uid string, c Cursor) error {
	k := t.s.k
	rep, ok, err := reportedCursor(t.b, k, uid)
	if err != nil {
		return err
	}
	if !ok || rep.Epoch != c.Epoch {
		most, err := maxCursor(t.b, k, uid, c.Epoch)
		if err != nil {
			return err
		}
		rep = Cursor{Epoch: c.Epoch, Pos: most}
		if err := t.set(k.reported(uid), encodeCursor(rep)); err != nil {
			return err
		}
	}
	if c.Pos > rep.Pos {
		return t.set(k.due(uid), nil)
	}
	return nil
}

// MarkReported records that the entries of log up to c have been reported: the reported cursor
// becomes c if it is later (or of another epoch), and the log stops being due unless a device
// cursor of c's epoch is beyond it. It is refused like SetCursor while the user moves (ErrMoving,
// ErrMoved); a log that does not exist here changes nothing. Repeating it changes nothing.
func (t *Tx) MarkReported(log string, c Cursor) error {
	if !ValidLog(log) {
		return invalidf("bad user id %q", log)
	}
	if err := t.checkNotMoving(log); err != nil {
		return err
	}
	k := t.s.k
	m, ok, err := t.logMeta(k.user(log))
	if err != nil || !ok {
		return err
	}
	if c.Epoch == m.Epoch && c.Pos > m.Head {
		return invalidf("reported %d@%d is past the head of %q (%d)", c.Pos, c.Epoch, log, m.Head)
	}
	rep, ok, err := reportedCursor(t.b, k, log)
	if err != nil {
		return err
	}
	if !ok || rep.Epoch != c.Epoch || rep.Pos < c.Pos {
		rep = c
		if err := t.set(k.reported(log), encodeCursor(rep)); err != nil {
			return err
		}
	}
	most, err := maxCursor(t.b, k, log, rep.Epoch)
	if err != nil || most > rep.Pos {
		return err
	}
	return t.del(k.due(log))
}

// deleteReports deletes uid's reporting state (its log is dropped or reset).
func (t *Tx) deleteReports(uid string) error {
	if err := t.del(t.s.k.reported(uid)); err != nil {
		return err
	}
	return t.del(t.s.k.due(uid))
}

// DeliveryDue returns up to limit user logs of this shard whose devices acked entries that were
// not reported yet, in id order, each with what its entries past the reported cursor, up to
// maxEntries of them, deliver (see [DeliveryDue]); logs not served here (moving in, moved out)
// are passed over. The caller appends a KindDelivered per conversation, then proposes
// MarkReported with To. Meant for the shard's leader replica; safe for concurrent use with the
// writer, it reads one consistent view. The result is owned by the caller.
func (s *Shard) DeliveryDue(limit, maxEntries int) ([]DeliveryDue, error) {
	if limit <= 0 || maxEntries <= 0 {
		return nil, invalidf("delivery due: limit %d and entries %d must be 1 or more", limit, maxEntries)
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	lo, hi := s.k.tableBounds(tagDue)
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, fmt.Errorf("log: read: %w", err)
	}
	defer it.Close()
	var out []DeliveryDue
	for ok := it.First(); ok && len(out) < limit; ok = it.Next() {
		uid, err := keyID(it.Key(), len(lo))
		if err != nil {
			return nil, err
		}
		d, served, err := s.dueOf(snap, uid, maxEntries)
		if err != nil {
			return nil, err
		}
		if served {
			out = append(out, d)
		}
	}
	return out, it.Error()
}

// dueOf returns what uid's log has to report from r; served is false if the log is not served
// here.
func (s *Shard) dueOf(r pebble.Reader, uid string, maxEntries int) (d DeliveryDue, served bool, err error) {
	if ok, err := s.reportable(r, uid); err != nil || !ok {
		return DeliveryDue{}, false, err
	}
	m, ok, err := getLogMeta(r, s.k.user(uid))
	if err != nil || !ok {
		return DeliveryDue{}, false, err
	}
	d = DeliveryDue{Log: uid, User: baseUser(uid), Epoch: m.Epoch}
	most, err := maxCursor(r, s.k, uid, m.Epoch)
	if err != nil {
		return DeliveryDue{}, false, err
	}
	rep, ok, err := reportedCursor(r, s.k, uid)
	if err != nil {
		return DeliveryDue{}, false, err
	}
	if !ok || rep.Epoch != m.Epoch {
		// Nothing known to report in this epoch: the caller only records the log as reported.
		d.To = most
		return d, true, nil
	}
	d.To = rep.Pos
	if most <= rep.Pos {
		return d, true, nil
	}
	d.To = min(most, rep.Pos+Position(maxEntries), m.Head)
	from := max(rep.Pos+1, m.First)
	if from > d.To {
		return d, true, nil
	}
	upTo := map[string]Position{}
	err = scanRange(r, s.k.userEntryPrefix(uid), from, d.To, maxEntries, 1<<62, func(val []byte, seq Position) (int, bool, error) {
		e, err := decodeEntry(val, seq)
		if err != nil {
			return 0, false, err
		}
		if e.Kind == KindMessage && e.Sender != d.User {
			upTo[e.Conv] = max(upTo[e.Conv], e.ConvSeq)
		}
		return 1, true, nil
	})
	if err != nil {
		return DeliveryDue{}, false, err
	}
	for conv, seq := range upTo {
		d.Convs = append(d.Convs, DeliveredConv{Conv: conv, UpTo: seq})
	}
	slices.SortFunc(d.Convs, func(a, b DeliveredConv) int { return cmp.Compare(a.Conv, b.Conv) })
	return d, true, nil
}

// reportable reports whether uid's log is here and takes writes: not moving in, fenced or moved
// away (MarkReported would be refused; the destination reports once the log is there).
func (s *Shard) reportable(r pebble.Reader, uid string) (bool, error) {
	if !s.anyMoves() {
		return true, nil
	}
	m, ok, err := s.readMarker(r, s.committedRanges(), s.k.moving(uid))
	if err != nil || !ok {
		return err == nil, err
	}
	return m.role != movingIn && m.role != movingOut && m.role != movedOut, nil
}
