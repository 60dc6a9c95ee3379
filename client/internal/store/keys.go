package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/syncd-dev/syncd/proto"
)

// The key layout of the store. The format is on disk in every device: change it only with a new
// formatVersion (and a migration).
//
// Numbers are fixed-width (8 bytes) big-endian, so keys sort numerically; ids (conversation,
// user, client_msg_id, msg_id) are followed by a 0x00 terminator, which cannot occur inside
// them (proto.ValidID allows 0x21–0x7e only; a msg_id is digits and dots), so "a" and "ab" never
// share a prefix and a scan of one conversation never reaches another.
//
//	0x01 'v'                          format version               u64
//	0x01 'c'                          sync cursor                  epoch u64, pos u64
//	0x01 'c' sub u8                   sync cursor of sub-log sub ≥ 1 (a split user's stream)   epoch u64, pos u64
//	0x01 'r' sub u8                   stored run of sub-log sub (0 included; see Run)   base u64, repair_to u64
//	0x01 'o'                          last outbox seq assigned     u64
//	0x01 'u'                          the device's user, as the last Welcome named it   raw id bytes
//	0x02 seq                          outbox item                  v1 msgpack OutboxItem
//	0x03 cmid 0x00                    outbox index by cmid         seq u64
//	0x04 seq                          outbox item still SENDING    empty
//	0x10 seq                          user-log entry (stored as received)  v1 msgpack proto.Entry
//	0x18 sub u8 seq                   entry of sub-log sub ≥ 1, the same   v1 msgpack proto.Entry
//	0x11 msg_id 0x00                  msg_id index (dedup, recall) conv 0x00 conv_seq u64
//	0x12 conv 0x00 conv_seq           message view                 v1 msgpack storedMsg
//	0x13 conv 0x00 user 0x00          read mark of user in conv    conv_seq u64
//	0x14 conv 0x00 user 0x00          member of conv               empty
//	0x15 conv 0x00                    known conversation           empty
//	0x16 msg_id 0x00                  recall seen before its target     empty
//	0x17 conv 0x00                    conv's stored members incomplete  empty
//	0x19 conv 0x00 user 0x00          delivered mark of user in conv    conv_seq u64
//	0x1a conv 0x00                    other members' highest marks in conv (peer marks)   delivered u64, read u64
//	0x1b conv 0x00 conv_seq           client_msg_id of this device's acked message there  raw id bytes
//	0x1c conv 0x00                    cursor of source conv (a large group the device follows)   epoch u64, pos u64
//	0x1d conv 0x00 conv_seq           entry of source conv (stored as received)   v1 msgpack proto.Entry
//	0x1e conv 0x00 conv_seq           the user log's entry with source set there (following starts or ends)   kind u8
//
// Values that are not plain numbers start with a version byte (valueVersion) followed by
// msgpack; msgpack maps ignore unknown keys, so later versions may add fields. The whole layout
// is versioned by the format key: Open refuses a store of another format. A key added within a
// format (the sub-logs' keys, the runs, the delivery marks, the sources') is one a store written
// before simply lacks, and its absence has a meaning the code that reads it documents (getRun: an
// empty run; getPeerMarks: the highest read mark of another member; getSourceCursor: a source the
// device does not follow, which is all an SDK before revision 6 could have stored).

// formatVersion is the key layout version written under the format key.
const formatVersion = 1

// valueVersion is the first byte of every msgpack value.
const valueVersion = 1

// Key tags: the first byte of every key (see the layout above).
const (
	tagMeta          = 0x01
	tagOutbox        = 0x02
	tagOutboxCMID    = 0x03
	tagOutboxSending = 0x04
	tagEntry         = 0x10
	tagMsgIndex      = 0x11
	tagView          = 0x12
	tagReadMark      = 0x13
	tagMember        = 0x14
	tagConv          = 0x15
	tagEarlyRecall   = 0x16
	tagMembersStale  = 0x17
	tagSubEntry      = 0x18
	tagDelivered     = 0x19
	tagPeerMarks     = 0x1a
	tagOwnMsg        = 0x1b
	tagSourceCursor  = 0x1c
	tagSourceEntry   = 0x1d
	tagFollowMark    = 0x1e
)

