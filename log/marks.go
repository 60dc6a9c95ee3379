package log

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Delivered and read counts of a group's messages, without a scan of its members.
//
// "How many members had message n delivered, and read?" is asked of every message a sender
// looks at, and a group may have tens of thousands of members: counting member records per
// question would read the whole group each time. So each group keeps three histograms of its
// members' positions, one per kind of mark (which):
//
//	1 delivered   max(DeliveredMark, Joined)
//	2 read        max(ReadMark, Joined)
//	3 joined      Joined
//
// A mark below the member's join position counts as the join position: a member saw nothing of
// the conversation from before it joined, so its marks start there. Each histogram is kept at
// four levels: at level L a member with position v counts in bucket v>>(8L), under
//
//	0x14 | conv 0x00 | which u8 | level u8 | bucket u64   → count (counter value; deleted at 0)
//
// and count(which, ≥ n) sums the level-0 buckets n..n|0xff, then at each level above the
// buckets after n's own up to the end of its parent bucket (at most 255 keys a level), and at
// the top level every bucket above n's: a few hundred keys at most, whatever the group's size
// (countAtLeast). A position of 0 (a member stored before join positions were kept, and never
// reported) is not stored: questions are about positions of 1 or more.
//
// For message n: Members(n) = MemberCount − joined(≥ n) (the members who were in the group
// before n), Delivered(n) = delivered(≥ n) − joined(≥ n), Read(n) = read(≥ n) − joined(≥ n)
// (a member who joined at or after n has marks ≥ n without having seen n). The sender of n is
// not excluded: its own marks count like anyone's, so a client shows "delivered to k of m"
// knowing the sender is among both.
//
// Histograms are kept on every change of a member's record (create, add, remove, a mark that
// moves: Tx.writeMembers) and travel with the member records (conversation and slot moves). A
// group created before they were kept has none (logMeta.Counted unset): its first mark update
// or membership change builds them from its member records, and until then the queries count
// from the member records, bounded by the group size limit.

// countKinds is the number of histograms a group keeps: delivered, read, joined.
const countKinds = 3

// Which histogram (the key's which byte, minus one as an index of member.effective).
const (
	countDelivered uint8 = 1
	countRead      uint8 = 2
	countJoined    uint8 = 3
)

// countLevels is the number of levels of a histogram; level L buckets positions by v>>(8L).
const countLevels = 4

// MaxReceiptSeqs is the most positions one [Shard.Receipts] call answers.
const MaxReceiptSeqs = 100

// MaxReadersScan is the most member records one [Shard.Readers] call reads.
const MaxReadersScan = 10_000

// histBucket names one bucket of one of a group's histograms.
type histBucket struct {
	which, level uint8
	bucket       uint64
}

// histDelta collects changes to a group's histograms, applied once per bucket (flushCounts):
// adding a thousand members touches a few buckets, not twelve thousand.
type histDelta map[histBucket]int64

// member adds sign times m's positions to d.
func (d *histDelta) member(m member, sign int64) {
	for i, v := range m.effective() {
		d.add(uint8(i)+1, v, sign)
	}
}

// add adds sign times position v to histogram which.
func (d *histDelta) add(which uint8, v Position, sign int64) {
	if v == 0 {
		return
	}
	if *d == nil {
		*d = histDelta{}
	}
	for level := range uint8(countLevels) {
		(*d)[histBucket{which, level, uint64(v) >> (8 * level)}] += sign
	}
}

// buildCounts adds every member record of conv to d: the histograms of a group that predates
// them.
func (t *Tx) buildCounts(conv string, d *histDelta) error {
	prefix := t.s.k.memberPrefix(conv)
	it, err := t.b.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("log: read: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		m, err := decodeMember(it.Value())
		if err != nil {
			it.Close()
			return err
		}
		d.member(m, 1)
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("log: read: %w", err)
	}
	return nil
}

