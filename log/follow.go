package log

import (
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

// maxPeriods is how many membership periods a follow record keeps, the latest. A device whose
// cursor is older than the first kept is answered too old for that source.
const maxPeriods = 8

func (k keys) followPrefix(uid string) []byte {
	return appendID(k.table(tagFollow, len(uid)+1+MaxIDLen), uid)
}

func (k keys) follow(uid, conv string) []byte { return appendID(k.followPrefix(uid), conv) }

// Follow is a user log's following of one large group: the user's membership periods there,
// oldest first, the last maxPeriods of them.
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
		if len(periods) > maxPeriods {
			periods = slices.Delete(periods, 0, len(periods)-maxPeriods)
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
	if n > maxPeriods && d.err == nil {
		d.err = corruptf("follow record: %d periods, at most %d", n, maxPeriods)
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