// keyBuilder builds the store's keys; sk is its only value.
type keyBuilder struct{}

// sk builds keys: sk.outbox(seq), sk.view(conv, seq), …
var sk keyBuilder

// format is the key of the format version.
func (keyBuilder) format() []byte { return []byte{tagMeta, 'v'} }

// cursor is the key of the sync cursor of sub-log sub (0: the user's own log).
func (keyBuilder) cursor(sub uint32) []byte {
	if sub == 0 {
		return []byte{tagMeta, 'c'}
	}
	return []byte{tagMeta, 'c', byte(sub)}
}

// run is the key of the stored run of sub-log sub (every sub-log, 0 included): where the run of
// entries stored up to the cursor begins, and how far a repair after a Rewind reaches (Run).
// Absent in a store written before the SDK kept runs: see getRun.
func (keyBuilder) run(sub uint32) []byte { return []byte{tagMeta, 'r', byte(sub)} }

// runPrefix prefixes the stored run of every sub-log.
func (keyBuilder) runPrefix() []byte { return []byte{tagMeta, 'r'} }

// user is the key of the device's user (the latest Welcome's), so an app opened offline knows it.
func (keyBuilder) user() []byte { return []byte{tagMeta, 'u'} }

// outboxLast is the key of the last outbox seq assigned.
func (keyBuilder) outboxLast() []byte { return []byte{tagMeta, 'o'} }

// outbox is the key of outbox item seq.
func (keyBuilder) outbox(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{tagOutbox}, seq)
}

// outboxPrefix prefixes every outbox item.
func (keyBuilder) outboxPrefix() []byte { return []byte{tagOutbox} }

// outboxCMID is the key of the outbox index entry of cmid.
func (keyBuilder) outboxCMID(cmid string) []byte {
	return appendID([]byte{tagOutboxCMID}, cmid)
}

// outboxSending is the key of the marker of an outbox item still SENDING.
func (keyBuilder) outboxSending(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{tagOutboxSending}, seq)
}

// outboxSendingPrefix prefixes every SENDING marker.
func (keyBuilder) outboxSendingPrefix() []byte { return []byte{tagOutboxSending} }

// entry is the key of the entry at seq of sub-log sub of the user's stream (0: the user's log).
func (k keyBuilder) entry(sub uint32, seq proto.Position) []byte {
	return binary.BigEndian.AppendUint64(k.entryPrefix(sub), uint64(seq))
}

// entryPrefix prefixes every entry of sub-log sub.
func (keyBuilder) entryPrefix(sub uint32) []byte {
	if sub == 0 {
		return []byte{tagEntry}
	}
	return []byte{tagSubEntry, byte(sub)}
}

// sourceCursor is the key of the cursor of source conv (a large group the device follows,
// PROTOCOL §6 "Sources"): the conversation log's epoch and the last conv_seq stored.
func (keyBuilder) sourceCursor(conv string) []byte { return appendID([]byte{tagSourceCursor}, conv) }

// sourceCursorPrefix prefixes the cursor of every source.
func (keyBuilder) sourceCursorPrefix() []byte { return []byte{tagSourceCursor} }

// sourceEntry is the key of the entry at conv_seq seq of source conv, as the source's Batch
// carried it: a source's position is (conv, conv_seq) where a sub-log's is (sub, seq).
func (k keyBuilder) sourceEntry(conv string, seq proto.Position) []byte {
	return binary.BigEndian.AppendUint64(k.sourceEntryPrefix(conv), uint64(seq))
}

// sourceEntryPrefix prefixes the entries of source conv.
func (keyBuilder) sourceEntryPrefix(conv string) []byte {
	return appendID([]byte{tagSourceEntry}, conv)
}

// followMark is the key of the mark of the user-log entry with Entry.Source set at conv_seq seq
// of conv: where the user's following of the large group started (a group_create or member_add)
// or ended (a member_remove). Its value is the entry's kind.
func (k keyBuilder) followMark(conv string, seq proto.Position) []byte {
	return binary.BigEndian.AppendUint64(k.followMarkPrefix(conv), uint64(seq))
}

// followMarkPrefix prefixes the follow marks of conv.
func (keyBuilder) followMarkPrefix(conv string) []byte { return appendID([]byte{tagFollowMark}, conv) }

