package log

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// Moving a user's log to another shard: the storage half of the move of docs/MOVES.md. The
// protocol (who proposes what, when) lives above this package; here are the state changes each
// step makes on the source shard S and the destination shard D, each one a Tx operation that is
// idempotent per move id, so that a step retried after a crash or a leader change changes
// nothing the second time:
//
//	D  BeginMoveIn   uid is moving in under move: reads of uid here are refused (ErrMoved), and
//	                 entries delivered to uid from now on are held, in arrival order (pending)
//	D  StageUser     records exported from S (ExportUser) are written, invisible behind the marker
//	D  resume        a driver's first pass: where the copy goes on from (what is staged under the
//	                 source's epoch now is kept), or whether uid was activated already
//	S  FenceUser     uid is moving out: its cursor writes, trims and resets are refused
//	                 (ErrMoving); its state on S is final
//	D  ActivateUser  the staged records become uid's state, the pending entries are appended
//	                 after S's head, and uid is served here
//	S  DropUser      uid's state on S is deleted; a tombstone makes its reads answer ErrMoved
//
// Positions, the epoch, the device cursors and the group count are S's, unchanged: D's first own
// entry for uid is S's head + 1.
//
// Keys (tags after the last of keys.go):
//
//	0x60 | move u64 | key suffix           the staged log meta: its key without the shard prefix
//	0x61 | uid 0x00                        the user's move marker: move u64 | role u8 | pending u64
//	0x62 | move u64 | n u64                a held entry: version | groups delta | entry

// MoveID names one move; the protocol uses the Raft index of the command that started it, so no
// two moves share one.
type MoveID uint64

// Record is one key and value of a shard's state, the key without the 5-byte shard prefix (as in
// snapshots), so it can be written under another shard.
type Record struct {
	Key   []byte
	Value []byte
}

const (
	tagStaged  byte = 0x60
	tagMoving  byte = 0x61
	tagPending byte = 0x62
)

// moveRole says which side of a move a shard is on for a user.
type moveRole uint8

const (
	movingIn  moveRole = 1 // destination, before activation
	movingOut moveRole = 2 // source, fenced
	movedOut  moveRole = 3 // source, dropped: the user's log is elsewhere now
	canceled  moveRole = 4 // destination, the move canceled: a late begin of it is refused
)

// moveMarker is the value under 0x61 | uid (and 0x64 | conv).
type moveMarker struct {
	move    MoveID
	role    moveRole
	pending uint64 // movingIn: entries held so far; a conversation's movingOut: its fence position
	epoch   Epoch  // movingIn: the epoch of the log staged so far (0: not known), for ResumeCopy
	// inRange: the marker is a slot range's, read for the key (rangemove.go), not stored under it.
	inRange bool
}

// A marker v1 has no epoch; v2 adds it.
const (
	moveMarkerV1 = 1
	moveMarkerV2 = 2
)

func (m moveMarker) encode() []byte {
	v := byte(moveMarkerV1)
	if m.epoch != 0 {
		v = moveMarkerV2
	}
	b := []byte{v}
	b = binary.BigEndian.AppendUint64(b, uint64(m.move))
	b = append(b, byte(m.role))
	b = binary.BigEndian.AppendUint64(b, m.pending)
	if m.epoch != 0 {
		b = binary.BigEndian.AppendUint64(b, uint64(m.epoch))
	}
	return b
}

func decodeMoveMarker(b []byte) (moveMarker, error) {
	ok := len(b) == 18 && b[0] == moveMarkerV1 || len(b) == 26 && b[0] == moveMarkerV2
	if !ok || b[9] < byte(movingIn) || b[9] > byte(canceled) {
		return moveMarker{}, corruptf("move marker of %d bytes", len(b))
	}
	m := moveMarker{move: MoveID(binary.BigEndian.Uint64(b[1:])), role: moveRole(b[9]), pending: binary.BigEndian.Uint64(b[10:])}
	if b[0] == moveMarkerV2 {
		if m.epoch = Epoch(binary.BigEndian.Uint64(b[18:])); m.epoch == 0 {
			return moveMarker{}, corruptf("move marker v2 without an epoch")
		}
	}
	return m, nil
}

// A held entry v1 is a user's move's, whose user the move names; v2, a slot range's, names it.
const (
	pendingV1 = 1
	pendingV2 = 2
)

// encodePending is the value of a held entry of a user's move: version, the change to the user's
// group count the entry makes (zigzag varint), then the user's copy of the entry.
func encodePending(groupsDelta int, e *Entry) []byte {
	b := binary.AppendVarint([]byte{pendingV1}, int64(groupsDelta))
	return append(b, encodeEntry(e)...)
}

// encodeRangePending is the value of a held entry of a slot range's move: version, the user
// (uvarint length, bytes), then as encodePending.
func encodeRangePending(uid string, groupsDelta int, e *Entry) []byte {
	b := binary.AppendUvarint([]byte{pendingV2}, uint64(len(uid)))
	b = binary.AppendVarint(append(b, uid...), int64(groupsDelta))
	return append(b, encodeEntry(e)...)
}

// decodePending decodes a held entry; uid is empty for a v1 one.
func decodePending(b []byte) (uid string, groupsDelta int, e Entry, err error) {
	if len(b) < 2 || (b[0] != pendingV1 && b[0] != pendingV2) {
		return "", 0, Entry{}, corruptf("held entry of %d bytes", len(b))
	}
	rest := b[1:]
	if b[0] == pendingV2 {
		n, w := binary.Uvarint(rest)
		if w <= 0 || n == 0 || n > uint64(len(rest)-w) {
			return "", 0, Entry{}, corruptf("held entry: bad user")
		}
		uid, rest = string(rest[w:w+int(n)]), rest[w+int(n):]
	}
	d, w := binary.Varint(rest)
	if w <= 0 {
		return "", 0, Entry{}, corruptf("held entry: bad group count change")
	}
	e, err = decodeEntry(rest[w:], 0)
	return uid, int(d), e, err
}

func (k keys) moving(uid string) []byte { return appendID(k.table(tagMoving, len(uid)+1), uid) }

func (k keys) stagedPrefix(move MoveID) []byte {
	return binary.BigEndian.AppendUint64(k.table(tagStaged, 8), uint64(move))
}

