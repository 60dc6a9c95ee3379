package log

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

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
	Reason   string   // the destination's refusal (of the last attempt, if retried)
	FailedAt int64    // proposer time (Unix ns) of the command that recorded it
	Entry    Entry    // the conversation entry; Seq is unused
	// Code is the refusal's RejectionCode (of the last attempt), which Class reads; 0 for a dead
	// letter recorded before codes were kept (v1), or by a node with the dead-letter process off.
	Code uint8
	// Attempts counts the automatic replays that the destination refused again.
	Attempts uint32
	// LastTry is the proposer time (Unix ns) of the last refused automatic replay; 0 before one.
	LastTry int64
	// NextTry is when (Unix ns) the compensation replays it next; 0 when it is not scheduled: a
	// class not retried, retries given up (Attempts > 0: GaveUp), or the process off.
	NextTry int64
	// ArchivedAt is when (Unix ns) it moved to the archive, 0 while it is held (active).
	ArchivedAt int64
	// Archived says it was read from the archive. It is not stored: the table says it.
	Archived bool
}

// GaveUp reports whether the compensation stopped retrying dl: it tried and will not again
// (the cap of attempts was reached, or a retry was refused for a reason not retried).
func (dl *DeadLetter) GaveUp() bool { return dl.Attempts > 0 && dl.NextTry == 0 }

// Class returns the class of dl's refusal (ClassOfRejection of its Code).
func (dl *DeadLetter) Class() DeadLetterClass { return ClassOfRejection(dl.Code) }

// DeadLetterClass groups refusals by whether replaying the same delivery to the same destination
// can succeed later without an operator's act. The class is derived when read, from the stored
// code, never stored itself: a later version may classify a code differently without a format
// change, and no replica's state depends on the mapping.
type DeadLetterClass uint8

// Dead-letter classes.
const (
	// ClassUnknown is a dead letter without a code (recorded before codes were kept). It is not
	// retried automatically: nothing says a retry could help.
	ClassUnknown DeadLetterClass = iota
	// ClassRetryable is a refusal caused by the destination's state at the time, which changes
	// without an operator: the compensation replays it with backoff.
	ClassRetryable
	// ClassPermanent is a refusal of the delivery itself, which the same destination refuses
	// again until an operator acts (a fix, an upgrade, a changed limit): it waits for them.
	ClassPermanent
	numClasses
)

// DeadLetterClasses lists every class, in order, for a caller that reports counts per class.
var DeadLetterClasses = []DeadLetterClass{ClassUnknown, ClassRetryable, ClassPermanent}

var classNames = [numClasses]string{"unknown", "retryable", "permanent"}

func (c DeadLetterClass) String() string {
	if c < numClasses {
		return classNames[c]
	}
	return "unknown"
}

// ClassOfRejection returns the class of the refusal with RejectionCode code.
//
// Retryable are the refusals that say "not now" about the destination's state:
//   - ErrMoving: the users are fenced by a move out of the destination; if the move is canceled
//     the fence lifts and a replay succeeds (if it completes, the retries end at the cap).
//   - ErrMoved: the destination does not serve the users yet (a move in, not activated).
//   - ErrNotYet, ErrOutOfOrder: ordering of the stream, which the fan-out retries itself and never
//     dead-letters; listed so that a code of theirs, however it came, is retried.
//
// Every other refusal is permanent: it is a deterministic judgement of the delivery's bytes
// (ErrInvalid: malformed, an unknown kind, undecodable) or of state that only a person changes
// (ErrGroupFull: a limit; ErrConflict, ErrNotMember, ErrNotPermitted and the rest do not arise
// from deliveries at all). Retrying those would fail the same way each time; the operator fixes
// the cause (often an upgrade of the destination's nodes) and replays. Code 0 is ClassUnknown.
func ClassOfRejection(code uint8) DeadLetterClass {
	if code == 0 || int(code) > len(rejections) {
		return ClassUnknown
	}
	switch rejections[code-1] {
	case ErrMoving, ErrMoved, ErrNotYet, ErrOutOfOrder:
		return ClassRetryable
	}
	return ClassPermanent
}

// DeadLetterAdd is a request to record a dead letter ([Tx.AddDeadLetter]).
type DeadLetterAdd struct {
	Dest   ShardID
	Pos    uint64
	Users  []string
	Reason string
	// Code is the refusal's RejectionCode and NextTry the first automatic replay's time (0: not
	// scheduled). Either set makes the request v2, which only a node with the dead-letter process
	// on writes (an older node refuses it).
	Code    uint8
	NextTry int64
}

