package log

import (
	"fmt"
	"slices"
)

// Delivery is one conversation entry to append to the logs of some users of this shard.
type Delivery struct {
	Pos   uint64   // the entry's outbox position in the source shard
	Users []string // recipients whose logs live in this shard
	Entry Entry    // the conversation entry; Seq is ignored
	// After, when set, holds the entry back until this shard has applied the deliveries of
	// another source up to a position: the entry's conversation moved here from that source,
	// whose last records of it must come first (convmove.go).
	After Barrier
}

// Barrier names a position of a source shard's outbox: a delivery carrying it is applied only
// once the destination's mark for Source has reached Pos. The zero Barrier holds nothing back.
type Barrier struct {
	Source ShardID
	Pos    uint64
}

// DeliveryBatch carries the entries of one source shard's outbox destined to this shard, for the
// source positions (Prev, Last]. Items lists every entry in that range that has recipients here,
// in ascending Pos; positions in the range without an item had no recipient here.
//
// The (Prev, Last] framing is what makes the per-(source, destination) stream ordered and
// idempotent: the destination remembers the highest Last applied per source (its high-water
// mark), ignores what it has seen and refuses a batch that starts past the mark.
type DeliveryBatch struct {
	Source ShardID
	Prev   uint64
	Last   uint64
	Items  []Delivery
}

// DeliverResult is the outcome of [Tx.Deliver].
type DeliverResult struct {
	Mark     uint64 // the high-water mark for the source after the batch
	Appended int    // user-log entries written (0 for a redelivered batch)
}

// Deliver appends the batch's entries to the users' logs. A batch at or below the source's mark
// changes nothing; a batch overlapping the mark applies only the new part; a batch whose Prev is
// past the mark returns an [*OutOfOrderError] carrying the mark to resume from.
func (t *Tx) Deliver(st Stamp, b *DeliveryBatch) (DeliverResult, error) {
	if err := b.validate(); err != nil {
		return DeliverResult{}, err
	}
	k := t.s.k
	mark, _, err := getUint(t.b, k.sourceMark(b.Source))
	if err != nil {
		return DeliverResult{}, err
	}
	if b.Last <= mark {
		return DeliverResult{Mark: mark}, nil
	}
	if b.Prev > mark {
		return DeliverResult{}, &OutOfOrderError{Source: b.Source, Mark: mark, Prev: b.Prev}
	}

	for i := range b.Items {
		if it := &b.Items[i]; it.Pos > mark {
			if err := t.refuseFenced(it.Users); err != nil {
				return DeliverResult{}, err
			}
			if err := t.checkBarrier(it); err != nil {
				return DeliverResult{}, err
			}
		}
	}
	app := t.userAppender(st)
	for i := range b.Items {
		it := &b.Items[i]
		if it.Pos <= mark {
			continue
		}
		for _, uid := range it.Users {
			if err := app.add(uid, it.Entry); err != nil {
				return DeliverResult{}, err
			}
		}
	}
	if err := app.finish(); err != nil {
		return DeliverResult{}, err
	}
	if err := t.set(k.sourceMark(b.Source), encodeUint(b.Last)); err != nil {
		return DeliverResult{}, err
	}
	return DeliverResult{Mark: b.Last, Appended: app.appended}, nil
}

// checkBarrier refuses, with ErrNotYet and before anything is written, an item held back by its
// barrier: this shard has not applied its barrier source's deliveries up to the barrier yet.
func (t *Tx) checkBarrier(it *Delivery) error {
	if it.After.Source == 0 {
		return nil
	}
	mark, _, err := getUint(t.b, t.s.k.sourceMark(it.After.Source))
	if err != nil {
		return err
	}
	if mark < it.After.Pos {
		return fmt.Errorf("%w: %s's entry at %d waits for shard %d's deliveries up to %d (applied up to %d)",
			ErrNotYet, it.Entry.Conv, it.Pos, it.After.Source, it.After.Pos, mark)
	}
	return nil
}

// userAppender appends entries to user logs inside one Tx. It loads each user's log meta once and
// writes each once, in finish, however many entries the user gets.
type userAppender struct {
	t        *Tx
	st       Stamp
	metas    map[string]*logMeta
	users    []string
	appended int
}