// stagedMeta is where a move stages the log meta whose key is meta.
func (k keys) stagedMeta(move MoveID, meta []byte) []byte {
	return append(k.stagedPrefix(move), meta[len(k.prefix):]...)
}

func (k keys) pendingPrefix(move MoveID) []byte {
	return binary.BigEndian.AppendUint64(k.table(tagPending, 16), uint64(move))
}

func (k keys) pending(move MoveID, n uint64) []byte {
	return binary.BigEndian.AppendUint64(k.pendingPrefix(move), n)
}

var (
	// ErrMoving refuses a write to a user's log or a conversation moving out of this shard
	// (fenced): it is accepted again on the destination once the move has switched. Callers
	// retry after a delay.
	ErrMoving = errors.New("log: moving to another shard; retry shortly")
	// ErrMoved refuses a read or write of a user's log or a conversation this shard does not
	// serve: moving in and not complete here yet (the source still serves it), or moved away.
	ErrMoved = errors.New("log: not served by this shard")
)

// userMove returns uid's move marker, if any, from this Tx's writes or the shard's state.
func (t *Tx) userMove(uid string) (moveMarker, bool, error) { return t.marker(t.s.k.moving(uid)) }

// marker returns the move marker of the key whose per-key marker is under key, as this Tx sees it.
func (t *Tx) marker(key []byte) (moveMarker, bool, error) {
	return t.s.readMarker(t.b, t.rangesView(), key)
}

// readMarker returns the move marker of a user or conversation whose per-key marker is under key,
// from r and the range markers rs: its own, if any, else that of the newest slot move whose range
// covers it (rangeMarkerFor). A key this shard never wrote a marker under is answered from
// memory: every delivery checks each recipient, and a store lookup per recipient made deliveries
// a third slower on every shard that had ever taken part in a move.
func (s *Shard) readMarker(r pebble.Reader, rs *shardRanges, key []byte) (moveMarker, bool, error) {
	if !s.anyMoves() {
		return moveMarker{}, false, nil
	}
	if s.mayHaveMarker(key) {
		v, ok, err := getValue(r, key)
		if err != nil {
			return moveMarker{}, false, err
		}
		if ok {
			m, err := decodeMoveMarker(v)
			return m, err == nil, err
		}
	}
	if err := rs.check(); err != nil || rs == nil || len(rs.markers) == 0 {
		return moveMarker{}, false, err
	}
	return s.rangeMarkerFor(r, rs, key)
}

// setMarker writes m under key, noting first that key may hold a marker (readMarker): before the
// marker is visible, and a Tx that fails leaves the note, which costs only a lookup.
func (t *Tx) setMarker(key []byte, m moveMarker) error {
	t.s.noteMarker(key)
	return t.set(key, m.encode())
}

// noteMarker records that key may hold a move marker.
func (s *Shard) noteMarker(key []byte) {
	s.markedMu.Lock()
	defer s.markedMu.Unlock()
	if s.marked == nil {
		s.marked = map[string]struct{}{}
	}
	s.marked[string(key)] = struct{}{}
	s.moves.Store(true)
}

// mayHaveMarker reports whether a move marker may be stored under key.
func (s *Shard) mayHaveMarker(key []byte) bool {
	if !s.anyMoves() {
		return false
	}
	s.markedMu.RLock()
	defer s.markedMu.RUnlock()
	_, ok := s.marked[string(key)]
	return ok
}

// anyMoves reports whether a user of this shard may have a move marker, so that the hot paths
// (every delivered user, every read) pay for the marker lookup only while a move is under way
// here. It is set when a marker is written and cleared only when the shard is reopened without
// markers, which keeps it correct without counting them.
func (s *Shard) anyMoves() bool { return s.moves.Load() }

// loadMoves sets anyMoves and the cutovers and barriers flags from the state (whether any
// marker, any cutover, any barrier exists), notes every marker's key (readMarker) and loads the
// slot ranges' markers and cutovers.
func (s *Shard) loadMoves() error {
	for _, f := range []struct {
		tag  byte
		flag *atomic.Bool
	}{{tagMoving, &s.moves}, {tagConvMoving, &s.moves}, {tagCutover, &s.cutovers}, {tagBarrier, &s.barriers}, {tagSplit, &s.splits}} {
		lo, hi := s.k.tableBounds(f.tag)
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return fmt.Errorf("log: read: %w", err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			f.flag.Store(true)
			if f.tag != tagMoving && f.tag != tagConvMoving {
				break // one is enough to set the flag
			}
			s.noteMarker(it.Key())
		}
		if err := it.Close(); err != nil {
			return fmt.Errorf("log: read: %w", err)
		}
	}
	return s.loadRanges()
}

// servesUser refuses with ErrMoved a read of uid while its log is moving in here (not complete
// yet: an empty answer would tell a device its log is empty); a fenced user's log is final and
// is read as usual.
func (s *Shard) servesUser(r pebble.Reader, uid string) error {
	if !s.anyMoves() { // before the marker's key is built: every read comes here
		return nil
	}
	return s.serves(r, s.k.moving(uid), "user", uid)
}

// serves refuses with ErrMoved a read of a key (kind and id name it) whose move marker, under
// marker, says it is moving in here or moved away: servesUser and servesConv.
func (s *Shard) serves(r pebble.Reader, marker []byte, kind, id string) error {
	m, ok, err := s.readMarker(r, s.committedRanges(), marker)
	switch {
	case err != nil:
		return err
	case ok && m.role == movingIn:
		return fmt.Errorf("%w (%s %q is moving in, move %d)", ErrMoved, kind, id, m.move)
	case ok && m.role == movedOut:
		return fmt.Errorf("%w (%s %q moved to another shard, move %d)", ErrMoved, kind, id, m.move)
	}
	return nil // no marker, or a canceled move's: the key is simply not here
}

// BeginMoveIn makes this shard the destination of move for uid: until ActivateUser, uid's
// entries delivered here are held, and reads of uid are refused with ErrMoved. A user whose log
// is already here, or who is moving under another move, is refused. Repeating it changes nothing.
func (t *Tx) BeginMoveIn(move MoveID, uid string) error {
	if !ValidLog(uid) || move == 0 {
		return invalidf("move in: bad user id %q or move 0", uid)
	}
	return t.beginMoveIn(move, t.s.k.moving(uid), t.s.k.user(uid), fmt.Sprintf("user %q", uid))
}

