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
	// new epoch. The reader must resync from scratch.
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
	if !ValidID(uid) {
		return Read{}, invalidf("bad user id %q", uid)
	}
	snap := s.db.NewSnapshot() // meta and entries from one point in time, despite the writer
	defer snap.Close()
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
	return readForward(snap, s.k.conv(conv), s.k.convEntryPrefix(conv), epoch, from, lim, ErrNoConversation)
}

// UserInfo returns the epoch and retained range of user uid's log.
func (s *Shard) UserInfo(uid string) (LogInfo, error) {
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
	m, ok, err := getLogMeta(s.db, s.k.conv(conv))
	if err == nil && !ok {
		err = ErrNoConversation
	}
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
	m, ok, err := getLogMeta(snap, s.k.conv(conv))
	if err != nil {
		return Read{}, err
	}
	if !ok {
		return Read{}, ErrNoConversation
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
	m, ok, err := getLogMeta(r, metaKey)
	if err == nil && !ok && missing != nil {
		return Read{}, missing
	}
	if from == 0 {
		return Read{}, invalidf("read position must be 1 or more")
	}
	lim = lim.withDefaults()
	if err != nil {
		return Read{}, err
	}
	info := LogInfo{Epoch: m.Epoch, First: m.First, Head: m.Head}
	switch {
	case epoch != 0 && epoch != m.Epoch:
		return Read{Status: ReadEpochChanged, Info: info}, nil
	case from < m.First:
		return Read{Status: ReadTooOld, Info: info}, nil
	case from > m.Head:
		return Read{Status: ReadCaughtUp, Info: info}, nil
	}
	entries, err := scanEntries(r, prefix, from, m.Head, lim.Count, lim.Bytes)
	if err != nil {
		return Read{}, err
	}
	return Read{Status: ReadEntries, Info: info, Entries: entries}, nil
}

// scanEntries returns the entries at positions from..to (inclusive), which the caller knows are
// retained, up to count entries and about maxBytes bytes (at least one). A missing position is
// reported as corruption rather than skipped: contiguity is the product.
func scanEntries(r pebble.Reader, prefix []byte, from, to Position, count, maxBytes int) ([]Entry, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: entryKey(prefix, from), UpperBound: entryKey(prefix, to+1)})
	if err != nil {
		return nil, fmt.Errorf("log: read: %w", err)
	}
	defer it.Close()
	var out []Entry
	size := 0
	want := from
	for ok := it.First(); ok && len(out) < count && (len(out) == 0 || size < maxBytes); ok = it.Next() {
		key := it.Key()
		seq := Position(binary.BigEndian.Uint64(key[len(key)-8:]))
		if seq != want {
			return nil, corruptf("log has a hole: expected position %d, found %d", want, seq)
		}
		e, err := decodeEntry(it.Value(), seq)
		if err != nil {
			return nil, fmt.Errorf("position %d: %w", seq, err)
		}
		out = append(out, e)
		size += e.Size()
		want++
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("log: read: %w", err)
	}
	if len(out) == 0 {
		return nil, corruptf("log has a hole: position %d missing", from)
	}
	return out, nil
}

// Users returns up to limit user ids of this shard whose logs exist, in id order, starting after
// the id after ("" for the beginning), with each log's info. It pages through the shard for
// background work such as retention.
func (s *Shard) Users(after string, limit int) ([]string, []LogInfo, error) {
	lower := s.k.table(tagUser, len(after)+2)
	if after != "" {
		lower = append(appendID(lower, after), 0) // just past after's key
	}
	_, upper := s.k.tableBounds(tagUser)
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
			return nil, nil, corruptf("user key %x names no user", key)
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
