package log

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
)

// scanLog delivers n entries of every kind to user "u" (bodies of varied sizes, empty ones
// included, receipts, recalls, membership entries with and without their member list) and
// returns the shard and the log's info.
func scanLog(t *testing.T, n int) (*Shard, LogInfo) {
	t.Helper()
	s := newMemShard(t, testShardID)
	d := &DeliveryBatch{Source: 2, Prev: 0, Last: uint64(n)}
	for pos := uint64(1); pos <= uint64(n); pos++ {
		e := Entry{Kind: Kind(pos%7 + 1), MsgID: MsgID{Shard: 2, Index: pos, Sub: uint32(pos % 3)},
			Conv: fmt.Sprintf("c%d", pos%5), ConvSeq: Position(pos), Sender: fmt.Sprintf("s%d", pos%4), Time: int64(pos) << 30}
		switch e.Kind {
		case KindMessage:
			e.Body = bytes.Repeat([]byte{byte(pos)}, int(pos%3)*150) // 0, 150 or 300 bytes
		case KindReceipt:
			e.ReadUpTo = Position(pos - 1)
		case KindRecall:
			e.Target = MsgID{Shard: 2, Index: pos - 2}
		case KindRoleChange:
			e.Members, e.Role = []string{fmt.Sprintf("m%d", pos), "u"}, RoleAdmin
		default:
			if pos%2 == 0 {
				e.Members = []string{fmt.Sprintf("m%d", pos), "u", "z"}
			} else {
				e.MemberCount = 40
			}
			// Some start or end a large group's following (an entry v3).
			e.Source = e.Kind >= KindGroupCreate && e.Kind <= KindMemberRemove && pos%3 == 0
		}
		d.Items = append(d.Items, Delivery{Pos: pos, Users: []string{"u"}, Entry: e})
	}
	st := Stamp{Index: 1, Time: 1}
	mustApply(t, s, st, func(tx *Tx) error { _, err := tx.Deliver(st, d); return err })
	info, err := s.UserInfo("u")
	if err != nil || info.Head != Position(n) {
		t.Fatalf("setup: %+v %v", info, err)
	}
	return s, info
}

// scanAll runs ScanUser with fn copying every entry it is given (as fn must to keep one).
func scanAll(s *Shard, sc *Scan, uid string, epoch Epoch, from Position, lim Limit, stopAfter int) (Read, []Entry, error) {
	var got []Entry
	r, err := s.ScanUser(sc, uid, epoch, from, lim, func(e *Entry) bool {
		if len(got) == stopAfter {
			return false
		}
		c := *e
		c.Body = bytes.Clone(e.Body)
		c.Members = slices.Clone(e.Members)
		got = append(got, c)
		return true
	})
	return r, got, err
}

// TestScanDecodesLikeRead: ScanUser hands over exactly the entries ReadUser returns, with the
// same answer, for every start position and several limits — through one Scan reused from read
// to read, so that an entry never carries a field of the one before (its Body aliases the store,
// its Members list is reused).
func TestScanDecodesLikeRead(t *testing.T) {
	s, info := scanLog(t, 60)
	var sc Scan
	for _, lim := range []Limit{{}, {Count: 1}, {Count: 7}, {Bytes: 500}, {Count: 1000, Bytes: 1}} {
		for from := Position(1); from <= info.Head; from++ {
			want, err := s.ReadUser("u", info.Epoch, from, lim)
			if err != nil {
				t.Fatal(err)
			}
			r, got, err := scanAll(s, &sc, "u", info.Epoch, from, lim, -1)
			if err != nil {
				t.Fatalf("scan from %d, %+v: %v", from, lim, err)
			}
			if r.Status != want.Status || r.Info != want.Info || r.Entries != nil {
				t.Fatalf("scan from %d, %+v: answer %v %+v (%d entries), want %v %+v", from, lim, r.Status, r.Info, len(r.Entries), want.Status, want.Info)
			}
			if !reflect.DeepEqual(got, want.Entries) {
				t.Fatalf("scan from %d, %+v: %d entries differ from ReadUser's %d:\n%+v\n%+v", from, lim, len(got), len(want.Entries), got, want.Entries)
			}
		}
	}
	if len(sc.strs) > maxScanStrings || sc.e.Body != nil || sc.e.Members != nil {
		t.Fatalf("after the scans the Scan holds %d strings, a body of %d bytes, %d members", len(sc.strs), len(sc.e.Body), len(sc.e.Members))
	}
}