// msgIndex is the key of the msg_id index entry of id.
func (keyBuilder) msgIndex(id proto.MsgID) []byte {
	return appendID([]byte{tagMsgIndex}, string(id))
}

// msgRef is the msg_id index value: conv 0x00 conv_seq.
func (keyBuilder) msgRef(conv string, seq proto.Position) []byte {
	return binary.BigEndian.AppendUint64(appendID(nil, conv), uint64(seq))
}

// parseMsgRef splits a msgRef value.
func (keyBuilder) parseMsgRef(v []byte) (string, proto.Position, error) {
	i := bytes.IndexByte(v, 0)
	if i < 0 || len(v) != i+9 {
		return "", 0, fmt.Errorf("client: bad msg_id index value %x", v)
	}
	return string(v[:i]), proto.Position(binary.BigEndian.Uint64(v[i+1:])), nil
}

// view is the key of the message-view record of (conv, conv_seq).
func (keyBuilder) view(conv string, seq proto.Position) []byte {
	return binary.BigEndian.AppendUint64(sk.viewPrefix(conv), uint64(seq))
}

// viewPrefix prefixes the message view of conv.
func (keyBuilder) viewPrefix(conv string) []byte { return appendID([]byte{tagView}, conv) }

// readMark is the key of user's read mark in conv.
func (keyBuilder) readMark(conv, user string) []byte {
	return appendID(appendID([]byte{tagReadMark}, conv), user)
}

// readMarkPrefix prefixes the read marks of every user in conv.
func (keyBuilder) readMarkPrefix(conv string) []byte { return appendID([]byte{tagReadMark}, conv) }

// delivered is the key of user's delivered mark in conv: how far one of user's devices has stored
// conv, as the KindDelivered entries (and receipts, which imply it) in the user log say.
func (k keyBuilder) delivered(conv, user string) []byte {
	return appendID(k.deliveredPrefix(conv), user)
}

// deliveredPrefix prefixes the delivered marks of every user in conv.
func (keyBuilder) deliveredPrefix(conv string) []byte { return appendID([]byte{tagDelivered}, conv) }

// peerMarks is the key of conv's peer marks: the highest delivered and read marks of any member
// other than the device's user, kept so that a message's status is one read, not a scan of the
// members' marks.
func (keyBuilder) peerMarks(conv string) []byte { return appendID([]byte{tagPeerMarks}, conv) }

// ownMsg is the key of the client_msg_id of this device's message acked at (conv, conv_seq), so
// that a status step of the message can name the id the app queued it under.
func (keyBuilder) ownMsg(conv string, seq proto.Position) []byte {
	return binary.BigEndian.AppendUint64(appendID([]byte{tagOwnMsg}, conv), uint64(seq))
}

// member is the key marking user a member of conv.
func (keyBuilder) member(conv, user string) []byte {
	return appendID(sk.memberPrefix(conv), user)
}

// memberPrefix prefixes the members of conv.
func (keyBuilder) memberPrefix(conv string) []byte { return appendID([]byte{tagMember}, conv) }

// membersStale is the key marking conv's stored members incomplete: a membership entry arrived
// without its list (proto.MaxInlineMembers).
func (keyBuilder) membersStale(conv string) []byte { return appendID([]byte{tagMembersStale}, conv) }

// conv is the key marking conv known.
func (keyBuilder) conv(conv string) []byte { return appendID([]byte{tagConv}, conv) }

// convPrefix prefixes every known conversation.
func (keyBuilder) convPrefix() []byte { return []byte{tagConv} }

// earlyRecall is the key of a recall of id seen before id itself.
func (keyBuilder) earlyRecall(id proto.MsgID) []byte {
	return appendID([]byte{tagEarlyRecall}, string(id))
}

// appendID appends id and its 0x00 terminator.
func appendID(b []byte, id string) []byte { return append(append(b, id...), 0) }

// keyableID reports whether id can be part of a key (non-empty, no 0x00). Queries for ids
// that cannot be return nothing.
func keyableID(id string) bool { return id != "" && !strings.ContainsRune(id, 0) }

// prefixEnd returns the smallest key greater than every key with prefix. The store's
// prefixes never end in 0xff.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	end[len(end)-1]++
	return end
}
