package log

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// ReadStatus says what a read found. Exactly one applies; see [Read].
type ReadStatus uint8

const (
	// ReadEntries: Entries holds entries starting exactly at the requested position, contiguous.
	ReadEntries ReadStatus = iota + 1
	// ReadCaughtUp: nothing at or after the requested position yet; Info.Head is the last position.
	ReadCaughtUp
	// ReadTooOld: the requested position was trimmed; Info.First is the first retained position.
	// The reader must rebase; it is never silently moved forward.
	ReadTooOld
	// ReadEpochChanged: the log was re-created since the reader's cursor was taken; Info has the
	// new epoch. The reader must resync from scratch — unless Info.Continues says its cursor
	// holds in the new epoch.
	ReadEpochChanged
)

var readStatusNames = [...]string{"", "entries", "caught_up", "too_old", "epoch_changed"}

func (s ReadStatus) String() string {
	if int(s) < len(readStatusNames) && s != 0 {
		return readStatusNames[s]
	}
	return fmt.Sprintf("read_status(%d)", uint8(s))
}

// LogInfo describes a log: its epoch and the range of retained positions [First, Head]. An empty
// log has Head = First-1. A log that does not exist yet has Epoch 0, First 1, Head 0.
type LogInfo struct {
	Epoch Epoch
	First Position
	Head  Position
	// Continues is set with ReadEpochChanged when the log was restored from a backup that kept
	// every position up to the reader's cursor: the cursor's position in the new epoch names the
	// same entries, so the reader takes the new epoch and goes on from where it is. A cursor
	// past what the restore kept saw entries the backup lost, whose positions new entries take.
	Continues bool
}

// Limit bounds a read. A read returns at most Count entries and stops adding entries once Bytes
// is reached, but always returns at least one entry when one exists, so a reader never stalls on
// an entry larger than its byte budget. Zero fields mean the defaults below.
type Limit struct {
	Count int // default DefaultReadCount
	Bytes int // default DefaultReadBytes
}

// Default read limits.
const (
	DefaultReadCount = 256
	DefaultReadBytes = 1 << 20
)

func (l Limit) withDefaults() Limit {
	if l.Count <= 0 {
		l.Count = DefaultReadCount
	}
	if l.Bytes <= 0 {
		l.Bytes = DefaultReadBytes
	}
	return l
}

// Read is the answer to a read. Entries are owned by the caller.
type Read struct {
	Status  ReadStatus
	Info    LogInfo
	Entries []Entry
}

// ReadUser reads the log of user uid starting exactly at position from (1 or more). If epoch is
// non-zero and differs from the log's epoch, the answer is ReadEpochChanged.
func (s *Shard) ReadUser(uid string, epoch Epoch, from Position, lim Limit) (Read, error) {
	if !ValidLog(uid) {
		return Read{}, invalidf("bad user id %q", uid)
	}
	snap := s.db.NewSnapshot() // meta and entries from one point in time, despite the writer
	defer snap.Close()
	if err := s.servesUser(snap, uid); err != nil {
		return Read{}, err
	}
	return readForward(snap, s.k.user(uid), s.k.userEntryPrefix(uid), epoch, from, lim, nil)
}