// TestScanStops: fn's false stops the scan before the entry it was given; the answer is still
// ReadEntries, and the next scan from there goes on with that entry.
func TestScanStops(t *testing.T) {
	s, info := scanLog(t, 20)
	var sc Scan
	var all []Entry
	for from := Position(1); from <= info.Head; {
		r, got, err := scanAll(s, &sc, "u", 0, from, Limit{}, 3)
		if err != nil || r.Status != ReadEntries || len(got) != int(min(3, info.Head-from+1)) || got[0].Seq != from {
			t.Fatalf("scan from %d stopping after 3: %v %v, %d entries", from, r.Status, err, len(got))
		}
		all = append(all, got...)
		from += Position(len(got))
	}
	want, err := s.ReadUser("u", 0, 1, Limit{Count: 100})
	if err != nil || !reflect.DeepEqual(all, want.Entries) {
		t.Fatalf("the scans in steps of 3 differ from one read: %v", err)
	}
}

// TestScanAnswers: ScanUser gives ReadUser's answers where there are no entries to hand over —
// caught up, too old, epoch changed, a log that does not exist — and its errors, without
// calling fn.
func TestScanAnswers(t *testing.T) {
	s, info := scanLog(t, 10)
	st := Stamp{Index: 2, Time: 1 << 62}
	mustApply(t, s, st, func(tx *Tx) error { _, err := tx.TrimUser(st, "u", Retention{MaxCount: 4}); return err })
	var sc Scan
	cases := []struct {
		uid   string
		epoch Epoch
		from  Position
	}{
		{"u", 0, 11},               // caught up
		{"u", info.Epoch, 1},       // too old
		{"u", info.Epoch + 1, 7},   // epoch changed
		{"nobody", 0, 1},           // no log: caught up
		{"u", 0, 0},                // invalid position
		{"bad id", 0, 1},           // invalid id
		{"u", info.Epoch, 7},       // entries, for contrast
		{"u", info.Epoch, 1 << 62}, // far beyond the head
	}
	for _, c := range cases {
		want, werr := s.ReadUser(c.uid, c.epoch, c.from, Limit{})
		called := 0
		r, err := s.ScanUser(&sc, c.uid, c.epoch, c.from, Limit{}, func(*Entry) bool { called++; return true })
		if (err == nil) != (werr == nil) || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Fatalf("%+v: error %v, ReadUser's %v", c, err, werr)
		}
		if r.Status != want.Status || r.Info != want.Info || called != len(want.Entries) {
			t.Fatalf("%+v: %v %+v after %d entries, ReadUser: %v %+v with %d", c, r.Status, r.Info, called, want.Status, want.Info, len(want.Entries))
		}
	}
}

// FuzzScanDecode: the Scan's decoder (decodeEntryInto) accepts exactly the bytes decodeEntry
// accepts and decodes them to the same entry, so a sync stream reads what ReadUser would.
func FuzzScanDecode(f *testing.F) {
	addSeeds(f, encodeEntry(&goldenEntry), encodeEntry(&goldenEntryV2), encodeEntry(&Entry{}))
	f.Fuzz(func(t *testing.T, data []byte) {
		want, werr := decodeEntry(data, 5)
		var sc Scan
		err := sc.decode(data, 5)
		if (err == nil) != (werr == nil) {
			t.Fatalf("decodeEntryInto: %v, decodeEntry: %v", err, werr)
		}
		if err == nil && !reflect.DeepEqual(sc.e, want) {
			t.Fatalf("decodeEntryInto:\n%+v\ndecodeEntry:\n%+v", sc.e, want)
		}
	})
}

// BenchmarkScanUser is BenchmarkReadUser through ScanUser, with fn taking each entry without
// copying it (as a sync stream encoding its batch does).
func BenchmarkScanUser(b *testing.B) {
	const n = 10_000
	s := newMemShard(b, testShardID)
	fillBenchLog(b, s, n)
	info, _ := s.UserInfo("u")
	var sc Scan
	i, got := 0, 0
	take := func(*Entry) bool { got++; return true }
	b.ReportAllocs()
	for b.Loop() {
		from := Position(i*DefaultReadCount%(n-DefaultReadCount)) + 1
		i, got = i+1, 0
		r, err := s.ScanUser(&sc, "u", info.Epoch, from, Limit{}, take)
		if err != nil || r.Status != ReadEntries || got != DefaultReadCount {
			b.Fatalf("scan from %d: %v %d %v", from, r.Status, got, err)
		}
	}
}