// beginMoveIn makes this shard the destination of move for a key (what names it) whose move
// marker is under marker and whose state is here if its meta, under meta, is: BeginMoveIn and
// BeginConvIn.
func (t *Tx) beginMoveIn(move MoveID, marker, meta []byte, what string) error {
	m, ok, err := t.marker(marker)
	switch {
	case err != nil:
		return err
	case ok && m.move == move && m.role == movingIn:
		return nil
	case ok && m.move == move && m.role == canceled:
		return invalidf("move %d of %s was canceled", move, what)
	case ok && m.role != movedOut && m.role != canceled:
		return invalidf("%s is already moving (move %d)", what, m.move)
	}
	if _, has, err := t.logMeta(meta); err != nil {
		return err
	} else if has {
		return invalidf("%s is on shard %d already", what, t.s.id)
	}
	return t.setMarker(marker, moveMarker{move: move, role: movingIn})
}

// StageUser writes recs, exported from the source by ExportUser, for move. Every record must be
// one of uid's (log meta, entry, cursor, conversation index); a record staged again replaces the
// earlier copy, so a copy resumed after a crash may overlap. Entries, cursors and the index are
// written where they will stay: the move marker keeps them from every reader and writer until
// ActivateUser, which therefore does work in proportion to what arrived meanwhile, not to the
// log (an activation that rewrote a million staged keys paused the user's writes for seconds).
// Only the log meta waits under the move's staging key: its presence is what makes the log
// exist here.
func (t *Tx) StageUser(move MoveID, uid string, recs []Record) error {
	m, ok, err := t.userMove(uid)
	if err != nil {
		return err
	}
	if done, err := t.activated(uid, ok); err != nil || done {
		return err // a driver resumed after the activation: the copy is over
	}
	if !ok || m.move != move || m.role != movingIn {
		return invalidf("stage: user %q is not moving in under move %d", uid, move)
	}
	for _, r := range recs {
		if !userRecord(r.Key, uid) {
			return invalidf("stage: record %x is not one of user %q's", r.Key, uid)
		}
	}
	staged := t.s.k.stagedPrefix(move)
	for _, r := range recs {
		key := append(slices.Clip(t.s.k.prefix[:]), r.Key...)
		if r.Key[0] == tagUser {
			key = append(slices.Clip(staged), r.Key...)
		}
		if err := t.set(key, r.Value); err != nil {
			return err
		}
	}
	return nil
}

// userTags are the tables holding a user's state, each keyed by uid 0x00 first.
var userTags = []byte{tagUser, tagUserEntry, tagCursor, tagUserConv, tagFollow, tagFold}

// userRecord reports whether key (without the shard prefix) is in one of uid's tables.
func userRecord(key []byte, uid string) bool {
	if len(key) < len(uid)+2 || !slices.Contains(userTags, key[0]) || string(key[1:1+len(uid)]) != uid || key[1+len(uid)] != 0 {
		return false
	}
	return key[0] != tagUser || len(key) == len(uid)+2
}

// RestartCopy drops what move has staged for uid, keeping the entries held: the source's log
// was reset while it was being copied (a new epoch starts again at position 1), or what is
// staged is of no known epoch (ResumeCopy). It is refused unless uid is moving in under move;
// activated reports, changing nothing, that uid was activated here already (a driver resumed
// after the activation).
func (t *Tx) RestartCopy(move MoveID, uid string) (activated bool, err error) {
	m, ok, err := t.userMove(uid)
	if err != nil {
		return false, err
	}
	if done, err := t.activated(uid, ok); err != nil || done {
		return done, err
	}
	if !ok || m.move != move || m.role != movingIn {
		return false, invalidf("restart copy: user %q is not moving in under move %d", uid, move)
	}
	if err := t.del(t.s.k.stagedMeta(move, t.s.k.user(uid))); err != nil {
		return false, err
	}
	return false, t.deleteUserRecords(uid)
}

// checkStagedMeta refuses, before the records an activation carries are staged, an activation of
// move that would then refuse (a refused command must write nothing): the key (what names it,
// its marker under marker and its meta under metaKey), moving in under move, would have its meta
// staged — already, or by recs — against sourceEmpty, or not at all without it. Any other
// refusal is answered, before writing, by the staging or the activation itself.
func (t *Tx) checkStagedMeta(move MoveID, marker, metaKey []byte, recs []Record, sourceEmpty bool, what string) error {
	if m, ok, err := t.marker(marker); err != nil || !ok || m.move != move || m.role != movingIn {
		return err
	}
	k := t.s.k
	_, has, err := getValue(t.b, append(slices.Clip(k.stagedPrefix(move)), metaKey[len(k.prefix):]...))
	if err != nil {
		return err
	}
	suffix := metaKey[len(k.prefix):]
	has = has || slices.ContainsFunc(recs, func(r Record) bool { return slices.Equal(r.Key, suffix) })
	switch {
	case has && sourceEmpty:
		return invalidf("activate: %s is staged, but the source was said to hold none", what)
	case !has && !sourceEmpty:
		return invalidf("activate: %s's meta is not staged: the copy is incomplete", what)
	}
	return nil
}

// ResumeActivated is MoveResume's answer for a key activated on the destination already: an
// earlier driver finished the copy, and only the map's switch is left.
const ResumeActivated = ^uint64(0)

// resumeCopy answers a driver's first copy pass of move on the destination, for a key whose
// marker is under marker and whose entries are under entries: what is staged is kept if it is
// of epoch, the source's epoch now, and the copy goes on after the highest position staged;
// otherwise restart clears it (the log was reset, or nothing recorded its epoch) and epoch is
// recorded, the copy starting from the beginning. activated, from restart, reports that the key
// was activated here already; nothing changes then.
func (t *Tx) resumeCopy(move MoveID, marker, entries []byte, epoch Epoch, restart func() (bool, error)) (from Position, activated bool, err error) {
	m, ok, err := t.marker(marker)
	if err != nil {
		return 0, false, err
	}
	if ok && m.move == move && m.role == movingIn && epoch != 0 && m.epoch == epoch {
		from, err = lastPosition(t.b, entries)
		return from, false, err
	}
	if activated, err = restart(); err != nil || activated {
		return 0, activated, err
	}
	m.epoch = epoch // restart refused anything but a marker of move, moving in
	return 0, false, t.setMarker(marker, m)
}

