package log

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Moving a range of hash slots to another shard: the storage half of docs/MOVES.md, "Slot moves,
// shard add, split". It is the user and conversation moves of move.go and convmove.go made for
// every key of the range at once, on the same steps, with one marker and one cutover per range
// instead of one per key (half a shard is hundreds of thousands of keys):
//
//	D  BeginRangeIn    the range is moving in under move from S: its keys' reads and writes here
//	                   are refused (ErrMoved), their deliveries are held, in arrival order
//	D  stage           a batch of keys' records, exported from S, behind the marker (StageUser,
//	                   StageConv: the per-key checks find the range's marker)
//	X  RangeCutover    every source: records of the range's users up to the outbox head now go
//	                   to S, later ones to D
//	S  FenceRange      every key of the range is fenced (ErrMoving); it returns the outbox
//	                   position f every record of the range's conversations is at or before
//	D  ActivateRange   the staged keys become D's, the held entries are appended after each
//	                   user's head, the conversations are held behind (S, f) at every destination
//	D  SettleRange     S's fan-out has delivered up to f: the conversations' barriers go
//	S  drop            the range's keys are deleted in chunks (one command per chunk: one
//	                   command deleting half a shard would stall its apply), then a tombstone
//	                   stays: reads of the range's keys answer ErrMoved
//
// A range marker is consulted by every per-key check (readMarker) after the key's own marker, so
// the per-key steps and checks work unchanged for the keys of a range. A key of the range that
// this shard holds for itself is not covered by a marker that says the range is not here (moving
// in, or moved away): a user or conversation pinned here by an earlier move of its own. The
// keys' records are written as a per-key move writes them, the metas under the move's staging
// prefix, so a staged key is never taken for one held here.
//
// Keys (after convmove.go's):
//
//	0x66 | move u64   a range marker: rangeMarker
//	0x67 | move u64   a range cutover on a source: rangeCutover
const (
	tagRangeMoving  byte = 0x66
	tagRangeCutover byte = 0x67
)

// rangeRole says which side of a slot move a shard is on for the range.
type rangeRole uint8

const (
	rangeIn       rangeRole = 1 // destination, before the activation
	rangeOut      rangeRole = 2 // source, fenced
	rangeDropping rangeRole = 3 // source, its copy being deleted
	rangeGone     rangeRole = 4 // source, dropped: a tombstone
	rangeServed   rangeRole = 5 // destination, activated: it shadows the older markers of the range
	rangeCanceled rangeRole = 6 // destination, the move canceled
)

// rangeMarker is one slot move's state on a shard.
type rangeMarker struct {
	move    MoveID
	span    SlotSpan
	role    rangeRole
	from    ShardID // destination: the source
	pending uint64  // destination: entries held so far
	fence   uint64  // source: the fence position; destination, once activated: the same
}

const rangeMarkerV1 = 1

func (m *rangeMarker) encode() []byte {
	b := binary.BigEndian.AppendUint64([]byte{rangeMarkerV1}, uint64(m.move))
	b = binary.BigEndian.AppendUint16(b, uint16(m.span.First))
	b = binary.BigEndian.AppendUint16(b, uint16(m.span.Last))
	b = append(b, byte(m.role))
	b = binary.BigEndian.AppendUint32(b, uint32(m.from))
	b = binary.BigEndian.AppendUint64(b, m.pending)
	return binary.BigEndian.AppendUint64(b, m.fence)
}

func decodeRangeMarker(b []byte) (rangeMarker, error) {
	if len(b) != 34 || b[0] != rangeMarkerV1 {
		return rangeMarker{}, corruptf("range marker of %d bytes", len(b))
	}
	m := rangeMarker{
		move: MoveID(binary.BigEndian.Uint64(b[1:])),
		span: SlotSpan{First: int(binary.BigEndian.Uint16(b[9:])), Last: int(binary.BigEndian.Uint16(b[11:]))},
		role: rangeRole(b[13]), from: ShardID(binary.BigEndian.Uint32(b[14:])),
		pending: binary.BigEndian.Uint64(b[18:]), fence: binary.BigEndian.Uint64(b[26:]),
	}
	if !m.span.Valid() || m.role < rangeIn || m.role > rangeCanceled || m.move == 0 {
		return rangeMarker{}, corruptf("range marker %+v", m)
	}
	return m, nil
}

