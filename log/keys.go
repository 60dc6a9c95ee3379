package log

import (
	"encoding/binary"
	"slices"
)

// Key layout. Every key of a shard's state starts with the 5-byte shard prefix, then a one-byte
// table tag. Numbers are fixed-width big-endian so byte order is numeric order; ids are printable
// ASCII (see ValidID) terminated by 0x00 so that "ab" and "abc" never share a prefix.
//
//	0x01 | shard u32 | 0x01 | name                          shard metadata (applied index, outbox head…)
//	0x01 | shard u32 | 0x10 | conv 0x00                     conversation meta
//	0x01 | shard u32 | 0x11 | conv 0x00 | uid 0x00          conversation member (read mark)
//	0x01 | shard u32 | 0x12 | conv 0x00 | conv_seq u64      conversation entry
//	0x01 | shard u32 | 0x13 | msg_id(16)                    msg_id → (conv, conv_seq), recall flag
//	0x01 | shard u32 | 0x14 | conv 0x00 | which u8 | level u8 | bucket u64
//	                                                        a group's mark histogram: count (marks.go)
//	0x01 | shard u32 | 0x20 | uid 0x00                      user log meta
//	0x01 | shard u32 | 0x21 | uid 0x00 | seq u64            user log entry
//	0x01 | shard u32 | 0x22 | uid 0x00 | device 0x00        device cursor
//	0x01 | shard u32 | 0x23 | uid 0x00 | conv 0x00          a conversation the user's log has entries of
//	0x01 | shard u32 | 0x24 | uid 0x00                      cursor up to which deliveries were reported
//	0x01 | shard u32 | 0x25 | uid 0x00                      empty: deliveries are due (report.go)
//	0x01 | shard u32 | 0x26 | uid 0x00 | conv 0x00          follow record: a large group's membership periods (follow.go)
//	0x01 | shard u32 | 0x27 | uid 0x00 | kind u8 | conv 0x00 | …   fold index: the last foldable entry of a kind (fold.go)
//	0x01 | shard u32 | 0x30 | sender 0x00 | cmid 0x00 | kind u8    dedup record
//	0x01 | shard u32 | 0x31 | expires i64 | dedup key suffix       dedup expiry index
//	0x01 | shard u32 | 0x40 | outbox_pos u64                outbox record
//	0x01 | shard u32 | 0x41 | source shard u32              delivery high-water mark per source
//	0x01 | shard u32 | 0x50 | dest shard u32 | pos u64      dead letter (in the source shard)
//	0x01 | shard u32 | 0x51 | source shard u32 | pos u64    replayed dead letter (in the destination)
//	0x01 | shard u32 | 0x60 | move u64 | key suffix         a moving-in user's log meta, staged (move.go)
//	0x01 | shard u32 | 0x61 | uid 0x00                      a user's move marker
//	0x01 | shard u32 | 0x62 | move u64 | n u64              an entry held for a user moving in
//	0x01 | shard u32 | 0x63 | uid 0x00                      a moved user's cutovers (cutover.go)
//	0x01 | shard u32 | 0x64 | conv 0x00                     a conversation's move marker (convmove.go)
//	0x01 | shard u32 | 0x65 | conv 0x00                     a moved-in conversation's barrier (convmove.go)
//	0x01 | shard u32 | 0x68 | uid 0x00                      a split user's routing to sub-logs (split.go)
//
// The version of this layout is stored under the metadata name "format" (see formatVersion) and
// checked when a shard is opened; every value also starts with its own version byte.
const (
	prefixState byte = 0x01 // shard state; 0x02 is raftstore's Raft log and stable store

	tagMeta       byte = 0x01
	tagConv       byte = 0x10
	tagMember     byte = 0x11
	tagConvEntry  byte = 0x12
	tagMsgIndex   byte = 0x13
	tagCounts     byte = 0x14
	tagUser       byte = 0x20
	tagUserEntry  byte = 0x21
	tagCursor     byte = 0x22
	tagUserConv   byte = 0x23
	tagReported   byte = 0x24
	tagDue        byte = 0x25
	tagDedup      byte = 0x30
	tagDedupByExp byte = 0x31
	tagOutbox     byte = 0x40
	tagSourceMark byte = 0x41
	tagDeadLetter byte = 0x50
	tagRedeliver  byte = 0x51
)

// formatVersion is the version of the key layout and value encodings written by this code.
const formatVersion = 1

// keys builds keys for one shard. It is a value type; methods return fresh slices.
type keys struct{ prefix [5]byte }

func newKeys(shard ShardID) keys {
	var k keys
	k.prefix[0] = prefixState
	binary.BigEndian.PutUint32(k.prefix[1:], uint32(shard))
	return k
}

// shardBounds returns [lower, upper) covering the whole state keyspace of the shard.
func (k keys) shardBounds() (lower, upper []byte) {
	lower = append([]byte(nil), k.prefix[:]...)
	upper = append([]byte(nil), k.prefix[:]...)
	upper = incPrefix(upper)
	return lower, upper
}

// tableBounds returns [lower, upper) covering every key of one table of the shard.
func (k keys) tableBounds(tag byte) (lower, upper []byte) {
	lower = k.table(tag, 0)
	return lower, prefixEnd(lower)
}

