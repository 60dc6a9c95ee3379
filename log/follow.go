package log

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Follow records: which large groups a user's devices read from the conversation log itself
// (read diffusion, Append.LargeGroupThreshold), and from where. The delivery of an entry with
// Entry.Source to a user's log writes them, in the same batch as the entry, so a sync stream
// finds every source of a user, and each source's periods, in the user's own shard without
// reading any conversation's member list (docs/ARCHITECTURE.md, "Large groups").

// tagFollow is the table of follow records: uid 0x00 conv 0x00 → followValue.
const tagFollow byte = 0x26

// MaxPeriods is how many membership periods a follow record keeps, the latest. A device whose
// cursor is older than the first kept is answered too old for that source.
const MaxPeriods = 8

func (k keys) followPrefix(uid string) []byte {
	return appendID(k.table(tagFollow, len(uid)+1+MaxIDLen), uid)
}

func (k keys) follow(uid, conv string) []byte { return appendID(k.followPrefix(uid), conv) }

// Follow is a user log's following of one large group: the user's membership periods there,
// oldest first, the last MaxPeriods of them.
type Follow struct {
	Conv    string
	Periods []Period
}

// Period is one membership of a user in a large group. The user's entries of the conversation in
// it are the conversation log's (From, To) — From and To themselves are in the user's log — or
// everything after From while To is 0 (a member still).
type Period struct {
	From Position // conv_seq of the entry that started the following (Entry.Source)
	To   Position // conv_seq of the removal that ended it; 0 while the user is a member
	Gate Position // position in the user's log of the entry that started it
}

// Open reports whether the user is still a member in this period.
func (p Period) Open() bool { return p.To == 0 }

// Last is the last conv_seq of the period that is the user's through the conversation log
// (0 when the period is open: there is no last yet).
func (p Period) Last() Position {
	if p.Open() {
		return 0
	}
	return p.To - 1
}

// noteFollow updates uid's follow record for e, an entry with Source just appended to uid's log
// at e.Seq: a group creation or an addition starts a period, a removal ends the open one.
func (t *Tx) noteFollow(uid string, e *Entry) error {
	k := t.s.k.follow(uid, e.Conv)
	v, ok, err := getValue(t.b, k)
	if err != nil {
		return err
	}
	var periods []Period
	if ok {
		if periods, err = decodePeriods(v); err != nil {
			return err
		}
	}
	open := len(periods) > 0 && periods[len(periods)-1].Open()
	switch e.Kind {
	case KindGroupCreate, KindMemberAdd:
		if open {
			// The switch to read diffusion reached a member whose following had started
			// already: impossible by construction (an addition names only non-members), kept
			// as it is rather than overlapping two periods.
			return nil
		}
		periods = append(periods, Period{From: e.ConvSeq, Gate: e.Seq})
		if len(periods) > MaxPeriods {
			periods = slices.Delete(periods, 0, len(periods)-MaxPeriods)
		}
	case KindMemberRemove:
		if !open {
			return nil
		}
		periods[len(periods)-1].To = e.ConvSeq
	default:
		return corruptf("entry %s of kind %v marks a source, which only membership entries do", e.MsgID, e.Kind)
	}
	return t.set(k, encodePeriods(periods))
}

// ungateFollows clears the gates of uid's follow records, for a reset of its log (ResetUser): a
// gate is a position of the old epoch, which the new log, restarting at 1 without the entries
// that started the following, might never reach. The user is still a member of those groups,
// and its devices, resyncing the new epoch, follow them at once.
func (t *Tx) ungateFollows(uid string) error {
	prefix := t.s.k.followPrefix(uid)
	it, err := t.b.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("log: read: %w", err)
	}
	type record struct {
		key     []byte
		periods []Period
	}
	var recs []record
	for ok := it.First(); ok; ok = it.Next() {
		periods, err := decodePeriods(it.Value())
		if err != nil {
			it.Close()
			return err
		}
		recs = append(recs, record{slices.Clone(it.Key()), periods})
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("log: read: %w", err)
	}
	for _, r := range recs {
		for i := range r.periods {
			r.periods[i].Gate = 0
		}
		if err := t.set(r.key, encodePeriods(r.periods)); err != nil {
			return err
		}
	}
	return nil
}

// Follows returns uid's follow records, in conversation id order: the large groups its log's
// devices read from the conversation logs, and from where.
func (s *Shard) Follows(uid string) ([]Follow, error) {
	if !ValidLog(uid) {
		return nil, invalidf("bad user id %q", uid)
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	if err := s.servesUser(snap, uid); err != nil {
		return nil, err
	}
	prefix := s.k.followPrefix(uid)
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("log: read: %w", err)
	}
	var out []Follow
	for ok := it.First(); ok; ok = it.Next() {
		conv, err := keyID(it.Key(), len(prefix))
		if err != nil {
			it.Close()
			return nil, err
		}
		periods, err := decodePeriods(it.Value())
		if err != nil {
			it.Close()
			return nil, err
		}
		out = append(out, Follow{Conv: conv, Periods: periods})
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("log: read: %w", err)
	}
	return out, nil
}