// rangeCutover is a source's switch of a slot range's users from shard from to shard to: its
// records up to at go to from, later ones to to (a user's own cutover, cutover.go, comes first).
type rangeCutover struct {
	move     MoveID
	span     SlotSpan
	at       uint64
	from, to ShardID
}

const rangeCutoverV1 = 1

func (c *rangeCutover) encode() []byte {
	b := binary.BigEndian.AppendUint64([]byte{rangeCutoverV1}, uint64(c.move))
	b = binary.BigEndian.AppendUint16(b, uint16(c.span.First))
	b = binary.BigEndian.AppendUint16(b, uint16(c.span.Last))
	b = binary.BigEndian.AppendUint64(b, c.at)
	b = binary.BigEndian.AppendUint32(b, uint32(c.from))
	return binary.BigEndian.AppendUint32(b, uint32(c.to))
}

func decodeRangeCutover(b []byte) (rangeCutover, error) {
	if len(b) != 29 || b[0] != rangeCutoverV1 {
		return rangeCutover{}, corruptf("range cutover of %d bytes", len(b))
	}
	c := rangeCutover{
		move: MoveID(binary.BigEndian.Uint64(b[1:])),
		span: SlotSpan{First: int(binary.BigEndian.Uint16(b[9:])), Last: int(binary.BigEndian.Uint16(b[11:]))},
		at:   binary.BigEndian.Uint64(b[13:]), from: ShardID(binary.BigEndian.Uint32(b[21:])), to: ShardID(binary.BigEndian.Uint32(b[25:])),
	}
	if !c.span.Valid() || c.move == 0 || c.from == 0 || c.to == 0 {
		return rangeCutover{}, corruptf("range cutover %+v", c)
	}
	return c, nil
}

func (k keys) rangeMarker(move MoveID) []byte {
	return binary.BigEndian.AppendUint64(k.table(tagRangeMoving, 8), uint64(move))
}

func (k keys) rangeCutover(move MoveID) []byte {
	return binary.BigEndian.AppendUint64(k.table(tagRangeCutover, 8), uint64(move))
}

// shardRanges is a shard's range markers and range cutovers, each ascending by move. They are
// held in memory (Shard.ranges, and a Tx's copy while it changes them): every per-key check and
// every outbox read consults them, and a store read per check made deliveries a third slower
// when per-key markers were read that way. Immutable once published.
type shardRanges struct {
	markers []rangeMarker
	cuts    []rangeCutover
	// err is set when a stored marker or cutover could not be decoded (a damaged disk, a bad
	// snapshot): every check then answers it, rather than take the range for one not moving.
	err error
}

// check returns the error of a damaged range record, if the shard has one.
func (rs *shardRanges) check() error {
	if rs == nil {
		return nil
	}
	return rs.err
}

// committedRanges returns the shard's committed range markers and cutovers (nil: none).
func (s *Shard) committedRanges() *shardRanges { return s.ranges.Load() }

// rangesView returns the range markers and cutovers as this Tx sees them.
func (t *Tx) rangesView() *shardRanges {
	if t.rng != nil {
		return t.rng
	}
	return t.s.committedRanges()
}

// editRanges returns this Tx's own copy of the ranges, made on its first change; Commit
// publishes it.
func (t *Tx) editRanges() *shardRanges {
	if t.rng == nil {
		t.rng = &shardRanges{}
		if c := t.s.committedRanges(); c != nil {
			t.rng.markers, t.rng.cuts, t.rng.err = slices.Clone(c.markers), slices.Clone(c.cuts), c.err
		}
	}
	return t.rng
}