// flushCounts applies d to conv's histograms, in bucket order.
func (t *Tx) flushCounts(conv string, d *histDelta) error {
	buckets := make([]histBucket, 0, len(*d))
	for b, n := range *d {
		if n != 0 {
			buckets = append(buckets, b)
		}
	}
	slices.SortFunc(buckets, func(a, b histBucket) int {
		return cmp.Or(cmp.Compare(a.which, b.which), cmp.Compare(a.level, b.level), cmp.Compare(a.bucket, b.bucket))
	})
	for _, b := range buckets {
		key := t.s.k.count(conv, b.which, b.level, b.bucket)
		cur, _, err := getUint(t.b, key)
		if err != nil {
			return err
		}
		n := int64(cur) + (*d)[b]
		switch {
		case n < 0:
			return corruptf("histogram %d of %q: bucket %d/%d would count %d", b.which, conv, b.level, b.bucket, n)
		case n == 0:
			err = t.del(key)
		default:
			err = t.set(key, encodeUint(uint64(n)))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// countReader answers count(which, ≥ n) from one view of a group's histograms, reusing one
// iterator for every question. keys counts the keys read (for tests and benchmarks).
type countReader struct {
	it   *pebble.Iterator
	k    keys
	conv string
	keys int
}

func newCountReader(r pebble.Reader, k keys, conv string) (*countReader, error) {
	prefix := k.countPrefix(conv)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("log: read: %w", err)
	}
	return &countReader{it: it, k: k, conv: conv}, nil
}

func (c *countReader) close() error { return c.it.Close() }

// atLeast returns how many members count at n or more in histogram which (n ≥ 1): the level-0
// buckets from n to the end of n's level-1 bucket, then at each level the buckets after the one
// holding n up to the end of their parent, then every top-level bucket after n's.
func (c *countReader) atLeast(which uint8, n Position) (int64, error) {
	var total int64
	for level := range uint8(countLevels) {
		b := uint64(n) >> (8 * level)
		lo := b + 1
		if level == 0 {
			lo = b // n itself counts
		}
		hi := b | 0xff // the last bucket under the same parent
		if level == countLevels-1 {
			hi = ^uint64(0)
		}
		if lo > hi || (level > 0 && b == hi) {
			continue
		}
		sum, err := c.sum(which, level, lo, hi)
		if err != nil {
			return 0, err
		}
		total += sum
	}
	return total, nil
}

// sum adds the counts of the buckets lo..hi of one level of histogram which.
func (c *countReader) sum(which, level uint8, lo, hi uint64) (int64, error) {
	upper := c.k.count(c.conv, which, level, hi)
	var total int64
	for ok := c.it.SeekGE(c.k.count(c.conv, which, level, lo)); ok; ok = c.it.Next() {
		key := c.it.Key()
		if bytes.Compare(key, upper) > 0 {
			break
		}
		c.keys++
		n, err := decodeUint(c.it.Value())
		if err != nil {
			return 0, err
		}
		total += int64(n)
	}
	return total, c.it.Error()
}

// ReceiptCount is how many members of a group had one message delivered and read
// ([Shard.Receipts]). Members counts those who were in the conversation before the message (its
// sender among them); Delivered and Read count those of them whose marks cover it.
type ReceiptCount struct {
	ConvSeq   Position
	Members   int
	Delivered int
	Read      int
}

// Receipts returns, for each position of seqs (at most MaxReceiptSeqs), how many members had the
// entry there delivered and read, as member uid asks: ErrNotMember if uid is not one,
// ErrNoConversation if conv does not exist, ErrInvalid beyond MaxReceiptSeqs positions. A
// position outside the retained log [First, Head] answers zeros. A group's answer reads its
// histograms (a few hundred keys per position at most, whatever its size); a direct
// conversation's, its two member records. The result is owned by the caller. Safe for
// concurrent use with the writer; it reads one consistent view.
func (s *Shard) Receipts(conv, uid string, seqs []Position) ([]ReceiptCount, error) {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	out, _, err := s.receipts(snap, conv, uid, seqs)
	return out, err
}

// receipts is Receipts from r; keys is how many histogram keys it read.
func (s *Shard) receipts(r pebble.Reader, conv, uid string, seqs []Position) (out []ReceiptCount, keys int, err error) {
	if !ValidID(conv) || !ValidID(uid) || len(seqs) > MaxReceiptSeqs {
		return nil, 0, invalidf("bad receipts query %q/%q for %d positions (at most %d)", conv, uid, len(seqs), MaxReceiptSeqs)
	}
	m, err := s.convMeta(r, conv)
	if err != nil {
		return nil, 0, err
	}
	if _, err := memberOf(r, s.k, conv, uid); err != nil {
		return nil, 0, err
	}
	out = make([]ReceiptCount, len(seqs))
	var in []int // indexes of the positions in the log
	for i, seq := range seqs {
		out[i].ConvSeq = seq
		if seq >= m.First && seq <= m.Head && seq > 0 {
			in = append(in, i)
		}
	}
	if len(in) == 0 {
		return out, 0, nil
	}
	if m.Kind == ConvGroup && m.Counted {
		keys, err = s.countReceipts(r, conv, m, out, in)
		return out, keys, err
	}
	return out, 0, s.scanReceipts(r, conv, m, out, in)
}

// countReceipts fills out[i] for each i of in from conv's histograms.
func (s *Shard) countReceipts(r pebble.Reader, conv string, m logMeta, out []ReceiptCount, in []int) (int, error) {
	c, err := newCountReader(r, s.k, conv)
	if err != nil {
		return 0, err
	}
	defer c.close()
	for _, i := range in {
		n := out[i].ConvSeq
		var got [countKinds]int64
		for w := range got {
			if got[w], err = c.atLeast(uint8(w)+1, n); err != nil {
				return c.keys, err
			}
		}
		joined := got[countJoined-1]
		out[i].Members = int(max(int64(m.MemberCount)-joined, 0))
		out[i].Delivered = int(max(got[countDelivered-1]-joined, 0))
		out[i].Read = int(max(got[countRead-1]-joined, 0))
	}
	return c.keys, nil
}

// scanReceipts fills out[i] for each i of in from conv's member records: a direct
// conversation's two, or a group's that predates its histograms (bounded by the group size
// limit; its first mark update builds them).
func (s *Shard) scanReceipts(r pebble.Reader, conv string, m logMeta, out []ReceiptCount, in []int) error {
	return eachMember(r, s.k, conv, "", -1, func(_ string, mem member) (bool, error) {
		eff := mem.effective()
		for _, i := range in {
			n := out[i].ConvSeq
			if mem.Joined >= n {
				continue
			}
			out[i].Members++
			if eff[countDelivered-1] >= n {
				out[i].Delivered++
			}
			if eff[countRead-1] >= n {
				out[i].Read++
			}
		}
		return true, nil
	})
}

// eachMember calls fn with conv's members after the id after, in id order, with their records,
// at most limit of them (all if negative), while fn returns true.
func eachMember(r pebble.Reader, k keys, conv, after string, limit int, fn func(uid string, m member) (bool, error)) error {
	_, err := eachMemberMore(r, k, conv, after, limit, fn)
	return err
}

// eachMemberMore is eachMember that also reports whether a member follows the last one passed.
func eachMemberMore(r pebble.Reader, k keys, conv, after string, limit int, fn func(uid string, m member) (bool, error)) (more bool, err error) {
	prefix := k.memberPrefix(conv)
	lower := prefix
	if after != "" {
		lower = append(appendID(append([]byte(nil), prefix...), after), 0) // just past after's key
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return false, fmt.Errorf("log: read: %w", err)
	}
	defer it.Close()
	n := 0
	ok := it.First()
	for ; ok && (limit < 0 || n < limit); ok = it.Next() {
		uid, err := keyID(it.Key(), len(prefix))
		if err != nil {
			return false, err
		}
		mem, err := decodeMember(it.Value())
		if err != nil {
			return false, err
		}
		n++
		if goOn, err := fn(uid, mem); err != nil || !goOn {
			return it.Next(), err
		}
	}
	return ok, it.Error()
}

// Readers returns members of conv, as member uid asks, who joined before seq and whose mark of
// state (KindDelivered or KindReceipt) covers it: the members with ids after the id after, in
// id order, at most limit of them. One call reads at most MaxReadersScan member records, so it
// may answer fewer than limit, or none, with more set; next is the last id it read: continue
// with after = next. more is false once the member list has ended. ErrNotMember if uid is not a
// member, ErrNoConversation if conv does not exist, ErrInvalid for another state or a limit
// below 1. Safe for concurrent use with the writer; it reads one consistent view.
func (s *Shard) Readers(conv, uid string, seq Position, state Kind, after string, limit int) (users []string, next string, more bool, err error) {
	if !ValidID(conv) || !ValidID(uid) || (after != "" && !ValidID(after)) || limit <= 0 || seq == 0 ||
		(state != KindDelivered && state != KindReceipt) {
		return nil, "", false, invalidf("bad readers query %q/%q at %d, state %s, after %q, limit %d", conv, uid, seq, state, after, limit)
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	if _, err := s.convMeta(snap, conv); err != nil {
		return nil, "", false, err
	}
	if _, err := memberOf(snap, s.k, conv, uid); err != nil {
		return nil, "", false, err
	}
	w := countDelivered - 1
	if state == KindReceipt {
		w = countRead - 1
	}
	next = after
	more, err = eachMemberMore(snap, s.k, conv, after, MaxReadersScan, func(id string, m member) (bool, error) {
		next = id
		if m.Joined < seq && m.effective()[w] >= seq {
			users = append(users, id)
		}
		return len(users) < limit, nil
	})
	if err != nil {
		return nil, "", false, err
	}
	return users, next, more, nil
}