// resumeResult is a resume step's result: where the copy goes on from, or ResumeActivated.
func resumeResult(from Position, activated bool, err error) (uint64, error) {
	if activated {
		return ResumeActivated, err
	}
	return uint64(from), err
}

// lastPosition returns the highest position of the entries under prefix in r (0: none).
func lastPosition(r pebble.Reader, prefix []byte) (Position, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return 0, fmt.Errorf("log: read: %w", err)
	}
	defer it.Close()
	if !it.Last() {
		return 0, it.Error()
	}
	return Position(binary.BigEndian.Uint64(it.Key()[len(prefix):])), nil
}

// deleteUserRecords deletes uid's entries, cursors, conversation index and delivery reporting
// state (not its log meta). The reporting state does not travel with a move: the destination
// starts it afresh (report.go).
func (t *Tx) deleteUserRecords(uid string) error {
	var prefixes [][]byte
	for _, tag := range userTags[1:] {
		prefixes = append(prefixes, appendID(t.s.k.table(tag, len(uid)+1), uid)) // ids hold no 0x00: only uid's keys
	}
	if err := t.deletePrefixes(prefixes...); err != nil {
		return err
	}
	return t.deleteReports(uid)
}

// CancelMoveIn undoes move on the destination before any source has cut over: what was copied
// goes, and the marker says the move was canceled, so that a copy step of it still in flight
// changes nothing and a begin of it is refused; another move of uid may begin later. It is
// refused once the user is activated here; repeating it changes nothing.
func (t *Tx) CancelMoveIn(move MoveID, uid string) error {
	if !ValidLog(uid) || move == 0 {
		return invalidf("cancel: bad user id %q or move 0", uid)
	}
	return t.cancelMoveIn(move, t.s.k.moving(uid), fmt.Sprintf("user %q", uid),
		func() (bool, error) { return t.activated(uid, false) },
		func() error {
			if err := t.deletePrefixes(t.s.k.stagedPrefix(move), t.s.k.pendingPrefix(move)); err != nil {
				return err
			}
			return t.deleteUserRecords(uid)
		})
}

// cancelMoveIn undoes move on the destination of a key (what names it) whose move marker is under
// marker: clear deletes what the move copied, and activated reports whether the key, which then
// has no marker, was activated here by it: CancelMoveIn and CancelConvIn.
func (t *Tx) cancelMoveIn(move MoveID, marker []byte, what string, activated func() (bool, error), clear func() error) error {
	m, ok, err := t.marker(marker)
	switch {
	case err != nil:
		return err
	case ok && m.move == move && m.role == canceled:
		return nil
	case ok && (m.move != move || m.role != movingIn):
		return invalidf("cancel: %s is in move %d here, not moving in under move %d", what, m.move, move)
	case ok:
		if err := clear(); err != nil {
			return err
		}
	default:
		if done, err := activated(); err != nil {
			return err
		} else if done {
			return invalidf("cancel: move %d of %s is activated already", move, what)
		}
	}
	return t.setMarker(marker, moveMarker{move: move, role: canceled})
}

// activated reports whether uid, which has no move marker here (marked false), has a log here:
// on a destination, the sign that its move was activated. Copy steps that a driver resumed after
// the activation then change nothing, and the driver goes on to the switch.
func (t *Tx) activated(uid string, marked bool) (bool, error) {
	if marked {
		return false, nil
	}
	_, has, err := t.logMeta(t.s.k.user(uid))
	return has, err
}

// appendHeld appends the entries 1..n move holds, in order, each to the log meta names for the
// user it was held for (a held entry v1 names none: a user's move holds entries for one user),
// after its head.
func (t *Tx) appendHeld(move MoveID, n uint64, meta func(held string) (uid string, m *logMeta)) error {
	k := t.s.k
	for i := uint64(1); i <= n; i++ {
		v, ok, err := getValue(t.b, k.pending(move, i))
		if err != nil {
			return err
		}
		if !ok {
			return corruptf("pending entry %d of move %d missing", i, move)
		}
		held, delta, e, err := decodePending(v)
		if err != nil {
			return err
		}
		uid, m := meta(held)
		m.Head++
		m.addGroups(uid, delta)
		e.Seq = m.Head
		if err := t.set(k.userEntry(uid, m.Head), encodeEntry(&e)); err != nil {
			return err
		}
		if err := t.indexUserEntry(uid, &e); err != nil {
			return err
		}
	}
	return nil
}

// holdPending keeps e, delivered to uid while uid is moving in, as the next pending entry.
func (t *Tx) holdPending(uid string, m moveMarker, e *Entry) error {
	if m.inRange {
		return t.holdRangePending(uid, m.move, e)
	}
	m.pending++
	c := e.userCopy()
	if err := t.set(t.s.k.pending(m.move, m.pending), encodePending(e.groupsDelta(uid), &c)); err != nil {
		return err
	}
	return t.setMarker(t.s.k.moving(uid), m)
}

// FenceUser makes this shard the source of move for uid: from now on uid's cursor writes, trims
// and resets are refused with ErrMoving, and its state here is what ExportUser gives the
// destination last. The protocol fences only once no delivery for uid can still arrive here
// (every source has cut over and this shard's mark has passed each cutover). Repeating it
// changes nothing.
func (t *Tx) FenceUser(move MoveID, uid string) error {
	if !ValidLog(uid) || move == 0 {
		return invalidf("fence: bad user id %q or move 0", uid)
	}
	m, ok, err := t.userMove(uid)
	switch {
	case err != nil:
		return err
	case ok && m.move == move && (m.role == movingOut || m.role == movedOut):
		return nil
	case ok:
		return invalidf("user %q is already moving (move %d)", uid, m.move)
	}
	// A user without a log yet is fenced too: none may start here now.
	return t.setMarker(t.s.k.moving(uid), moveMarker{move: move, role: movingOut})
}

// refuseFenced refuses, with ErrMoving and before anything is written, an entry delivered to
// users of which one is fenced here. The protocol fences a user only once no delivery for it can
// still come to this shard, so this answers a delivery the protocol did not route.
func (t *Tx) refuseFenced(users []string) error {
	if !t.s.anyMoves() {
		return nil
	}
	for _, uid := range users {
		m, ok, err := t.userMove(uid)
		if err != nil {
			return err
		}
		if ok && (m.role == movingOut || m.role == movedOut) {
			return fmt.Errorf("%w: an entry delivered to user %q after the fence (move %d)", ErrMoving, uid, m.move)
		}
	}
	return nil
}