// putRangeMarker writes m, noting first that the shard has move markers (anyMoves).
func (t *Tx) putRangeMarker(m rangeMarker) error {
	t.s.moves.Store(true)
	rs := t.editRanges()
	if i := slices.IndexFunc(rs.markers, func(o rangeMarker) bool { return o.move == m.move }); i >= 0 {
		rs.markers[i] = m
	} else {
		rs.markers = append(rs.markers, m)
		slices.SortFunc(rs.markers, func(a, b rangeMarker) int { return cmp.Compare(a.move, b.move) })
	}
	return t.set(t.s.k.rangeMarker(m.move), m.encode())
}

// rangeMarkerOf returns move's range marker as this Tx sees it.
func (t *Tx) rangeMarkerOf(move MoveID) (rangeMarker, bool) { return t.rangesView().marker(move) }

// marker returns move's range marker, if any.
func (rs *shardRanges) marker(move MoveID) (rangeMarker, bool) {
	if rs != nil {
		if i := slices.IndexFunc(rs.markers, func(o rangeMarker) bool { return o.move == move }); i >= 0 {
			return rs.markers[i], true
		}
	}
	return rangeMarker{}, false
}

// loadRanges reads the range markers and cutovers from the state into memory.
func (s *Shard) loadRanges() error {
	rs := &shardRanges{}
	for _, tag := range []byte{tagRangeMoving, tagRangeCutover} {
		lo, hi := s.k.tableBounds(tag)
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return fmt.Errorf("log: read: %w", err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			var err error
			if tag == tagRangeMoving {
				var m rangeMarker
				if m, err = decodeRangeMarker(it.Value()); err == nil {
					rs.markers = append(rs.markers, m)
				}
				s.moves.Store(true)
			} else {
				var c rangeCutover
				if c, err = decodeRangeCutover(it.Value()); err == nil {
					rs.cuts = append(rs.cuts, c)
				}
				s.cutovers.Store(true)
			}
			if err != nil && rs.err == nil {
				rs.err = err // the shard opens; its checks answer the damage
			}
		}
		if err := it.Close(); err != nil {
			return fmt.Errorf("log: read: %w", err)
		}
	}
	s.ranges.Store(rs)
	return nil
}

// rangeMarkerFor returns the marker the newest range marker covering the key of the per-key
// marker key (a user's or a conversation's) gives it, read as a per-key marker, if any. A marker
// saying the range is not here (moving in, moved away) does not cover a key held here for itself.
func (s *Shard) rangeMarkerFor(r pebble.Reader, rs *shardRanges, key []byte) (moveMarker, bool, error) {
	p := len(s.k.prefix)
	id, conv := string(key[p+1:len(key)-1]), key[p] == tagConvMoving
	slot := UserSlot(id)
	if conv {
		slot = ConvSlot(id)
	}
	for i := len(rs.markers) - 1; i >= 0; i-- {
		m := &rs.markers[i]
		if !m.span.Contains(slot) {
			continue
		}
		out := moveMarker{move: m.move, inRange: true}
		switch m.role {
		case rangeServed, rangeCanceled:
			return moveMarker{}, false, nil // the range is here (or never came): the key's own state decides
		case rangeOut:
			out.role, out.pending = movingOut, m.fence
			return out, true, nil
		case rangeDropping:
			out.role = movedOut
			return out, true, nil
		}
		meta := s.k.user(id) // built only here: most checks end above without a store read
		if conv {
			meta = s.k.conv(id)
		}
		if _, held, err := getValue(r, meta); err != nil || held {
			return moveMarker{}, false, err
		}
		out.role, out.pending = movingIn, m.pending
		if m.role == rangeGone {
			out.role, out.pending = movedOut, 0
		}
		return out, true, nil
	}
	return moveMarker{}, false, nil
}

