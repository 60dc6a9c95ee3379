package log

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Dead letters are deliveries that a destination shard refused (G5): the fan-out could not append
// an outbox entry to some users' logs because the destination's state machine deterministically
// rejected it, so retrying the same batch could never succeed. Rather than block the ordered
// (source, destination) stream behind it forever, the fan-out records the delivery here, in the
// source shard, and moves the destination's mark past it. The record keeps a copy of the entry,
// because the outbox is trimmed once every destination's mark has passed it.
//
// An operator lists dead letters, drops them, or replays them once the cause is fixed. A replay
// appends the entry to the users' logs at their current heads (so it arrives late, after entries
// that followed it in the conversation; clients order a conversation by conv_seq) and is made
// exactly-once by a marker the destination writes with it ([Tx.Redeliver]).

// DeadLetter is one delivery that a destination refused.
type DeadLetter struct {
	Dest     ShardID  // destination shard that refused the delivery
	Pos      uint64   // the entry's outbox position in this (the source) shard
	Users    []string // recipients on Dest that did not get the entry
	Reason   string   // the destination's refusal
	FailedAt int64    // proposer time (Unix ns) of the command that recorded it
	Entry    Entry    // the conversation entry; Seq is unused
}

// DeadLetterAdd is a request to record a dead letter ([Tx.AddDeadLetter]).
type DeadLetterAdd struct {
	Dest   ShardID
	Pos    uint64
	Users  []string
	Reason string
}

// DeadLetterDrop is a request to delete a dead letter ([Tx.DropDeadLetter]).
type DeadLetterDrop struct {
	Dest ShardID
	Pos  uint64
}

// Redelivery is a request to append a dead-lettered entry to users' logs on this (the destination)
// shard ([Tx.Redeliver]).
type Redelivery struct {
	Source ShardID
	Item   Delivery
}

// maxReasonLen bounds the stored refusal text.
const maxReasonLen = 1024

// AddDeadLetter records that Dest refused the outbox entry at Pos for Users. The entry is copied
// from the outbox, which must still hold Pos. Recording the same (Dest, Pos) again changes
// nothing, so the fan-out may retry the command freely.
func (t *Tx) AddDeadLetter(st Stamp, r *DeadLetterAdd) error {
	if len(r.Users) == 0 {
		return invalidf("dead letter at %d for shard %d names no users", r.Pos, r.Dest)
	}
	for j, uid := range r.Users {
		if !ValidLog(uid) || (j > 0 && r.Users[j-1] >= uid) {
			return invalidf("dead letter at %d: users must be valid, sorted and unique", r.Pos)
		}
	}
	k := t.s.k
	key := k.deadLetter(r.Dest, r.Pos)
	if _, ok, err := getValue(t.b, key); err != nil || ok {
		return err
	}
	v, ok, err := getValue(t.b, k.outbox(r.Pos))
	if err != nil {
		return err
	}
	if !ok {
		return invalidf("dead letter at %d: the outbox does not hold that position", r.Pos)
	}
	rec, err := decodeOutboxRecord(v)
	if err != nil {
		return fmt.Errorf("outbox %d: %w", r.Pos, err)
	}
	reason := r.Reason
	if len(reason) > maxReasonLen {
		reason = reason[:maxReasonLen]
	}
	dl := DeadLetter{Dest: r.Dest, Pos: r.Pos, Users: r.Users, Reason: reason, FailedAt: st.Time, Entry: rec.Entry}
	if err := t.set(key, encodeDeadLetter(&dl)); err != nil {
		return err
	}
	return t.addDeadLetterCount(1)
}

// DropDeadLetter deletes the dead letter (Dest, Pos). It returns ErrNoDeadLetter if there is none.
func (t *Tx) DropDeadLetter(r *DeadLetterDrop) error {
	key := t.s.k.deadLetter(r.Dest, r.Pos)
	if _, ok, err := getValue(t.b, key); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("%w: %d for shard %d", ErrNoDeadLetter, r.Pos, r.Dest)
		}
		return err
	}
	if err := t.del(key); err != nil {
		return err
	}
	return t.addDeadLetterCount(-1)
}

func (t *Tx) addDeadLetterCount(delta int64) error {
	key := t.s.k.meta(metaDeadLetters)
	n, _, err := getUint(t.b, key)
	if err != nil {
		return err
	}
	return t.set(key, encodeUint(uint64(int64(n)+delta)))
}