// checkNotMoving refuses a write to uid while its log is moving: out (fenced: ErrMoving) or in
// (not here yet: ErrMoved).
func (t *Tx) checkNotMoving(uid string) error {
	if !t.s.anyMoves() { // before the marker's key is built: every cursor write comes here
		return nil
	}
	return t.refuseMoving(t.s.k.moving(uid), "user", uid)
}

// refuseMoving refuses a write to a key (kind and id name it) whose move marker, under marker,
// says it is moving out (fenced: ErrMoving), or in or away (not served here: ErrMoved):
// checkNotMoving and checkConvNotMoving.
func (t *Tx) refuseMoving(marker []byte, kind, id string) error {
	m, ok, err := t.marker(marker)
	switch {
	case err != nil:
		return err
	case ok && m.role == movingOut:
		return fmt.Errorf("%w (%s %q, move %d)", ErrMoving, kind, id, m.move)
	case ok && m.role != canceled:
		return fmt.Errorf("%w (%s %q is not served here, move %d)", ErrMoved, kind, id, m.move)
	}
	return nil
}

// ActivateUser completes move on the destination: uid's staged records become its state (entries
// below the staged log's first position, trimmed on the source meanwhile, are left out), the
// entries held meanwhile are appended after its head in the order they arrived, and uid is
// served here. It returns how many held entries were appended. It is refused unless uid is moving
// in under move with its log meta staged (the copy is complete) — or, with sourceEmpty, with
// nothing staged: the source held no log of uid, and uid's log starts here, empty or with the
// held entries; once done, repeating it changes nothing.
func (t *Tx) ActivateUser(st Stamp, move MoveID, uid string, sourceEmpty bool) (int, error) {
	k := t.s.k
	m, ok, err := t.userMove(uid)
	if err != nil {
		return 0, err
	}
	if done, err := t.activated(uid, ok); err != nil || done {
		return 0, err // activated before: nothing to do
	}
	if !ok {
		return 0, invalidf("activate: user %q is not moving in under move %d", uid, move)
	}
	if m.move != move || m.role != movingIn {
		return 0, invalidf("activate: user %q is moving under move %d, not %d", uid, m.move, move)
	}
	staged := k.stagedPrefix(move)
	metaKey := k.user(uid)
	mv, has, err := getValue(t.b, append(slices.Clip(staged), metaKey[len(k.prefix):]...))
	if err != nil {
		return 0, err
	}
	var meta logMeta
	switch {
	case has && sourceEmpty:
		return 0, invalidf("activate: user %q's log is staged, but the source was said to hold none", uid)
	case has:
		if meta, err = decodeLogMeta(mv); err != nil {
			return 0, err
		}
	case !sourceEmpty:
		return 0, invalidf("activate: user %q's log meta is not staged: the copy is incomplete", uid)
	default:
		meta = logMeta{Epoch: newEpoch(st), First: 1} // a new log, as a first delivery makes one
	}
	// The records are in place already (StageUser); entries the source trimmed after they were
	// copied go now, and the staged meta with the rest of the staging.
	entryPrefix := k.userEntryPrefix(uid)
	if meta.First > 1 {
		if err := t.b.DeleteRange(entryPrefix, entryKey(entryPrefix, meta.First), nil); err != nil {
			return 0, fmt.Errorf("log: write: %w", err)
		}
	}
	if err := t.deletePrefixes(staged); err != nil {
		return 0, err
	}
	// Append what arrived meanwhile, after the source's head.
	if err := t.appendHeld(move, m.pending, func(string) (string, *logMeta) { return uid, &meta }); err != nil {
		return 0, err
	}
	pend := k.pendingPrefix(move)
	if err := t.deletePrefixes(pend); err != nil {
		return 0, err
	}
	// Written even for a user without entries (an empty log): its presence is how a repeated
	// step knows the activation happened (activated).
	if err := t.putLogMeta(metaKey, meta); err != nil {
		return 0, err
	}
	if err := t.del(k.moving(uid)); err != nil {
		return 0, err
	}
	if t.touched == nil {
		t.touched = map[string]struct{}{}
	}
	t.touched[uid] = struct{}{} // streams that waited for the user here may read now
	return int(m.pending), nil
}

// DropUser deletes uid's state from this shard, the source of move, once the move has switched
// to the destination, keeping a tombstone: reads of uid here answer ErrMoved from then on, until
// the user moves back in. It is refused unless uid is fenced under move; once done, repeating it
// changes nothing.
func (t *Tx) DropUser(move MoveID, uid string) error {
	k := t.s.k
	m, ok, err := t.userMove(uid)
	if err != nil {
		return err
	}
	switch {
	case ok && m.move == move && m.role == movedOut:
		return nil // dropped before
	case !ok || m.move != move || m.role != movingOut:
		return invalidf("drop: user %q is not moving out under move %d", uid, move)
	}
	if err := t.dropUserState(uid); err != nil {
		return err
	}
	// The marker stays, as a tombstone: a reader that still comes here (a sync stream opened
	// before the switch, a node with an older map) is told the log is elsewhere (ErrMoved)
	// rather than answered as for a user without a log, which would look like an empty one.
	return t.setMarker(k.moving(uid), moveMarker{move: move, role: movedOut})
}

// dropUserState deletes uid's log, meta included, from this shard, for a move that took it
// elsewhere (DropUser, DropRange), and wakes its streams here, which look again and find it gone.
func (t *Tx) dropUserState(uid string) error {
	if err := t.deleteUserRecords(uid); err != nil {
		return err
	}
	if err := t.dropMeta(t.s.k.user(uid)); err != nil {
		return err
	}
	if t.touched == nil {
		t.touched = map[string]struct{}{}
	}
	t.touched[uid] = struct{}{}
	return nil
}

// dropMeta deletes the log meta under key, and from both caches, so neither brings it back.
func (t *Tx) dropMeta(key []byte) error {
	if err := t.del(key); err != nil {
		return err
	}
	delete(t.pending, string(key))
	delete(t.s.metas, string(key))
	return nil
}

