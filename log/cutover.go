package log

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Cutovers: where a source shard's outbox sends a moved user's entries (docs/MOVES.md).
//
// A user U moving from shard S to shard D receives entries from every shard's outbox. Each
// source X switches U's destination at a position of its own outbox, p: records up to p go to S,
// later ones to D. The position is X's outbox head when X applies the cutover, so a record's
// destination is a function of its position and X's replicated state, the same on every replica
// and for every resend of a batch, whatever cluster map the node building the batch has seen.
//
// X keeps, per moved user, the list of its cutovers — (p, the shard records up to p go to) in
// ascending p — and the shard records past the last p go to. ReadOutbox resolves every recipient
// with a cutover from the same snapshot as the records (OutboxItem.Pinned); the fan-out routes
// the others by the cluster map. A cutover whose p the outbox has been trimmed past routes
// nothing any more and is pruned by the trim; the shard after the last one stays, since a node
// whose map is older than the move would route U to S.
//
//	0x63 | uid 0x00    version u8 | last move u64 | its p u64 | after shard u32 | count uvarint | (p u64 | shard u32)…

const tagCutover byte = 0x63

func (k keys) cutover(uid string) []byte { return appendID(k.table(tagCutover, len(uid)+1), uid) }

// cutover is one user's routing on a source shard.
type cutover struct {
	move  MoveID  // the last move applied, for idempotence
	at    uint64  // that move's position: kept apart, since a trim may prune its step
	after ShardID // where records past every step's upTo go
	steps []cutoverStep
}

// cutoverStep routes the records up to upTo that no earlier step routes.
type cutoverStep struct {
	upTo  uint64
	shard ShardID
}

// route returns the shard the record at pos goes to.
func (c *cutover) route(pos uint64) ShardID {
	for _, s := range c.steps {
		if pos <= s.upTo {
			return s.shard
		}
	}
	return c.after
}

const cutoverV1 = 1

func (c *cutover) encode() []byte {
	b := []byte{cutoverV1}
	b = binary.BigEndian.AppendUint64(b, uint64(c.move))
	b = binary.BigEndian.AppendUint64(b, c.at)
	b = binary.BigEndian.AppendUint32(b, uint32(c.after))
	b = binary.AppendUvarint(b, uint64(len(c.steps)))
	for _, s := range c.steps {
		b = binary.BigEndian.AppendUint64(b, s.upTo)
		b = binary.BigEndian.AppendUint32(b, uint32(s.shard))
	}
	return b
}

func decodeCutover(b []byte) (cutover, error) {
	if len(b) < 22 || b[0] != cutoverV1 {
		return cutover{}, corruptf("cutover of %d bytes", len(b))
	}
	c := cutover{move: MoveID(binary.BigEndian.Uint64(b[1:])), at: binary.BigEndian.Uint64(b[9:]),
		after: ShardID(binary.BigEndian.Uint32(b[17:]))}
	n, w := binary.Uvarint(b[21:])
	rest := b[21+max(w, 0):]
	if w <= 0 || uint64(len(rest)) != n*12 {
		return cutover{}, corruptf("cutover: %d steps in %d bytes", n, len(rest))
	}
	for i := range int(n) {
		c.steps = append(c.steps, cutoverStep{upTo: binary.BigEndian.Uint64(rest[i*12:]), shard: ShardID(binary.BigEndian.Uint32(rest[i*12+8:]))})
	}
	return c, nil
}

// Cutover switches the destination of uid's entries in this shard's outbox, for move, from shard
// from to shard to: records up to the outbox head now (this Tx's earlier appends included) go to
// from, later ones to to. It returns that position. Repeating it for the same move returns the
// same position and changes nothing. A cutover from a shard other than where the user's
// records go now is refused.
func (t *Tx) Cutover(move MoveID, uid string, from, to ShardID) (uint64, error) {
	if !ValidLog(uid) || move == 0 || from == to {
		return 0, invalidf("cutover: bad user id %q, move 0 or no change of shard (%d)", uid, from)
	}
	k := t.s.k
	if err := t.rangesView().check(); err != nil {
		return 0, err
	}
	var c cutover
	v, ok, err := getValue(t.b, k.cutover(uid))
	if err != nil {
		return 0, err
	}
	if !ok { // its first of its own: it starts from the slot moves' cutovers of its slot
		c, ok = t.rangesView().seedCutover(UserSlot(uid))
	} else if c, err = decodeCutover(v); err != nil {
		return 0, err
	}
	if ok {
		if c.move == move {
			return c.at, nil
		}
		if c.after != from {
			return 0, invalidf("cutover of %q from shard %d: its entries go to shard %d", uid, from, c.after)
		}
	}
	info, err := t.outboxInfo()
	if err != nil {
		return 0, err
	}
	c.move, c.at, c.after = move, info.Head, to
	c.steps = append(c.steps, cutoverStep{upTo: info.Head, shard: from})
	t.s.cutovers.Store(true)
	t.routed = true
	return info.Head, t.set(k.cutover(uid), c.encode())
}

// pruneCutovers drops the steps no retained record can fall under any more: those up to a
// position below first, the outbox's first retained position.
func (t *Tx) pruneCutovers(first uint64) error {
	if !t.s.cutovers.Load() {
		return nil
	}
	lo, hi := t.s.k.tableBounds(tagCutover)
	it, err := t.b.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("log: read: %w", err)
	}
	type update struct{ key, val []byte }
	var ups []update
	for ok := it.First(); ok; ok = it.Next() {
		c, err := decodeCutover(it.Value())
		if err != nil {
			it.Close()
			return err
		}
		n := 0
		for n < len(c.steps) && c.steps[n].upTo < first {
			n++
		}
		if n > 0 {
			c.steps = c.steps[n:]
			ups = append(ups, update{append([]byte(nil), it.Key()...), c.encode()})
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("log: read: %w", err)
	}
	for _, u := range ups {
		if err := t.set(u.key, u.val); err != nil {
			return err
		}
	}
	return nil
}

// readCutovers returns every user's cutovers from r, or nil if the shard has none.
func (s *Shard) readCutovers(r pebble.Reader) (map[string]*cutover, error) {
	if !s.cutovers.Load() {
		return nil, nil
	}
	return readIDTable(r, s.k, tagCutover, func(v []byte) (*cutover, error) { c, err := decodeCutover(v); return &c, err })
}