// Redeliver appends the dead-lettered item to its users' logs, unless this shard already did so
// for (Source, Item.Pos): the replay marker makes a replay exactly-once even if the operator
// repeats it after a crash between the replay and the drop. It does not move the source's
// high-water mark, which had already passed Item.Pos. It returns the number of entries appended.
func (t *Tx) Redeliver(st Stamp, r *Redelivery) (int, error) {
	b := DeliveryBatch{Source: r.Source, Prev: r.Item.Pos - 1, Last: r.Item.Pos, Items: []Delivery{r.Item}}
	if r.Item.Pos == 0 {
		return 0, invalidf("redelivery of outbox position 0")
	}
	if err := b.validate(); err != nil {
		return 0, err
	}
	k := t.s.k
	marker := k.redelivered(r.Source, r.Item.Pos)
	if _, ok, err := getValue(t.b, marker); err != nil || ok {
		return 0, err
	}
	if mark, _, err := getUint(t.b, k.sourceMark(r.Source)); err != nil {
		return 0, err
	} else if mark < r.Item.Pos {
		// The ordered stream has not passed this position: it was never dead-lettered here, and
		// appending it now would deliver it twice once the stream gets there.
		return 0, invalidf("redelivery of %d from shard %d: the delivery stream has not passed it (mark %d)", r.Item.Pos, r.Source, mark)
	}
	if err := t.refuseFenced(r.Item.Users); err != nil {
		return 0, err
	}
	app := t.userAppender(st)
	for _, uid := range r.Item.Users {
		if err := app.add(uid, r.Item.Entry); err != nil {
			return 0, err
		}
	}
	if err := app.finish(); err != nil {
		return 0, err
	}
	return app.appended, t.set(marker, encodeUint(uint64(st.Time)))
}

// DeadLetterCount returns how many dead letters the shard holds.
func (s *Shard) DeadLetterCount() (uint64, error) {
	n, _, err := getUint(s.db, s.k.meta(metaDeadLetters))
	return n, err
}

// DeadLetter returns the dead letter (dest, pos), or ok=false if there is none.
func (s *Shard) DeadLetter(dest ShardID, pos uint64) (DeadLetter, bool, error) {
	v, ok, err := getValue(s.db, s.k.deadLetter(dest, pos))
	if err != nil || !ok {
		return DeadLetter{}, false, err
	}
	dl, err := decodeDeadLetter(v)
	dl.Dest, dl.Pos = dest, pos
	return dl, true, err
}

// DeadLetters returns up to limit dead letters in (Dest, Pos) order, starting after (dest, pos);
// pass (0, 0) for the first page.
func (s *Shard) DeadLetters(dest ShardID, pos uint64, limit int) ([]DeadLetter, error) {
	if limit <= 0 {
		limit = DefaultReadCount
	}
	lower, upper := s.k.tableBounds(tagDeadLetter)
	if dest != 0 || pos != 0 {
		lower = append(s.k.deadLetter(dest, pos), 0) // just after (dest, pos)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("log: read: %w", err)
	}
	defer it.Close()
	var out []DeadLetter
	for ok := it.First(); ok && len(out) < limit; ok = it.Next() {
		key := it.Key()
		if len(key) != len(s.k.prefix)+1+12 {
			return nil, corruptf("dead letter key of %d bytes", len(key))
		}
		dl, err := decodeDeadLetter(it.Value())
		if err != nil {
			return nil, err
		}
		dl.Dest = ShardID(binary.BigEndian.Uint32(key[len(key)-12:]))
		dl.Pos = binary.BigEndian.Uint64(key[len(key)-8:])
		out = append(out, dl)
	}
	return out, it.Error()
}

// encodeDeadLetter encodes everything but Dest and Pos, which are in the key.
func encodeDeadLetter(dl *DeadLetter) []byte {
	e := encoder{b: make([]byte, 0, 64+len(dl.Reason)+len(dl.Entry.Body))}
	e.u8(valueV1)
	e.strs(dl.Users)
	e.str(dl.Reason)
	e.varint(dl.FailedAt)
	e.bytes(encodeEntry(&dl.Entry))
	return e.b
}

func decodeDeadLetter(b []byte) (DeadLetter, error) {
	d := decoder{b: b}
	d.version("dead letter", valueV1)
	dl := DeadLetter{Users: d.strs(), Reason: d.str(), FailedAt: d.varint()}
	raw := d.bytes()
	if err := d.done("dead letter"); err != nil {
		return DeadLetter{}, err
	}
	e, err := decodeEntry(raw, 0)
	if err != nil {
		return DeadLetter{}, err
	}
	dl.Entry = e
	return dl, nil
}