func encodePeriods(ps []Period) []byte {
	e := encoder{b: make([]byte, 0, 2+len(ps)*3*4)}
	e.u8(valueV1)
	e.uvarint(uint64(len(ps)))
	for _, p := range ps {
		e.uvarint(uint64(p.From))
		e.uvarint(uint64(p.To))
		e.uvarint(uint64(p.Gate))
	}
	return e.b
}

func decodePeriods(b []byte) ([]Period, error) {
	d := decoder{b: b}
	d.version("follow record", valueV1)
	n := d.uvarint()
	if n > MaxPeriods && d.err == nil {
		d.err = corruptf("follow record: %d periods, at most %d", n, MaxPeriods)
	}
	var ps []Period
	for range n {
		if d.err != nil {
			break
		}
		ps = append(ps, Period{From: Position(d.uvarint()), To: Position(d.uvarint()), Gate: Position(d.uvarint())})
	}
	return ps, d.done("follow record")
}

// MarkDelivered is a request to raise the delivered marks of members of a large group to where
// their devices acked the group's log, which they follow as a source ([Tx.MarkDelivered]); it
// travels in a Raft command. A node coalesces the acks its sync streams take and proposes one
// per group per report round: the marks and counts move, and no entry is written (the senders of
// a large group learn delivered from the counts).
type MarkDelivered struct {
	Conv  string
	Marks []MemberMark
}

// MemberMark is how far one member's devices acked a conversation.
type MemberMark struct {
	User string
	UpTo Position
}

// MaxDeliveredMarks bounds the marks one MarkDelivered carries.
const MaxDeliveredMarks = 4096

// MarshalBinary encodes the request.
func (r *MarkDelivered) MarshalBinary() ([]byte, error) {
	e := encoder{b: make([]byte, 0, 8+len(r.Conv)+len(r.Marks)*24)}
	e.u8(requestV1)
	e.str(r.Conv)
	e.uvarint(uint64(len(r.Marks)))
	for _, m := range r.Marks {
		e.str(m.User)
		e.uvarint(uint64(m.UpTo))
	}
	return e.b, nil
}

// UnmarshalBinary decodes a request encoded by MarshalBinary. Errors wrap ErrCorrupt.
func (r *MarkDelivered) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	d.version("mark delivered", requestV1)
	*r = MarkDelivered{Conv: d.str()}
	n := d.uvarint()
	if n > MaxDeliveredMarks && d.err == nil {
		d.err = corruptf("mark delivered: %d marks, at most %d", n, MaxDeliveredMarks)
	}
	for range n {
		if d.err != nil {
			break
		}
		r.Marks = append(r.Marks, MemberMark{User: d.str(), UpTo: Position(d.uvarint())})
	}
	return d.done("mark delivered")
}

// MarkDelivered raises the delivered mark of each member req names, in req's conversation, to
// its position (clamped to the head), as a KindDelivered append would, and returns how many
// moved. A mark at or below the member's changes nothing, so a request repeated changes nothing;
// a user who is no longer a member is skipped. In a large group no entry is written.
func (t *Tx) MarkDelivered(st Stamp, req *MarkDelivered) (moved int, err error) {
	if !ValidID(req.Conv) || len(req.Marks) > MaxDeliveredMarks {
		return 0, invalidf("mark delivered: bad conversation id %q or %d marks", req.Conv, len(req.Marks))
	}
	// Every refusal before the first write: a command is applied whole or not at all.
	reqs := make([]Append, len(req.Marks))
	for i, m := range req.Marks {
		reqs[i] = Append{Conv: req.Conv, Sender: m.User, Kind: KindDelivered, ReadUpTo: m.UpTo}
		if err := reqs[i].validate(); err != nil {
			return 0, err
		}
	}
	if err := t.checkConvNotMoving(req.Conv); err != nil {
		return 0, err
	}
	if meta, exists, err := t.logMeta(t.s.k.conv(req.Conv)); err != nil {
		return 0, err
	} else if !exists {
		return 0, ErrNoConversation
	} else if !meta.Large {
		return 0, invalidf("mark delivered: %s is not a large group", req.Conv)
	}
	for i := range reqs {
		a := &reqs[i]
		plan, err := t.plan(st, a)
		if errors.Is(err, ErrNotMember) {
			continue // left the group since its device acked
		}
		if err != nil {
			return moved, err // of the store: the whole batch fails
		}
		if _, err := t.writeAppend(st, a, &plan, nil); err != nil {
			return moved, err
		}
		if plan.delivered {
			moved++
		}
	}
	return moved, nil
}