// activeRange refuses a range marker for span while another move of an overlapping range is
// under way on this shard.
func (t *Tx) activeRange(move MoveID, span SlotSpan) error {
	rs := t.rangesView()
	if rs == nil {
		return nil
	}
	for _, m := range rs.markers {
		if m.move != move && m.span.Overlaps(span) && (m.role == rangeIn || m.role == rangeOut || m.role == rangeDropping) {
			return invalidf("slots %d-%d overlap slots %d-%d, moving under move %d", span.First, span.Last, m.span.First, m.span.Last, m.move)
		}
	}
	return nil
}

// BeginRangeIn makes this shard the destination of move for the slots of span, from shard from:
// until ActivateRange, the keys of the range (but those held here for themselves) are not served
// here, and entries delivered to its users are held. Repeating it changes nothing.
func (t *Tx) BeginRangeIn(move MoveID, span SlotSpan, from ShardID) error {
	if m, ok := t.rangeMarkerOf(move); ok {
		if m.role == rangeIn {
			return nil
		}
		return invalidf("move %d of slots %d-%d is past its begin here (role %d)", move, span.First, span.Last, m.role)
	}
	if err := t.activeRange(move, span); err != nil {
		return err
	}
	return t.putRangeMarker(rangeMarker{move: move, span: span, role: rangeIn, from: from})
}

// holdRangePending keeps e, delivered to uid of a range moving in under m.move, as the range's
// next held entry.
func (t *Tx) holdRangePending(uid string, move MoveID, e *Entry) error {
	m, ok := t.rangeMarkerOf(move)
	if !ok || m.role != rangeIn {
		return corruptf("held entry for user %q: no range moving in under move %d", uid, move)
	}
	m.pending++
	c := e.userCopy()
	if err := t.set(t.s.k.pending(move, m.pending), encodeRangePending(uid, e.groupsDelta(uid), &c)); err != nil {
		return err
	}
	return t.putRangeMarker(m)
}