// ReadConv reads the conversation log of conv forwards, like [Shard.ReadUser]. It returns
// ErrNoConversation if the conversation does not exist.
func (s *Shard) ReadConv(conv string, epoch Epoch, from Position, lim Limit) (Read, error) {
	if !ValidID(conv) {
		return Read{}, invalidf("bad conversation id %q", conv)
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	if err := s.servesConv(snap, conv); err != nil {
		return Read{}, err
	}
	return readForward(snap, s.k.conv(conv), s.k.convEntryPrefix(conv), epoch, from, lim, ErrNoConversation)
}

// UserInfo returns the epoch and retained range of user uid's log.
func (s *Shard) UserInfo(uid string) (LogInfo, error) {
	if err := s.servesUser(s.db, uid); err != nil {
		return LogInfo{}, err
	}
	m, _, err := getLogMeta(s.db, s.k.user(uid))
	return LogInfo{Epoch: m.Epoch, First: m.First, Head: m.Head}, err
}

// UserGroups returns how many groups each of uids is a member of, as the membership entries
// delivered to their logs so far say (a user without a log is in none). The count trails the
// groups' own shards by the delivery delay: a cap checked against it can be passed by the
// additions still in flight.
func (s *Shard) UserGroups(uids []string) ([]int, error) {
	counts := make([]int, len(uids))
	for i, uid := range uids {
		m, _, err := getLogMeta(s.db, s.k.user(uid))
		if err != nil {
			return nil, err
		}
		counts[i] = m.Groups
	}
	return counts, nil
}

// ConvInfo returns the epoch and retained range of conversation conv's log. It returns
// ErrNoConversation if the conversation does not exist.
func (s *Shard) ConvInfo(conv string) (LogInfo, error) {
	m, err := s.convMeta(s.db, conv)
	return LogInfo{Epoch: m.Epoch, First: m.First, Head: m.Head}, err
}

// ReadConvBefore pages a conversation log backwards ("load earlier messages"): it returns, in
// ascending order, up to lim.Count retained entries with positions below before, ending at
// before-1; when lim.Bytes cuts the page short, it keeps the entries nearest to before (at least
// one), so paging on from the oldest returned entry skips nothing. Status is ReadEntries when it
// found some, ReadTooOld when the retained history starts at or after before.
func (s *Shard) ReadConvBefore(conv string, before Position, lim Limit) (Read, error) {
	if !ValidID(conv) {
		return Read{}, invalidf("bad conversation id %q", conv)
	}
	lim = lim.withDefaults()
	snap := s.db.NewSnapshot()
	defer snap.Close()
	m, err := s.convMeta(snap, conv)
	if err != nil {
		return Read{}, err
	}
	info := LogInfo{Epoch: m.Epoch, First: m.First, Head: m.Head}
	if before > m.Head+1 {
		before = m.Head + 1
	}
	if before <= m.First {
		return Read{Status: ReadTooOld, Info: info}, nil
	}
	from := m.First
	if before-m.First > Position(lim.Count) {
		from = before - Position(lim.Count)
	}
	entries, err := scanEntries(snap, s.k.convEntryPrefix(conv), from, before-1, lim.Count, 1<<62)
	if err != nil {
		return Read{}, err
	}
	// Apply the byte budget from the newest entry down, like a forward read from the oldest.
	start := len(entries)
	for size := 0; start > 0 && (start == len(entries) || size < lim.Bytes); start-- {
		size += entries[start-1].Size()
	}
	return Read{Status: ReadEntries, Info: info, Entries: entries[start:]}, nil
}

// readForward reads a log from position from. A log that does not exist reads as empty, or
// returns missing if that is not nil.
func readForward(r pebble.Reader, metaKey, prefix []byte, epoch Epoch, from Position, lim Limit, missing error) (Read, error) {
	rd, m, err := readMeta(r, metaKey, epoch, from, lim, missing)
	if err != nil || rd.Status != ReadEntries {
		return rd, err
	}
	lim = lim.withDefaults()
	entries, err := scanEntries(r, prefix, from, m.Head, lim.Count, lim.Bytes)
	if err != nil {
		return Read{}, err
	}
	rd.Entries = entries
	return rd, nil
}

// readMeta is the first half of a forward read from position from: the answer without its
// entries, and the log's meta. Status ReadEntries means entries from..Head are retained and are
// to be read next.
func readMeta(r pebble.Reader, metaKey []byte, epoch Epoch, from Position, lim Limit, missing error) (Read, logMeta, error) {
	m, ok, err := getLogMeta(r, metaKey)
	if err == nil && !ok && missing != nil {
		return Read{}, m, missing
	}
	if from == 0 {
		return Read{}, m, invalidf("read position must be 1 or more")
	}
	if err != nil {
		return Read{}, m, err
	}
	info := LogInfo{Epoch: m.Epoch, First: m.First, Head: m.Head}
	switch {
	case epoch != 0 && epoch != m.Epoch:
		info.Continues = m.continues(epoch, from-1)
		return Read{Status: ReadEpochChanged, Info: info}, m, nil
	case from < m.First:
		return Read{Status: ReadTooOld, Info: info}, m, nil
	case from > m.Head:
		return Read{Status: ReadCaughtUp, Info: info}, m, nil
	}
	return Read{Status: ReadEntries, Info: info}, m, nil
}

// scanEntries returns the entries at positions from..to (inclusive), which the caller knows are
// retained, up to count entries and about maxBytes bytes (at least one). A missing position is
// reported as corruption rather than skipped: contiguity is the product.
func scanEntries(r pebble.Reader, prefix []byte, from, to Position, count, maxBytes int) ([]Entry, error) {
	out := make([]Entry, 0, min(count, int(to-from)+1))
	err := scanRange(r, prefix, from, to, count, maxBytes, func(val []byte, seq Position) (int, bool, error) {
		e, err := decodeEntry(val, seq)
		if err != nil {
			return 0, false, err
		}
		out = append(out, e)
		return e.Size(), true, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// scanRange visits the stored values at positions from..to (inclusive), which the caller knows
// are retained, in order, while fewer than count were taken and their sizes (as visit reports
// them) add up to less than maxBytes; the first one is always visited. visit reports whether it
// took the value and whether to go on. A missing position is corruption.
func scanRange(r pebble.Reader, prefix []byte, from, to Position, count, maxBytes int,
	visit func(val []byte, seq Position) (size int, more bool, err error)) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: entryKey(prefix, from), UpperBound: entryKey(prefix, to+1)})
	if err != nil {
		return fmt.Errorf("log: read: %w", err)
	}
	defer it.Close()
	taken, size := 0, 0
	want := from
	seen := false
	for ok := it.First(); ok && taken < count && (taken == 0 || size < maxBytes); ok = it.Next() {
		seen = true
		key := it.Key()
		seq := Position(binary.BigEndian.Uint64(key[len(key)-8:]))
		if seq != want {
			return corruptf("log has a hole: expected position %d, found %d", want, seq)
		}
		n, more, err := visit(it.Value(), seq)
		if err != nil {
			return fmt.Errorf("position %d: %w", seq, err)
		}
		if !more {
			break
		}
		taken, size, want = taken+1, size+n, want+1
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("log: read: %w", err)
	}
	if !seen {
		return corruptf("log has a hole: position %d missing", from)
	}
	return nil
}

// Scan is the reusable state of [Shard.ScanUser]: the entry it decodes into, the Members list it
// reuses and the strings it has made, so that ids repeated from entry to entry (a backlog's few
// conversations and senders) are allocated once. The zero value is ready. A Scan may be reused
// for any number of scans, one at a time; it is not safe for concurrent use.
type Scan struct {
	e       Entry
	members []string
	strs    map[string]string
}

// maxScanStrings bounds the strings a Scan keeps (a few KB): beyond it they are dropped and made
// again. A backlog of a few conversations needs a handful.
const maxScanStrings = 256

// ScanUser reads user uid's log like [Shard.ReadUser], but hands each entry to fn as it is
// decoded, in position order, instead of returning them: fn returns false to stop before the
// entry it was given (which then does not count as read). The answer's Status and Info are
// ReadUser's; Entries is always nil. With Status ReadEntries, fn was called at least once.
//
// The *Entry given to fn, its Body and its Members are valid only until fn returns: Body aliases
// the store's memory, and all three are reused for the next entry, so fn copies what it keeps.
// Its strings (Conv, Sender, Members' items) are ordinary immutable strings and may be kept.
// ScanUser is for a reader that consumes entries at once (a sync stream encoding a batch); it
// saves ReadUser's copy of every entry.
func (s *Shard) ScanUser(sc *Scan, uid string, epoch Epoch, from Position, lim Limit, fn func(*Entry) bool) (Read, error) {
	if !ValidLog(uid) {
		return Read{}, invalidf("bad user id %q", uid)
	}
	snap := s.db.NewSnapshot() // meta and entries from one point in time, despite the writer
	defer snap.Close()
	if err := s.servesUser(snap, uid); err != nil {
		return Read{}, err
	}
	rd, m, err := readMeta(snap, s.k.user(uid), epoch, from, lim, nil)
	if err != nil || rd.Status != ReadEntries {
		return rd, err
	}
	lim = lim.withDefaults()
	err = scanRange(snap, s.k.userEntryPrefix(uid), from, m.Head, lim.Count, lim.Bytes, func(val []byte, seq Position) (int, bool, error) {
		if err := sc.decode(val, seq); err != nil {
			return 0, false, err
		}
		if !fn(&sc.e) {
			return 0, false, nil
		}
		return sc.e.Size(), true, nil
	})
	sc.e = Entry{} // keep nothing of the store's memory past the scan
	if err != nil {
		return Read{}, err
	}
	return rd, nil
}

// decode decodes the stored entry b at position seq into sc.e (see [Shard.ScanUser]).
func (sc *Scan) decode(b []byte, seq Position) error {
	if sc.strs == nil || len(sc.strs) >= maxScanStrings {
		sc.strs = make(map[string]string, 16)
	}
	sc.members = sc.members[:0]
	return decodeEntryInto(&sc.e, b, seq, sc)
}

// decodeEntryInto is decodeEntry (values.go) for a Scan: Body aliases b, Members reuses sc's
// list, strings come from sc.str. The two must decode the same fields in the same order
// (TestScanDecodesLikeRead holds them together).
func decodeEntryInto(x *Entry, b []byte, seq Position, sc *Scan) error {
	d := decoder{b: b}
	v := d.version("entry", entryV4)
	*x = Entry{
		Seq:      seq,
		Kind:     Kind(d.u8()),
		MsgID:    d.msgID(),
		Conv:     sc.str(d.raw(d.uvarint(), "string")),
		ConvSeq:  Position(d.uvarint()),
		Sender:   sc.str(d.raw(d.uvarint(), "string")),
		Time:     d.varint(),
		Body:     d.raw(d.uvarint(), "bytes"),
		ReadUpTo: Position(d.uvarint()),
		Target:   d.msgID(),
	}
	if len(x.Body) == 0 {
		x.Body = nil
	}
	if n := d.uvarint(); n > uint64(len(d.b)) { // each string takes at least one byte
		d.fail("string list")
	} else if n > 0 {
		for i := uint64(0); i < n && d.err == nil; i++ {
			sc.members = append(sc.members, sc.str(d.raw(d.uvarint(), "string")))
		}
		x.Members = sc.members
	}
	d.entryTail(v, x)
	return d.done("entry")
}

// str returns b as a string, made once per Scan.
func (sc *Scan) str(b []byte) string {
	if s, ok := sc.strs[string(b)]; ok { // the lookup does not allocate
		return s
	}
	s := string(b)
	sc.strs[s] = s
	return s
}

// Users returns up to limit user ids of this shard whose logs exist, in id order, starting after
// the id after ("" for the beginning), with each log's info. It pages through the shard for
// background work such as retention.
func (s *Shard) Users(after string, limit int) ([]string, []LogInfo, error) {
	return s.logs(tagUser, "user", after, limit)
}

// Convs is Users for the conversation logs of this shard: up to limit conversation ids after
// after, in id order, with each log's info (the retention of conversation logs pages with it).
func (s *Shard) Convs(after string, limit int) ([]string, []LogInfo, error) {
	return s.logs(tagConv, "conversation", after, limit)
}

// logs pages the log metas of table tag (users' or conversations'), each keyed by its id.
func (s *Shard) logs(tag byte, what string, after string, limit int) ([]string, []LogInfo, error) {
	lower := s.k.table(tag, len(after)+2)
	if after != "" {
		lower = append(appendID(lower, after), 0) // just past after's key
	}
	_, upper := s.k.tableBounds(tag)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, nil, fmt.Errorf("log: read: %w", err)
	}
	defer it.Close()
	var ids []string
	var infos []LogInfo
	for ok := it.First(); ok && len(ids) < limit; ok = it.Next() {
		key := it.Key()
		prefixLen := len(s.k.prefix) + 1
		if len(key) <= prefixLen+1 {
			return nil, nil, corruptf("%s key %x names no %s", what, key, what)
		}
		m, err := decodeLogMeta(it.Value())
		if err != nil {
			return nil, nil, err
		}
		ids = append(ids, string(key[prefixLen:len(key)-1]))
		infos = append(infos, LogInfo{Epoch: m.Epoch, First: m.First, Head: m.Head})
	}
	return ids, infos, it.Error()
}