// ExportUser passes fn uid's records from one consistent view of this shard: the log entries with
// positions above after, at most limit of them (limit ≤ 0: all), and, when they reach the log's head,
// the log meta, every device cursor and every conversation index entry. It returns the log's
// epoch (0: no log), the last position passed and whether it reached the head. A move copies a user by calling it until done,
// then, after the fence, once more from the last position: the final meta and cursors come with
// that last call, and the state records travel once per pass over the log rather than with every
// chunk (a hot user's conversation index is large).
func (s *Shard) ExportUser(uid string, after Position, limit int, fn func(Record) error) (epoch Epoch, last Position, done bool, err error) {
	if !ValidLog(uid) {
		return 0, 0, false, invalidf("bad user id %q", uid)
	}
	k := s.k
	return s.export(exportSpec{meta: k.user(uid), entries: k.userEntryPrefix(uid), final: [][]byte{k.cursorPrefix(uid), k.userConvPrefix(uid), k.followPrefix(uid), k.foldPrefix(uid)}},
		after, limit, fn)
}

// exportSpec says what a key's export (ExportUser, ExportConv) passes on.
type exportSpec struct {
	meta    []byte   // the log meta's key: without it there is nothing to export
	entries []byte   // the prefix of the log's entries, each keyed by its position
	final   [][]byte // prefixes of the records passed, all of them, once the entries reach the head
	// with, if set, passes what goes with an entry (key and value as stored), from the same view.
	with func(r pebble.Reader, emit func(key, val []byte) error, key, val []byte, pos Position) error
}

// export passes fn, from one consistent view of this shard, the entries of sp above after (at
// most limit; limit ≤ 0: all), each with what sp.with adds, and, when they reach the log's head,
// the meta and every record under sp.final. It returns the log's epoch (0: no log), the last
// position passed and whether it reached the head.
func (s *Shard) export(sp exportSpec, after Position, limit int, fn func(Record) error) (epoch Epoch, last Position, done bool, err error) {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	emit := func(key, val []byte) error {
		return fn(Record{Key: slices.Clone(key[len(s.k.prefix):]), Value: slices.Clone(val)})
	}
	meta, ok, err := getValue(snap, sp.meta)
	if err != nil || !ok {
		return 0, 0, err == nil, err // no log: nothing to copy
	}
	m, err := decodeLogMeta(meta)
	if err != nil {
		return 0, 0, false, err
	}
	scan := func(lo, hi []byte, most int, each func(key, val []byte) error) error {
		it, err := snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return fmt.Errorf("log: read: %w", err)
		}
		for ok, n := it.First(), 0; ok && (most <= 0 || n < most); ok, n = it.Next(), n+1 {
			if err := each(it.Key(), it.Value()); err != nil {
				it.Close()
				return err
			}
		}
		return it.Close()
	}
	last = after
	err = scan(entryKey(sp.entries, max(after+1, m.First)), prefixEnd(sp.entries), limit, func(key, val []byte) error {
		last = Position(binary.BigEndian.Uint64(key[len(sp.entries):]))
		if err := emit(key, val); err != nil || sp.with == nil {
			return err
		}
		return sp.with(snap, emit, key, val, last)
	})
	if err != nil || last < m.Head {
		return m.Epoch, last, false, err
	}
	if err := emit(sp.meta, meta); err != nil {
		return 0, 0, false, err
	}
	for _, p := range sp.final {
		if err := scan(p, prefixEnd(p), 0, emit); err != nil {
			return 0, 0, false, err
		}
	}
	return m.Epoch, last, true, nil
}

// MoveOp says which step of a move a [MoveStep] makes.
type MoveOp uint8

// Move steps. Values are persisted in Raft commands.
const (
	MoveBegin    MoveOp = 1  // destination: BeginMoveIn
	MoveStage    MoveOp = 2  // destination: StageUser of Records
	MoveCutover  MoveOp = 3  // every source: Cutover from From to To; the result is its position
	MoveFence    MoveOp = 4  // source: FenceUser
	MoveActivate MoveOp = 5  // destination: Stage of Records, if any, then ActivateUser; the result is the entries appended
	MoveDrop     MoveOp = 6  // source: DropUser
	MoveResume   MoveOp = 7  // destination: ResumeCopy (a driver's first pass, or the log was reset meanwhile)
	MoveCancel   MoveOp = 8  // destination: CancelMoveIn
	MoveSettle   MoveOp = 9  // destination, conversations and slot ranges: SettleConv, SettleRange (the old home has drained)
	MoveDropped  MoveOp = 10 // source, slot ranges only: DroppedRange (every key of the range is deleted)
	MoveSplit    MoveOp = 11 // every source, a user's split: SplitUser into Subs; the result is its position
)

// The flags byte of an encoded [MoveStep]. Steps encoded before conversations could move have
// only the first.
const (
	flagSourceEmpty uint8 = 1 << 0
	flagConv        uint8 = 1 << 1 // the conversation id follows
	flagFence       uint8 = 1 << 2 // the fence position follows
	flagEpoch       uint8 = 1 << 3 // the epoch follows
	flagSlots       uint8 = 1 << 4 // the slot range follows
	flagBatch       uint8 = 1 << 5 // the batch of keys follows
	flagSubs        uint8 = 1 << 6 // the number of sub-logs follows
	flagSplits      uint8 = 1 << 7 // the split users follow
)

// moveStepV2 is the format of a [MoveStep] whose first flags byte is full: a second flags byte
// follows the v1 layout, and its sections after it. A step is encoded as v2 only when it sets
// a field of the second byte, so every other step keeps its v1 bytes (and an older node
// refuses, as a corrupt command, only the steps it could not apply as meant).
const moveStepV2 uint8 = 2

// The second flags byte of a v2 [MoveStep].
const flag2Pinned uint8 = 1 << 0 // the pinned users follow

// The flags byte of each key of a [MoveStep]'s Batch.
const (
	keyConv    uint8 = 1 << 0
	keyRestart uint8 = 1 << 1
)

// MoveKey is one key's part of a slot range's copy or drop: a user's log (User) or a
// conversation (Conv), with its records.
type MoveKey struct {
	User string
	Conv string
	// Restart (a copy): what an earlier driver staged of the key is dropped first, since this
	// driver copies it from the start.
	Restart bool
	Records []Record
}