func (t *Tx) userAppender(st Stamp) *userAppender {
	return &userAppender{t: t, st: st, metas: map[string]*logMeta{}}
}

// add appends e (its Seq is ignored) to uid's log, creating the log if it has none.
func (a *userAppender) add(uid string, e Entry) error {
	t, k := a.t, a.t.s.k
	if t.s.anyMoves() { // refuseFenced has run: a marker here is a move in, or a canceled one
		mv, moving, err := t.userMove(uid)
		if err != nil {
			return err
		}
		if moving && mv.role == movingIn {
			return t.holdPending(uid, mv, &e)
		}
	}
	m := a.metas[uid]
	if m == nil {
		meta, ok, err := t.logMeta(k.user(uid))
		if err != nil {
			return err
		}
		if !ok {
			meta = logMeta{Epoch: newEpoch(a.st), First: 1}
		}
		m = &meta
		a.metas[uid] = m
		a.users = append(a.users, uid)
	}
	m.Head++
	m.addGroups(uid, e.groupsDelta(uid))
	e = e.userCopy()
	e.Seq = m.Head
	if err := t.set(k.userEntry(uid, m.Head), encodeEntry(&e)); err != nil {
		return err
	}
	if err := t.indexUserEntry(uid, &e); err != nil {
		return err
	}
	a.appended++
	if t.touched == nil {
		t.touched = map[string]struct{}{}
	}
	t.touched[uid] = struct{}{}
	return nil
}

// indexUserEntry keeps the indexes of uid's log for e, just appended to it at e.Seq: the
// conversation under the user, for listing a user's conversations, the follow record of a
// large group's membership entry (follow.go), and the fold index (fold.go).
func (t *Tx) indexUserEntry(uid string, e *Entry) error {
	if e.ConvSeq != 0 { // a large group's receipt has no position; its membership entries do
		if err := t.set(t.s.k.userConv(uid, e.Conv), encodeUint(uint64(e.ConvSeq))); err != nil {
			return err
		}
	}
	if e.Source {
		if err := t.noteFollow(uid, e); err != nil {
			return err
		}
	}
	return t.foldSuperseded(uid, e)
}

// finish writes the metas of every log appended to, in a deterministic order.
func (a *userAppender) finish() error {
	slices.Sort(a.users)
	for _, uid := range a.users {
		if err := a.t.putLogMeta(a.t.s.k.user(uid), *a.metas[uid]); err != nil {
			return err
		}
	}
	return nil
}

// SourceMark returns the highest outbox position of source applied to this shard.
func (s *Shard) SourceMark(source ShardID) (uint64, error) {
	v, _, err := getUint(s.db, s.k.sourceMark(source))
	return v, err
}

func (b *DeliveryBatch) validate() error {
	if b.Prev >= b.Last {
		return invalidf("delivery batch range (%d, %d] is empty", b.Prev, b.Last)
	}
	prev := b.Prev
	for i := range b.Items {
		it := &b.Items[i]
		if it.Pos <= prev || it.Pos > b.Last {
			return invalidf("delivery item at %d is out of order or outside the batch range (%d, %d]", it.Pos, b.Prev, b.Last)
		}
		prev = it.Pos
		if len(it.Users) == 0 {
			return invalidf("delivery item at %d has no users", it.Pos)
		}
		for j, uid := range it.Users {
			if !ValidLog(uid) || (j > 0 && it.Users[j-1] >= uid) {
				return invalidf("delivery item at %d: users must be valid, sorted and unique", it.Pos)
			}
		}
		// Only a large group's receipt has no conv_seq: it goes to the reader's log alone.
		if !it.Entry.Kind.Valid() || it.Entry.MsgID.IsZero() || it.Entry.ConvSeq == 0 && it.Entry.Kind != KindReceipt {
			return invalidf("delivery item at %d: incomplete entry", it.Pos)
		}
		if !slices.IsSorted(it.Entry.Members) { // groupsDelta searches them
			return invalidf("delivery item at %d: entry members must be sorted", it.Pos)
		}
		if (it.After.Source == 0) != (it.After.Pos == 0) || it.After.Source == b.Source && it.After.Source != 0 {
			return invalidf("delivery item at %d: bad barrier %+v", it.Pos, it.After)
		}
	}
	return nil
}