// DeadLetterDrop is a request to delete a dead letter ([Tx.DropDeadLetter]).
type DeadLetterDrop struct {
	Dest ShardID
	Pos  uint64
	// Archived drops it from the archive instead of the held ones (v2).
	Archived bool
}

// DeadLetterAttempt records an automatic replay that the destination refused again
// ([Tx.AttemptDeadLetter]). Attempt is the attempt's number (the record's Attempts + 1): a
// repeated proposal of the same attempt changes nothing.
type DeadLetterAttempt struct {
	Dest    ShardID
	Pos     uint64
	Attempt uint32
	Code    uint8  // the new refusal's RejectionCode
	Reason  string // the new refusal
	NextTry int64  // when to replay next; 0 gives up
}

// DeadLetterArchive moves a dead letter to the archive ([Tx.ArchiveDeadLetter]).
type DeadLetterArchive struct {
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
	dl := DeadLetter{Dest: r.Dest, Pos: r.Pos, Users: r.Users, Reason: clipReason(r.Reason), FailedAt: st.Time, Entry: rec.Entry,
		Code: r.Code, NextTry: r.NextTry}
	if err := t.set(key, encodeDeadLetter(&dl)); err != nil {
		return err
	}
	if err := t.addDeadLetterCount(1); err != nil {
		return err
	}
	return t.countDeadLetter(&dl, 1)
}

func clipReason(reason string) string {
	if len(reason) > maxReasonLen {
		return reason[:maxReasonLen]
	}
	return reason
}

// DropDeadLetter deletes the dead letter (Dest, Pos), held or, with Archived, archived. It
// returns ErrNoDeadLetter if there is none.
func (t *Tx) DropDeadLetter(r *DeadLetterDrop) error {
	key := t.s.k.deadLetter(r.Dest, r.Pos)
	if r.Archived {
		key = t.s.k.deadLetterArchive(r.Dest, r.Pos)
	}
	dl, err := t.deadLetterAt(key, r.Dest, r.Pos)
	if err != nil {
		return err
	}
	if err := t.del(key); err != nil {
		return err
	}
	if r.Archived {
		return t.addMetaCount(metaDeadLettersArchived, -1)
	}
	if err := t.addDeadLetterCount(-1); err != nil {
		return err
	}
	return t.countDeadLetter(&dl, -1)
}

// AttemptDeadLetter records that an automatic replay of the held dead letter (Dest, Pos) was
// refused again: Attempts becomes r.Attempt, LastTry the command's time, and the refusal and next
// try are r's. A proposal of an attempt already recorded (r.Attempt ≤ Attempts) changes nothing,
// so the compensation may retry the command; one that skips an attempt is invalid. It returns
// ErrNoDeadLetter if the dead letter is not held (replayed, dropped or archived meanwhile).
func (t *Tx) AttemptDeadLetter(st Stamp, r *DeadLetterAttempt) error {
	key := t.s.k.deadLetter(r.Dest, r.Pos)
	dl, err := t.deadLetterAt(key, r.Dest, r.Pos)
	if err != nil {
		return err
	}
	switch {
	case r.Attempt <= dl.Attempts:
		return nil
	case r.Attempt != dl.Attempts+1:
		return invalidf("dead letter %d for shard %d: attempt %d after %d", r.Pos, r.Dest, r.Attempt, dl.Attempts)
	}
	if err := t.countDeadLetter(&dl, -1); err != nil {
		return err
	}
	dl.Attempts, dl.LastTry, dl.NextTry, dl.Code, dl.Reason = r.Attempt, st.Time, r.NextTry, r.Code, clipReason(r.Reason)
	if err := t.set(key, encodeDeadLetter(&dl)); err != nil {
		return err
	}
	return t.countDeadLetter(&dl, 1)
}

// deadLetterAt reads the dead letter (dest, pos) stored at key, held or archived; ErrNoDeadLetter
// if there is none.
func (t *Tx) deadLetterAt(key []byte, dest ShardID, pos uint64) (DeadLetter, error) {
	v, ok, err := getValue(t.b, key)
	if err != nil {
		return DeadLetter{}, err
	}
	if !ok {
		return DeadLetter{}, noDeadLetter(dest, pos)
	}
	return decodeDeadLetter(v)
}

// noDeadLetter is ErrNoDeadLetter for (dest, pos).
func noDeadLetter(dest ShardID, pos uint64) error {
	return fmt.Errorf("%w: %d for shard %d", ErrNoDeadLetter, pos, dest)
}