// slot returns the key's hash slot.
// valid reports whether mk names exactly one key: a user's log (a sub-log's included) or a
// conversation.
func (mk MoveKey) valid() bool {
	if mk.Conv != "" {
		return mk.User == "" && ValidID(mk.Conv)
	}
	return ValidLog(mk.User)
}

func (mk MoveKey) slot() int {
	if mk.Conv != "" {
		return ConvSlot(mk.Conv)
	}
	return UserSlot(mk.User)
}

// what names the key, for errors.
func (mk MoveKey) what() string {
	if mk.Conv != "" {
		return fmt.Sprintf("conversation %q", mk.Conv)
	}
	return fmt.Sprintf("user %q", mk.User)
}

// MoveStep is a request to make one step of moving a user's log, a conversation or a range of
// slots ([Tx.Move]).
type MoveStep struct {
	Op   MoveOp
	Move MoveID
	// User names the user whose log moves; Conv, when set instead, the conversation that moves
	// (convmove.go).
	User    string
	Conv    string
	From    ShardID  // MoveCutover
	To      ShardID  // MoveCutover
	Records []Record // MoveStage
	// SourceEmpty (MoveActivate): the source held no log of the user, so nothing was staged.
	SourceEmpty bool
	// Fence (a conversation's MoveActivate): the source's outbox position its fence answered,
	// which the conversation's deliveries from the destination wait behind (From's).
	Fence uint64
	// Epoch (MoveResume): the epoch of the source's log now (0: it has none).
	Epoch Epoch
	// Slots, when set instead of User and Conv, is the slot range that moves (rangemove.go); its
	// copy and drop name the range's keys in Batch (MoveStage, MoveActivate, MoveDrop).
	Slots *SlotSpan
	Batch []MoveKey
	// Subs (MoveSplit) is how many sub-logs the user's stream is split into (split.go).
	Subs int
	// Splits (MoveBegin) are the cluster's split users and their sub-logs, which the destination
	// installs first (InstallSplits): the keys moving in route as they did at their old home.
	Splits map[string]int
	// Pinned (a slot range's MoveCutover) are the users of the range that the cluster map pins
	// to shards other than From: they do not move with the range, and their records keep going
	// to those shards (RangeCutover).
	Pinned map[string]ShardID
}

// MarshalBinary encodes the request.
func (r *MoveStep) MarshalBinary() ([]byte, error) {
	size := 32 + len(r.User)
	for _, rec := range r.Records {
		size += 2*binary.MaxVarintLen32 + len(rec.Key) + len(rec.Value)
	}
	for _, mk := range r.Batch {
		size += 8 + len(mk.User) + len(mk.Conv)
		for _, rec := range mk.Records {
			size += 2*binary.MaxVarintLen32 + len(rec.Key) + len(rec.Value)
		}
	}
	e := encoder{b: make([]byte, 0, size)}
	version := uint8(requestV1)
	if len(r.Pinned) > 0 {
		version = moveStepV2 // only steps that need it: every other step keeps its v1 bytes
	}
	e.u8(version)
	e.u8(uint8(r.Op))
	e.uvarint(uint64(r.Move))
	e.str(r.User)
	e.uvarint(uint64(r.From))
	e.uvarint(uint64(r.To))
	e.records(r.Records)
	var flags uint8
	if r.SourceEmpty {
		flags |= flagSourceEmpty
	}
	if r.Conv != "" {
		flags |= flagConv
	}
	if r.Fence != 0 {
		flags |= flagFence
	}
	if r.Epoch != 0 {
		flags |= flagEpoch
	}
	if r.Slots != nil {
		flags |= flagSlots
	}
	if len(r.Batch) > 0 {
		flags |= flagBatch
	}
	if r.Subs != 0 {
		flags |= flagSubs
	}
	if len(r.Splits) > 0 {
		flags |= flagSplits
	}
	e.u8(flags)
	if r.Conv != "" {
		e.str(r.Conv)
	}
	if r.Fence != 0 {
		e.uvarint(r.Fence)
	}
	if r.Epoch != 0 {
		e.uvarint(uint64(r.Epoch))
	}
	if r.Slots != nil {
		e.uvarint(uint64(r.Slots.First))
		e.uvarint(uint64(r.Slots.Last))
	}
	if len(r.Batch) > 0 {
		e.uvarint(uint64(len(r.Batch)))
		for _, mk := range r.Batch {
			kf, id := uint8(0), mk.User
			if mk.Conv != "" {
				kf, id = keyConv, mk.Conv
			}
			if mk.Restart {
				kf |= keyRestart
			}
			e.u8(kf)
			e.str(id)
			e.records(mk.Records)
		}
	}
	if r.Subs != 0 {
		e.uvarint(uint64(r.Subs))
	}
	if len(r.Splits) > 0 {
		encodeUserTable(&e, r.Splits)
	}
	if version == moveStepV2 {
		e.u8(flag2Pinned)
		encodeUserTable(&e, r.Pinned)
	}
	return e.b, nil
}

// encodeUserTable encodes a table of users' numbers (a step's split users, its pinned users): a
// count, then each user and number in ascending user order, so a step has one encoding.
func encodeUserTable[V ~int | ~uint32](e *encoder, table map[string]V) {
	e.uvarint(uint64(len(table)))
	for _, uid := range slices.Sorted(maps.Keys(table)) {
		e.str(uid)
		e.uvarint(uint64(table[uid]))
	}
}

// decodeUserTable decodes what encodeUserTable wrote, of a step of total bytes, refusing an
// empty table, users out of order and numbers outside [lo, hi].
func decodeUserTable[V ~int | ~uint32](d *decoder, what string, total int, lo, hi uint64) (map[string]V, error) {
	n := d.uvarint()
	if n == 0 || n > uint64(total) { // every row takes at least two bytes
		return nil, corruptf("move step: %d %s in %d bytes", n, what, total)
	}
	table := make(map[string]V, n)
	prev := ""
	for i := range n {
		uid, v := d.str(), d.uvarint()
		if d.err != nil {
			break
		}
		if v < lo || v > hi || i > 0 && uid <= prev { // ascending: one encoding per step
			return nil, corruptf("move step: %s: user %q with %d, or out of order", what, uid, v)
		}
		table[uid], prev = V(v), uid
	}
	return table, nil
}