// stageBatch stages each key's records of a range's copy (StageUser, StageConv), first dropping
// what an earlier driver staged of a key marked Restart.
func (t *Tx) stageBatch(st Stamp, move MoveID, batch []MoveKey) error {
	if err := t.checkBatch(move, batch); err != nil {
		return err
	}
	for _, mk := range batch {
		var err error
		switch {
		case mk.Conv != "" && mk.Restart:
			_, err = t.RestartConvCopy(move, mk.Conv)
		case mk.Restart:
			_, err = t.RestartCopy(move, mk.User)
		}
		if err == nil && mk.Conv != "" {
			err = t.StageConv(st, move, mk.Conv, mk.Records)
		} else if err == nil {
			err = t.StageUser(move, mk.User, mk.Records)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkBatch refuses, before anything is written, a batch of a range's copy naming a key that is
// not moving in here under move, or a record that is not the key's.
func (t *Tx) checkBatch(move MoveID, batch []MoveKey) error {
	for _, mk := range batch {
		marker := t.s.k.moving(mk.User)
		if mk.Conv != "" {
			marker = t.s.k.convMoving(mk.Conv)
		}
		if !mk.valid() {
			return invalidf("stage: a batch names user %q and conversation %q: one of them, valid", mk.User, mk.Conv)
		}
		m, ok, err := t.marker(marker)
		if err != nil {
			return err
		}
		if !ok || m.move != move || m.role != movingIn {
			return invalidf("stage: %s is not moving in under move %d", mk.what(), move)
		}
		for _, r := range mk.Records {
			owned := mk.Conv == "" && userRecord(r.Key, mk.User)
			if mk.Conv != "" {
				if owned, err = convRecord(r, mk.Conv); err != nil {
					return err
				}
			}
			if !owned {
				return invalidf("stage: record %x is not one of %s's", r.Key, mk.what())
			}
		}
	}
	return nil
}

// RangeCutover switches, for move, the destination of the records in this shard's outbox of
// every user of span from shard from to shard to: records up to the outbox head now go to from,
// later ones to to. Users with a cutover of their own whose records go to from now switch with
// the range; those whose records go elsewhere (moved away on their own) keep theirs. It returns
// the position. Repeating it for the same move returns the same and changes nothing.
//
// pinned names the users of span the cluster map pins to shards other than from (moved away on
// their own, before this shard had a cutover of theirs: it was added since): each gets a
// cutover of its own here that sends every record to its shard, so the range's does not route
// it. Without it, records to such a user would go to to, where its log is not.
func (t *Tx) RangeCutover(move MoveID, span SlotSpan, from, to ShardID, pinned map[string]ShardID) (uint64, error) {
	if !span.Valid() || move == 0 || from == to || from == 0 || to == 0 {
		return 0, invalidf("range cutover: bad slots %d-%d, move 0 or no change of shard (%d)", span.First, span.Last, from)
	}
	for uid, at := range pinned {
		if !ValidLog(uid) || !span.Contains(UserSlot(uid)) || at == 0 || at == from {
			return 0, invalidf("range cutover: user %q pinned to shard %d is not one the range leaves behind", uid, at)
		}
	}
	if rs := t.rangesView(); rs != nil {
		for _, c := range rs.cuts {
			if c.move == move {
				return c.at, nil
			}
		}
		for slot := span.First; slot <= span.Last; slot++ {
			if now, ok := rs.routeSlot(slot, ^uint64(0)); ok && now != from {
				return 0, invalidf("range cutover of slot %d from shard %d: its records go to shard %d", slot, from, now)
			}
		}
	}
	info, err := t.outboxInfo()
	if err != nil {
		return 0, err
	}
	cuts, err := t.s.readCutovers(t.b)
	if err != nil {
		return 0, err
	}
	for uid, c := range cuts {
		if c.after == from && span.Contains(UserSlot(uid)) {
			c.move, c.at, c.after = move, info.Head, to
			c.steps = append(c.steps, cutoverStep{upTo: info.Head, shard: from})
			if err := t.set(t.s.k.cutover(uid), c.encode()); err != nil {
				return 0, err
			}
		}
	}
	for _, uid := range slices.Sorted(maps.Keys(pinned)) {
		if cuts[uid] == nil { // one of its own routes it already
			if err := t.set(t.s.k.cutover(uid), (&cutover{after: pinned[uid]}).encode()); err != nil {
				return 0, err
			}
		}
	}
	c := rangeCutover{move: move, span: span, at: info.Head, from: from, to: to}
	rs := t.editRanges()
	rs.cuts = append(rs.cuts, c) // ascending by move: a later move's command applies later
	t.s.cutovers.Store(true)
	t.routed = true
	return info.Head, t.set(t.s.k.rangeCutover(move), c.encode())
}

// routeSlot returns the shard the range cutovers send a record at pos of a user of slot to, if
// any covers the slot: the source of the first whose position is at or past pos, else the
// destination of the last.
func (rs *shardRanges) routeSlot(slot int, pos uint64) (ShardID, bool) {
	var last *rangeCutover
	for i := range rs.cuts {
		c := &rs.cuts[i]
		if !c.span.Contains(slot) {
			continue
		}
		if pos <= c.at {
			return c.from, true
		}
		last = c
	}
	if last == nil {
		return 0, false
	}
	return last.to, true
}

// seedCutover returns the cutover a user of slot starts from when it gets one of its own: the
// range cutovers covering its slot, as steps.
func (rs *shardRanges) seedCutover(slot int) (cutover, bool) {
	var c cutover
	if rs != nil {
		for _, rc := range rs.cuts {
			if rc.span.Contains(slot) {
				c.steps = append(c.steps, cutoverStep{upTo: rc.at, shard: rc.from})
				c.after = rc.to
			}
		}
	}
	return c, len(c.steps) > 0
}

// FenceRange makes this shard the source of move for the slots of span: from now on every key
// of the range is fenced (writes refused with ErrMoving, deliveries to its users too), and its
// state here is final. It returns the outbox position every record of the range's conversations
// is at or before. Repeating it returns the same.
func (t *Tx) FenceRange(move MoveID, span SlotSpan) (uint64, error) {
	if m, ok := t.rangeMarkerOf(move); ok {
		if m.role == rangeOut || m.role == rangeDropping || m.role == rangeGone {
			return m.fence, nil
		}
		return 0, invalidf("fence: move %d of slots %d-%d is moving in here, not out", move, span.First, span.Last)
	}
	if err := t.activeRange(move, span); err != nil {
		return 0, err
	}
	info, err := t.outboxInfo()
	if err != nil {
		return 0, err
	}
	return info.Head, t.putRangeMarker(rangeMarker{move: move, span: span, role: rangeOut, fence: info.Head})
}

// ActivateRange completes move on the destination: every staged key becomes this shard's (its
// entries below its first position, trimmed on the source meanwhile, left out), the held entries
// are appended after each user's head in the order they arrived, and the conversations'
// records in this shard's outbox are held back at every destination behind after, the source's
// fence (SettleRange lifts it; a fence at 0, an outbox that never held a record, holds nothing).
// It returns how many held entries were appended. Repeating it changes nothing.
func (t *Tx) ActivateRange(st Stamp, move MoveID, after Barrier) (int, error) {
	m, ok := t.rangeMarkerOf(move)
	switch {
	case ok && m.role == rangeServed:
		return 0, nil
	case !ok || m.role != rangeIn:
		return 0, invalidf("activate: no slots moving in here under move %d", move)
	case after.Source != m.from:
		return 0, invalidf("activate: slots of move %d need their source's (%d) fence position, not %+v", move, m.from, after)
	}
	k := t.s.k
	staged := k.stagedPrefix(move)
	type stagedMeta struct {
		key  []byte // without the shard prefix
		meta logMeta
	}
	var metas []stagedMeta
	it, err := t.b.NewIter(&pebble.IterOptions{LowerBound: staged, UpperBound: prefixEnd(staged)})
	if err != nil {
		return 0, fmt.Errorf("log: read: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		lm, err := decodeLogMeta(it.Value())
		if err != nil {
			it.Close()
			return 0, err
		}
		metas = append(metas, stagedMeta{slices.Clone(it.Key()[len(staged):]), lm})
	}
	if err := it.Close(); err != nil {
		return 0, fmt.Errorf("log: read: %w", err)
	}
	users := map[string]*logMeta{}
	for i := range metas {
		sm := &metas[i]
		id := string(sm.key[1 : len(sm.key)-1])
		entries := k.userEntryPrefix(id)
		if sm.key[0] == tagConv {
			entries = k.convEntryPrefix(id)
		}
		if sm.meta.First > 1 {
			if err := t.b.DeleteRange(entries, entryKey(entries, sm.meta.First), nil); err != nil {
				return 0, fmt.Errorf("log: write: %w", err)
			}
		}
		if sm.key[0] == tagConv {
			if err := t.putLogMeta(k.conv(id), sm.meta); err != nil {
				return 0, err
			}
			if after.Pos > 0 { // 0: the source's outbox never held a record, so nothing comes first
				if err := t.set(k.barrier(id), encodeBarrier(after)); err != nil {
					return 0, err
				}
			}
			continue
		}
		users[id] = &sm.meta
	}
	err = t.appendHeld(move, m.pending, func(uid string) (string, *logMeta) {
		if users[uid] == nil { // no log of uid on the source: it starts here with what was held
			users[uid] = &logMeta{Epoch: newEpoch(st), First: 1}
		}
		return uid, users[uid]
	})
	if err != nil {
		return 0, err
	}
	if t.touched == nil {
		t.touched = map[string]struct{}{}
	}
	for _, uid := range slices.Sorted(maps.Keys(users)) {
		if err := t.putLogMeta(k.user(uid), *users[uid]); err != nil {
			return 0, err
		}
		t.touched[uid] = struct{}{}
	}
	if err := t.deletePrefixes(staged, k.pendingPrefix(move)); err != nil {
		return 0, err
	}
	t.s.barriers.Store(true) // before a barrier is visible to a read of the outbox
	t.routed = true
	held := int(m.pending)
	m.role, m.fence, m.pending = rangeServed, after.Pos, 0
	return held, t.putRangeMarker(m)
}

// SettleRange lifts the barriers of the conversations move activated here, once the source's
// fan-out has delivered up to its fence everywhere. Repeating it changes nothing.
func (t *Tx) SettleRange(move MoveID) error {
	m, ok := t.rangeMarkerOf(move)
	if !ok || m.role != rangeServed {
		return invalidf("settle: no slots activated here under move %d", move)
	}
	barriers, err := t.s.readBarriers(t.b)
	if err != nil {
		return err
	}
	for conv, b := range barriers {
		if b == (Barrier{Source: m.from, Pos: m.fence}) && m.span.Contains(ConvSlot(conv)) {
			if err := t.del(t.s.k.barrier(conv)); err != nil {
				return err
			}
		}
	}
	return nil
}

// DropRange deletes, on the source of move once the map has switched, the keys of batch (each
// of the range, named by User or Conv), the first call making every key of the range answer
// ErrMoved from then on. It is refused unless the range is fenced or being dropped here.
func (t *Tx) DropRange(move MoveID, batch []MoveKey) error {
	m, ok := t.rangeMarkerOf(move)
	switch {
	case ok && m.role == rangeGone && len(batch) == 0:
		return nil
	case !ok || (m.role != rangeOut && m.role != rangeDropping):
		return invalidf("drop: no slots fenced here under move %d", move)
	}
	for _, mk := range batch { // every key checked before the first is deleted
		if !mk.valid() || !m.span.Contains(mk.slot()) {
			return invalidf("drop: %s is not in slots %d-%d", mk.what(), m.span.First, m.span.Last)
		}
	}
	for _, mk := range batch {
		var err error
		if mk.Conv != "" {
			err = t.dropConvState(mk.Conv)
		} else {
			err = t.dropUserState(mk.User)
		}
		if err != nil {
			return err
		}
	}
	if m.role == rangeOut {
		m.role = rangeDropping
		return t.putRangeMarker(m)
	}
	return nil
}

// DroppedRange ends the drop of move on the source: every key of the range has been deleted
// (DropRange), and the marker stays as a tombstone, covering only keys not held here, so that a
// key of the range moved back here on its own later is served. Repeating it changes nothing.
func (t *Tx) DroppedRange(move MoveID) error {
	m, ok := t.rangeMarkerOf(move)
	switch {
	case ok && m.role == rangeGone:
		return nil
	case !ok || m.role != rangeDropping:
		return invalidf("drop: the slots of move %d are not being dropped here", move)
	}
	m.role = rangeGone
	return t.putRangeMarker(m)
}

// CancelRangeIn undoes move on the destination before any source has cut over: the keys of
// batch lose what was copied of them (a key not moving in here is passed over), and a call
// without a batch, the last, drops the rest of the staging and marks the move canceled, so that
// a copy step of it still in flight changes nothing. It is refused once the range is activated
// here; repeating it changes nothing.
func (t *Tx) CancelRangeIn(move MoveID, batch []MoveKey) error {
	m, ok := t.rangeMarkerOf(move)
	switch {
	case ok && m.role == rangeCanceled:
		return nil
	case !ok || m.role != rangeIn:
		return invalidf("cancel: no slots moving in here under move %d", move)
	case m.pending > 0:
		return invalidf("cancel: move %d holds entries cut over to it already", move)
	}
	for _, mk := range batch {
		var err error
		if mk.Conv != "" {
			_, err = t.RestartConvCopy(move, mk.Conv)
		} else {
			_, err = t.RestartCopy(move, mk.User)
		}
		if err != nil && !Rejected(err) { // a refusal writes nothing: the key is not moving in here
			return err
		}
	}
	if len(batch) > 0 {
		return nil
	}
	if err := t.deletePrefixes(t.s.k.stagedPrefix(move)); err != nil {
		return err
	}
	m.role = rangeCanceled
	return t.putRangeMarker(m)
}

// KeysInSlots returns, from one view of this shard, the users with a log here and the
// conversations here whose slots are in span, each sorted: what a slot move copies and drops.
func (s *Shard) KeysInSlots(span SlotSpan) (users, convs []string, err error) {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	for _, f := range []struct {
		tag  byte
		slot func(string) int
		out  *[]string
	}{{tagUser, UserSlot, &users}, {tagConv, ConvSlot, &convs}} {
		lo, hi := s.k.tableBounds(f.tag)
		it, err := snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return nil, nil, fmt.Errorf("log: read: %w", err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			id, err := keyID(it.Key(), len(lo))
			if err != nil {
				it.Close()
				return nil, nil, err
			}
			if span.Contains(f.slot(id)) {
				*f.out = append(*f.out, id)
			}
		}
		if err := it.Close(); err != nil {
			return nil, nil, fmt.Errorf("log: read: %w", err)
		}
	}
	return users, convs, nil
}

// moveRange makes the slot-range step r names (Tx.Move).
func (t *Tx) moveRange(st Stamp, r *MoveStep) (uint64, error) {
	if err := t.rangesView().check(); err != nil {
		return 0, err
	}
	span := *r.Slots
	if !span.Valid() || r.Move == 0 || r.User != "" || r.Conv != "" {
		return 0, invalidf("move of slots %d-%d: bad slots, move 0, or a key named too", span.First, span.Last)
	}
	m, ok := t.rangeMarkerOf(r.Move) // the zero marker, of no role, if none
	if ok && m.span != span {
		return 0, invalidf("move %d moves slots %d-%d here, not %d-%d", r.Move, m.span.First, m.span.Last, span.First, span.Last)
	}
	switch r.Op {
	case MoveBegin:
		return 0, t.BeginRangeIn(r.Move, span, r.From)
	case MoveStage:
		if m.role == rangeServed {
			return 0, nil // a driver resumed after the activation: the copy is over
		}
		return 0, t.stageBatch(st, r.Move, r.Batch)
	case MoveCutover:
		return t.RangeCutover(r.Move, span, r.From, r.To, r.Pinned)
	case MoveFence:
		return t.FenceRange(r.Move, span)
	case MoveActivate:
		if m.role == rangeServed {
			return 0, nil
		}
		if m.role != rangeIn || r.From != m.from { // before the batch is staged: a refusal writes nothing
			return 0, invalidf("activate: no slots moving in here under move %d from shard %d", r.Move, r.From)
		}
		if err := t.stageBatch(st, r.Move, r.Batch); err != nil {
			return 0, err
		}
		n, err := t.ActivateRange(st, r.Move, Barrier{Source: r.From, Pos: r.Fence})
		return uint64(n), err
	case MoveSettle:
		return 0, t.SettleRange(r.Move)
	case MoveDrop:
		return 0, t.DropRange(r.Move, r.Batch)
	case MoveDropped:
		return 0, t.DroppedRange(r.Move)
	case MoveCancel:
		return 0, t.CancelRangeIn(r.Move, r.Batch)
	}
	return 0, invalidf("move step %d does not apply to slots", r.Op)
}