// ArchiveDeadLetter moves the held dead letter (Dest, Pos) to the archive, stamped with the
// command's time and no longer scheduled. Archiving one already archived changes nothing; one
// neither held nor archived is ErrNoDeadLetter. Archived dead letters are listed, replayed and
// dropped like held ones, only apart: nothing leaves the archive but by an operator's act.
func (t *Tx) ArchiveDeadLetter(st Stamp, r *DeadLetterArchive) error {
	k := t.s.k
	key, archive := k.deadLetter(r.Dest, r.Pos), k.deadLetterArchive(r.Dest, r.Pos)
	v, ok, err := getValue(t.b, key)
	if err != nil {
		return err
	}
	if !ok {
		if _, ok, err := getValue(t.b, archive); err != nil || ok {
			return err
		}
		return noDeadLetter(r.Dest, r.Pos)
	}
	dl, err := decodeDeadLetter(v)
	if err != nil {
		return err
	}
	if err := t.countDeadLetter(&dl, -1); err != nil {
		return err
	}
	if err := t.addDeadLetterCount(-1); err != nil {
		return err
	}
	if err := t.del(key); err != nil {
		return err
	}
	dl.ArchivedAt, dl.NextTry = st.Time, 0
	if err := t.set(archive, encodeDeadLetter(&dl)); err != nil {
		return err
	}
	return t.addMetaCount(metaDeadLettersArchived, 1)
}

func (t *Tx) addDeadLetterCount(delta int64) error { return t.addMetaCount(metaDeadLetters, delta) }

func (t *Tx) addMetaCount(name string, delta int64) error {
	key := t.s.k.meta(name)
	n, _, err := getUint(t.b, key)
	if err != nil {
		return err
	}
	return t.set(key, encodeUint(uint64(int64(n)+delta)))
}

// countDeadLetter adds delta to the counters a held dead letter like dl is counted in: its code's
// and, if the compensation gave it up, the given-up one. The counters are of stored fields only
// (the code, not its class), so every replica keeps the same whatever version classifies codes.
func (t *Tx) countDeadLetter(dl *DeadLetter, delta int64) error {
	if dl.Code != 0 {
		if err := t.addMetaCount(metaDeadLetterCode(dl.Code), delta); err != nil {
			return err
		}
	}
	if dl.GaveUp() {
		return t.addMetaCount(metaDeadLettersGaveUp, delta)
	}
	return nil
}

// Metadata names of the dead-letter counters besides metaDeadLetters (held ones, all codes).
const (
	metaDeadLettersArchived = "dead_letters_archived" // dead letters in the archive
	metaDeadLettersGaveUp   = "dead_letters_gave_up"  // held ones the compensation gave up (GaveUp)
)

// metaDeadLetterCode names the counter of held dead letters with RejectionCode code.
func metaDeadLetterCode(code uint8) string { return "dead_letters_code_" + strconv.Itoa(int(code)) }

// tagDeadLetterArchive is the table of archived dead letters, keyed like tagDeadLetter's:
// dest u32 | pos u64. A table apart keeps the held ones' listing and the compensation's scans
// from reading through an archive that may grow large.
const tagDeadLetterArchive byte = 0x52

func (k keys) deadLetterArchive(dest ShardID, pos uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(k.table(tagDeadLetterArchive, 12), uint32(dest)), pos)
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

// DeadLetterCount returns how many dead letters the shard holds (not counting the archive).
func (s *Shard) DeadLetterCount() (uint64, error) {
	n, _, err := getUint(s.db, s.k.meta(metaDeadLetters))
	return n, err
}

// DeadLetterStats are a shard's dead-letter counts.
type DeadLetterStats struct {
	Held     uint64             // held (not archived), as DeadLetterCount
	ByClass  [numClasses]uint64 // held ones per class, indexed by DeadLetterClass
	GaveUp   uint64             // held ones the compensation gave up (DeadLetter.GaveUp)
	Archived uint64             // in the archive
}