func (k keys) table(tag byte, extra int) []byte {
	b := make([]byte, 0, len(k.prefix)+1+extra)
	b = append(b, k.prefix[:]...)
	return append(b, tag)
}

func (k keys) meta(name string) []byte {
	return append(k.table(tagMeta, len(name)), name...)
}

func appendID(b []byte, id string) []byte { return append(append(b, id...), 0) }

// keyID returns the id of a stored key that is a table prefix of n bytes followed by one id and
// its 0x00; a key of another shape (a damaged store) is an ErrCorrupt.
func keyID(key []byte, n int) (string, error) {
	if len(key) < n+2 || key[len(key)-1] != 0 || slices.Contains(key[n:len(key)-1], 0) {
		return "", corruptf("key %x is not a table's id key", key)
	}
	return string(key[n : len(key)-1]), nil
}

func (k keys) conv(conv string) []byte { return appendID(k.table(tagConv, len(conv)+1), conv) }

func (k keys) memberPrefix(conv string) []byte {
	return appendID(k.table(tagMember, len(conv)+1+MaxIDLen), conv)
}

func (k keys) member(conv, uid string) []byte { return appendID(k.memberPrefix(conv), uid) }

func (k keys) convEntryPrefix(conv string) []byte {
	return appendID(k.table(tagConvEntry, len(conv)+9), conv)
}

func (k keys) convEntry(conv string, seq Position) []byte {
	return entryKey(k.convEntryPrefix(conv), seq)
}

func (k keys) msgIndex(id MsgID) []byte { return appendMsgID(k.table(tagMsgIndex, 16), id) }

func (k keys) user(uid string) []byte { return appendID(k.table(tagUser, len(uid)+1), uid) }

func (k keys) userEntryPrefix(uid string) []byte {
	return appendID(k.table(tagUserEntry, len(uid)+9), uid)
}

func (k keys) userEntry(uid string, seq Position) []byte {
	return entryKey(k.userEntryPrefix(uid), seq)
}

// entryKey returns a fresh key: prefix followed by seq as 8 bytes big-endian.
func entryKey(prefix []byte, seq Position) []byte {
	b := make([]byte, 0, len(prefix)+8)
	return binary.BigEndian.AppendUint64(append(b, prefix...), uint64(seq))
}

func (k keys) cursorPrefix(uid string) []byte {
	return appendID(k.table(tagCursor, len(uid)+1+MaxIDLen), uid)
}

func (k keys) cursor(uid, device string) []byte { return appendID(k.cursorPrefix(uid), device) }

func (k keys) userConvPrefix(uid string) []byte {
	return appendID(k.table(tagUserConv, len(uid)+1+MaxIDLen), uid)
}

func (k keys) userConv(uid, conv string) []byte { return appendID(k.userConvPrefix(uid), conv) }

func (k keys) countPrefix(conv string) []byte {
	return appendID(k.table(tagCounts, len(conv)+1+10), conv)
}

// count is the key of one bucket of one of conv's histograms (marks.go).
func (k keys) count(conv string, which, level uint8, bucket uint64) []byte {
	return binary.BigEndian.AppendUint64(append(k.countPrefix(conv), which, level), bucket)
}

func (k keys) reported(uid string) []byte { return appendID(k.table(tagReported, len(uid)+1), uid) }

func (k keys) due(uid string) []byte { return appendID(k.table(tagDue, len(uid)+1), uid) }

// dedupSuffix is the part of a dedup key after the table tag; the expiry index reuses it.
func dedupSuffix(sender, clientMsgID string, kind Kind) []byte {
	b := make([]byte, 0, len(sender)+len(clientMsgID)+3)
	b = appendID(appendID(b, sender), clientMsgID)
	return append(b, byte(kind))
}

func (k keys) dedup(suffix []byte) []byte {
	return append(k.table(tagDedup, len(suffix)), suffix...)
}

func (k keys) dedupByExpPrefix() []byte { return k.table(tagDedupByExp, 8) }

func (k keys) dedupByExp(expires int64, suffix []byte) []byte {
	b := binary.BigEndian.AppendUint64(k.dedupByExpPrefix(), uint64(expires))
	return append(b, suffix...)
}

func (k keys) outbox(pos uint64) []byte {
	return binary.BigEndian.AppendUint64(k.table(tagOutbox, 8), pos)
}

func (k keys) sourceMark(src ShardID) []byte {
	return binary.BigEndian.AppendUint32(k.table(tagSourceMark, 4), uint32(src))
}

func (k keys) deadLetter(dest ShardID, pos uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(k.table(tagDeadLetter, 12), uint32(dest)), pos)
}

func (k keys) redelivered(src ShardID, pos uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(k.table(tagRedeliver, 12), uint32(src)), pos)
}

// incPrefix turns p into the smallest key greater than every key with prefix p, in place.
func incPrefix(p []byte) []byte {
	for i := len(p) - 1; i >= 0; i-- {
		p[i]++
		if p[i] != 0 {
			return p[:i+1]
		}
	}
	return nil // p was all 0xff: no upper bound
}

// prefixEnd returns the exclusive upper bound of keys starting with p, without modifying p.
func prefixEnd(p []byte) []byte { return incPrefix(append([]byte(nil), p...)) }