// records encodes a move step's records: a count, then each key and value.
func (e *encoder) records(recs []Record) {
	e.uvarint(uint64(len(recs)))
	for _, rec := range recs {
		e.bytes(rec.Key)
		e.bytes(rec.Value)
	}
}

// records decodes what encoder.records wrote, refusing a count the bytes cannot hold (every
// record takes at least two).
func (d *decoder) records(total int) ([]Record, error) {
	n := d.uvarint()
	if n > uint64(total) {
		return nil, corruptf("move step: %d records in %d bytes", n, total)
	}
	var out []Record
	for range n {
		out = append(out, Record{Key: d.bytes(), Value: d.bytes()})
	}
	return out, nil
}

// UnmarshalBinary decodes a request encoded by MarshalBinary. Errors wrap ErrCorrupt.
func (r *MoveStep) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	version := d.version("move step", moveStepV2)
	*r = MoveStep{Op: MoveOp(d.u8()), Move: MoveID(d.uvarint()), User: d.str(), From: ShardID(d.uvarint()), To: ShardID(d.uvarint())}
	var err error
	if r.Records, err = d.records(len(b)); err != nil {
		return err
	}
	flags := d.u8()
	if flags&^(flagSourceEmpty|flagConv|flagFence|flagEpoch|flagSlots|flagBatch|flagSubs|flagSplits) != 0 {
		return corruptf("move step: bad flags %#x", flags)
	}
	r.SourceEmpty = flags&flagSourceEmpty != 0
	if flags&flagConv != 0 {
		if r.Conv = d.str(); r.Conv == "" && d.err == nil {
			return corruptf("move step: empty conversation id")
		}
	}
	if flags&flagFence != 0 {
		if r.Fence = d.uvarint(); r.Fence == 0 && d.err == nil {
			return corruptf("move step: fence position 0")
		}
	}
	if flags&flagEpoch != 0 {
		if r.Epoch = Epoch(d.uvarint()); r.Epoch == 0 && d.err == nil {
			return corruptf("move step: epoch 0")
		}
	}
	if flags&flagSlots != 0 {
		first, last := d.uvarint(), d.uvarint()
		if r.Slots = (&SlotSpan{First: int(min(first, NumSlots)), Last: int(min(last, NumSlots))}); !r.Slots.Valid() && d.err == nil {
			return corruptf("move step: slots %d-%d", first, last)
		}
	}
	if flags&flagBatch != 0 {
		n := d.uvarint()
		if n == 0 || n > uint64(len(b)) { // every key takes at least three bytes
			return corruptf("move step: %d keys in %d bytes", n, len(b))
		}
		for range n {
			kf := d.u8()
			if kf&^(keyConv|keyRestart) != 0 && d.err == nil {
				return corruptf("move step: bad key flags %#x", kf)
			}
			mk := MoveKey{Restart: kf&keyRestart != 0}
			if id := d.str(); kf&keyConv != 0 {
				mk.Conv = id
			} else {
				mk.User = id
			}
			if mk.Records, err = d.records(len(b)); err != nil {
				return err
			}
			r.Batch = append(r.Batch, mk)
		}
	}
	if flags&flagSubs != 0 {
		n := d.uvarint()
		if n < 2 || n > MaxSubLogs {
			return corruptf("move step: %d sub-logs", n)
		}
		r.Subs = int(n)
	}
	if flags&flagSplits != 0 {
		if r.Splits, err = decodeUserTable[int](&d, "split users", len(b), 2, MaxSubLogs); err != nil {
			return err
		}
	}
	if version == moveStepV2 {
		if flags2 := d.u8(); flags2 != flag2Pinned && d.err == nil {
			return corruptf("move step: bad second flags %#x", flags2)
		}
		if r.Pinned, err = decodeUserTable[ShardID](&d, "pinned users", len(b), 1, math.MaxUint32); err != nil {
			return err
		}
	}
	return d.done("move step")
}

// Move makes the step r names and returns its number: the cutover's position for MoveCutover, the
// fence's outbox position for a conversation's MoveFence, the entries appended for MoveActivate,
// where the copy goes on from for MoveResume (ResumeActivated if the key was activated already), 0
// otherwise.
func (t *Tx) Move(st Stamp, r *MoveStep) (uint64, error) {
	if len(r.Splits) > 0 {
		if r.Op != MoveBegin {
			return 0, invalidf("move step %d: split users come with a move's first step", r.Op)
		}
		if err := t.InstallSplits(r.Splits); err != nil {
			return 0, err
		}
	}
	if r.Slots != nil {
		return t.moveRange(st, r)
	}
	if len(r.Batch) > 0 {
		return 0, invalidf("move step %d: a batch of keys is for a slot range's move", r.Op)
	}
	if r.Conv != "" {
		if r.User != "" {
			return 0, invalidf("move step names both user %q and conversation %q", r.User, r.Conv)
		}
		return t.moveConv(st, r)
	}
	switch r.Op {
	case MoveBegin:
		return 0, t.BeginMoveIn(r.Move, r.User)
	case MoveStage:
		return 0, t.StageUser(r.Move, r.User, r.Records)
	case MoveCutover:
		return t.Cutover(r.Move, r.User, r.From, r.To)
	case MoveFence:
		return 0, t.FenceUser(r.Move, r.User)
	case MoveActivate:
		if len(r.Records) > 0 { // the copy's last records, staged in the same command
			err := t.checkStagedMeta(r.Move, t.s.k.moving(r.User), t.s.k.user(r.User), r.Records, r.SourceEmpty, fmt.Sprintf("user %q", r.User))
			if err == nil {
				err = t.StageUser(r.Move, r.User, r.Records)
			}
			if err != nil {
				return 0, err
			}
		}
		n, err := t.ActivateUser(st, r.Move, r.User, r.SourceEmpty)
		return uint64(n), err
	case MoveDrop:
		return 0, t.DropUser(r.Move, r.User)
	case MoveResume:
		return resumeResult(t.resumeCopy(r.Move, t.s.k.moving(r.User), t.s.k.userEntryPrefix(r.User), r.Epoch,
			func() (bool, error) { return t.RestartCopy(r.Move, r.User) }))
	case MoveCancel:
		return 0, t.CancelMoveIn(r.Move, r.User)
	case MoveSplit:
		return t.SplitUser(r.User, r.Subs)
	}
	return 0, invalidf("unknown move step %d", r.Op)
}