// DeadLetterStats returns the shard's dead-letter counts, read from counters the state machine
// keeps (no scan). Held dead letters without a code known to this version count as unknown.
func (s *Shard) DeadLetterStats() (DeadLetterStats, error) {
	var st DeadLetterStats
	var err error
	if st.Held, _, err = getUint(s.db, s.k.meta(metaDeadLetters)); err != nil {
		return st, err
	}
	if st.Archived, _, err = getUint(s.db, s.k.meta(metaDeadLettersArchived)); err != nil {
		return st, err
	}
	if st.GaveUp, _, err = getUint(s.db, s.k.meta(metaDeadLettersGaveUp)); err != nil {
		return st, err
	}
	classified := uint64(0)
	for code := 1; code <= len(rejections); code++ {
		n, _, err := getUint(s.db, s.k.meta(metaDeadLetterCode(uint8(code))))
		if err != nil {
			return st, err
		}
		st.ByClass[ClassOfRejection(uint8(code))] += n
		classified += n
	}
	if st.Held >= classified {
		st.ByClass[ClassUnknown] += st.Held - classified
	}
	return st, nil
}

// DeadLetter returns the held dead letter (dest, pos), or ok=false if there is none.
func (s *Shard) DeadLetter(dest ShardID, pos uint64) (DeadLetter, bool, error) {
	return s.deadLetterIn(s.k.deadLetter(dest, pos), dest, pos)
}

// ArchivedDeadLetter returns the archived dead letter (dest, pos), or ok=false if there is none.
func (s *Shard) ArchivedDeadLetter(dest ShardID, pos uint64) (DeadLetter, bool, error) {
	dl, ok, err := s.deadLetterIn(s.k.deadLetterArchive(dest, pos), dest, pos)
	dl.Archived = ok
	return dl, ok, err
}

func (s *Shard) deadLetterIn(key []byte, dest ShardID, pos uint64) (DeadLetter, bool, error) {
	v, ok, err := getValue(s.db, key)
	if err != nil || !ok {
		return DeadLetter{}, false, err
	}
	dl, err := decodeDeadLetter(v)
	dl.Dest, dl.Pos = dest, pos
	return dl, true, err
}

// DeadLetters returns up to limit held dead letters in (Dest, Pos) order, starting after
// (dest, pos); pass (0, 0) for the first page.
func (s *Shard) DeadLetters(dest ShardID, pos uint64, limit int) ([]DeadLetter, error) {
	return s.deadLetters(tagDeadLetter, dest, pos, limit)
}

// ArchivedDeadLetters is DeadLetters of the archive.
func (s *Shard) ArchivedDeadLetters(dest ShardID, pos uint64, limit int) ([]DeadLetter, error) {
	return s.deadLetters(tagDeadLetterArchive, dest, pos, limit)
}

func (s *Shard) deadLetters(tag byte, dest ShardID, pos uint64, limit int) ([]DeadLetter, error) {
	if limit <= 0 {
		limit = DefaultReadCount
	}
	lower, upper := s.k.tableBounds(tag)
	if dest != 0 || pos != 0 {
		lower = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(s.k.table(tag, 13), uint32(dest)), pos)
		lower = append(lower, 0) // just after (dest, pos)
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
		dl.Archived = tag == tagDeadLetterArchive
		out = append(out, dl)
	}
	return out, it.Error()
}

// encodeDeadLetter encodes everything but Dest and Pos, which are in the key. A dead letter
// without the v2 fields (code, attempts, tries, archive time) keeps its v1 bytes.
func encodeDeadLetter(dl *DeadLetter) []byte {
	v2 := dl.Code != 0 || dl.Attempts != 0 || dl.LastTry != 0 || dl.NextTry != 0 || dl.ArchivedAt != 0
	e := encoder{b: make([]byte, 0, 64+len(dl.Reason)+len(dl.Entry.Body))}
	if v2 {
		e.u8(valueV2)
	} else {
		e.u8(valueV1)
	}
	e.strs(dl.Users)
	e.str(dl.Reason)
	e.varint(dl.FailedAt)
	e.bytes(encodeEntry(&dl.Entry))
	if v2 {
		e.u8(dl.Code)
		e.uvarint(uint64(dl.Attempts))
		e.varint(dl.LastTry)
		e.varint(dl.NextTry)
		e.varint(dl.ArchivedAt)
	}
	return e.b
}

func decodeDeadLetter(b []byte) (DeadLetter, error) {
	d := decoder{b: b}
	v := d.version("dead letter", valueV2)
	dl := DeadLetter{Users: d.strs(), Reason: d.str(), FailedAt: d.varint()}
	raw := d.bytes()
	if v >= valueV2 {
		dl.Code = d.u8()
		attempts := d.uvarint()
		if attempts > math.MaxUint32 {
			d.fail("dead letter attempts")
		}
		dl.Attempts, dl.LastTry, dl.NextTry, dl.ArchivedAt = uint32(attempts), d.varint(), d.varint(), d.varint()
	}
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
