package proto

import (
	"strconv"
	"strings"

	"github.com/syncd-dev/syncd/proto/ident"
)

// Position is a place in a log: the first entry is at 1, the next at 2, and so on without holes.
// Zero means "before the first entry". User logs number entries by seq, conversation logs by
// conv_seq; both use this type.
type Position uint64

// Epoch identifies one incarnation of a log. It changes only when the log is re-created (for
// example restored from a backup), so positions from another incarnation are never mixed up.
// Zero means "unknown" (a device that has never synced) or "the log does not exist yet".
type Epoch uint64

// MsgID is the server-assigned, globally unique id of a conversation entry, in the canonical
// form "shard.index.sub" (three decimal numbers without leading zeros, index at least 1). Clients
// treat it as an opaque string: two entries are the same entry exactly when their MsgIDs are
// equal strings, which is why the server only ever sends the canonical form.
type MsgID string

// Valid reports whether id is in the canonical "shard.index.sub" form: shard and sub fit in 32
// bits, index in 64 bits and is not zero, and no number has a leading zero or a sign.
func (id MsgID) Valid() bool {
	shard, rest, ok1 := strings.Cut(string(id), ".")
	index, sub, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 {
		return false
	}
	i, ok := canonicalUint(index, 64)
	return ok && i != 0 && validUint(shard, 32) && validUint(sub, 32)
}

func validUint(s string, bits int) bool {
	_, ok := canonicalUint(s, bits)
	return ok
}

// canonicalUint parses s as a decimal number of at most bits bits written without a sign or a
// leading zero, so that each number has exactly one spelling.
func canonicalUint(s string, bits int) (uint64, bool) {
	if s == "" || (len(s) > 1 && s[0] == '0') || s[0] < '0' || s[0] > '9' {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, bits)
	return v, err == nil
}

// Kind says what a log entry means. The numbers match the storage core's and are part of the
// wire format: never renumber them.
type Kind uint8

// Entry kinds.
const (
	KindMessage      Kind = 1 // a message with a body
	KindReceipt      Kind = 2 // the sender has read the conversation up to UpTo
	KindRecall       Kind = 3 // the sender recalls its message Target
	KindGroupCreate  Kind = 4 // a group was created with Members
	KindMemberAdd    Kind = 5 // Members joined the group
	KindMemberRemove Kind = 6 // Members left or were removed from the group
	KindRoleChange   Kind = 7 // the owner gave Members the role Role
	// KindDelivered (revision 5): the sender's devices have stored the conversation up to UpTo.
	// The server writes it, never a client: it reports what the sender's devices acked
	// (docs/PROTOCOL.md §8.8). Like a receipt it takes a
	// conv_seq and carries UpTo.
	KindDelivered Kind = 8
	// KindEdit (revision 7): the sender replaced the body of its message Target with Body.
	KindEdit Kind = 9
	// KindReaction (revision 7): the sender put Reaction on the message Target, or took it off
	// (Remove). The last reaction entry of a (Target, sender, Reaction) says whether it is on.
	KindReaction Kind = 10
)

var kindNames = [...]string{"", "message", "receipt", "recall", "group_create", "member_add", "member_remove", "role_change", "delivered", "edit", "reaction"}

// String returns the lower-case name of k ("message", "receipt", …) or "kind(N)".
func (k Kind) String() string {
	if k.Valid() {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Valid reports whether k is a kind this version knows. A client that receives an entry of an
// unknown kind stores it (its position counts) and otherwise ignores it.
func (k Kind) Valid() bool { return k >= KindMessage && k <= KindReaction }

// Role is a member's rank in a group (§4 of docs/PROTOCOL.md): the creator is the owner; the
// owner names admins ([SetRole]); the owner and admins add members and remove those ranked below
// them; anyone may leave, the owner last or after giving ownership away. Wire values: never
// renumber them.
type Role uint8

// Roles, lowest first.
const (
	RoleMember Role = 1
	RoleAdmin  Role = 2
	RoleOwner  Role = 3
)

var roleNames = [...]string{"", "member", "admin", "owner"}

// Valid reports whether r is a role this version knows.
func (r Role) Valid() bool { return r >= RoleMember && r <= RoleOwner }

// String returns "member", "admin", "owner" or "role(N)".
func (r Role) String() string {
	if r.Valid() {
		return roleNames[r]
	}
	return "role(" + strconv.Itoa(int(r)) + ")"
}

// Member is one member of a group and its role, in a [MembersResult].
type Member struct {
	User string `msgpack:"user"`
	Role Role   `msgpack:"role"`
}

// ConvKind says whether a conversation is between two users or a group. Wire values: never
// renumber them.
type ConvKind uint8

// Conversation kinds.
const (
	ConvDirect ConvKind = 1
	ConvGroup  ConvKind = 2
)

// String returns "direct", "group" or "conv_kind(N)".
func (k ConvKind) String() string {
	switch k {
	case ConvDirect:
		return "direct"
	case ConvGroup:
		return "group"
	}
	return "conv_kind(" + strconv.Itoa(int(k)) + ")"
}

// Entry is one entry of a user log (in [Batch]) or of a conversation log (in [HistoryResult]).
// Seq is its position in the log it was read from: the user log's seq in a Batch, the
// conversation's conv_seq in a HistoryResult. Fields that do not apply to the entry's kind are
// zero (and absent on the wire).
//
// ConvSeq is 0 for the one entry that has no conversation position (revision 6): the user's own
// receipt (KindReceipt) in a large group. It is not a conversation entry, since everything in a
// large group's log reaches every member that follows it, but reaches only the reader's own
// devices, as an entry of its user log carrying UpTo. No check of this package refuses conv_seq 0
// on an entry: such a receipt decodes, digests and re-encodes like any other.
type Entry struct {
	Seq     Position `msgpack:"seq"`      // position in the log this entry was read from
	Kind    Kind     `msgpack:"kind"`     // what the entry means
	MsgID   MsgID    `msgpack:"msg_id"`   // the conversation entry's id
	Conv    string   `msgpack:"conv"`     // conversation id
	ConvSeq Position `msgpack:"conv_seq"` // position in the conversation log; 0 for a large group's own receipt (revision 6)
	Sender  string   `msgpack:"sender"`   // user who caused the entry
	Time    int64    `msgpack:"time"`     // server time of the append, Unix nanoseconds
	Body    []byte   `msgpack:"body"`     // KindMessage: the message body, at most MaxBody bytes; KindEdit: the new body
	UpTo    Position `msgpack:"up_to"`    // KindReceipt: the sender has read up to this conv_seq; KindDelivered: its devices stored up to it
	Target  MsgID    `msgpack:"target"`   // KindRecall, KindEdit, KindReaction: the message acted on
	Members []string `msgpack:"members"`  // membership kinds: the users concerned, unless more than MaxInlineMembers
	Role    Role     `msgpack:"role"`     // KindRoleChange: the role given to Members
	// MemberCount is how many users a membership entry in a user log concerned when Members was
	// left out (more than MaxInlineMembers); 0 when Members is complete.
	MemberCount uint32 `msgpack:"member_count"`
	// Source (revision 6) marks, in a user log, the membership entry (KindGroupCreate,
	// KindMemberAdd, KindMemberRemove) that starts (create, add) or ends (remove) the user's
	// following of a large group as a source of its sync stream: after a starting entry's
	// ConvSeq the conversation's entries come from the source; a removing entry's ConvSeq is one
	// past the source's last entry for the user. False on every other entry.
	Source bool `msgpack:"source"`
	// Reaction (revision 7) is a KindReaction's reaction: 1 to MaxReactionLen bytes of
	// printable UTF-8 (an emoji, or a name the app defines).
	Reaction string `msgpack:"reaction"`
	// Remove (revision 7) is set on a KindReaction that takes Reaction off.
	Remove bool `msgpack:"remove"`
	// Folded (revision 7) is set on a user log's entry that a later entry of the same log
	// supersedes: that entry's seq. The folded entry keeps its kind, ids, positions, sender,
	// time and Target, and has no Body, UpTo, Reaction or Remove: store it (its position
	// counts) and take the state from the later entry (docs/PROTOCOL.md §5, "Folded entries").
	Folded Position `msgpack:"folded"`
	// BodyHash (revision 7) is a folded entry's SHA-256 of the body it no longer carries (absent
	// if it had none); a digest hashes it in place of the body (AppendDigestRecord).
	BodyHash []byte `msgpack:"body_hash"`
}

// MaxReactionLen is the longest Reaction, in bytes.
const MaxReactionLen = ident.MaxReactionLen

// ValidReaction reports whether s may be sent as a reaction: 1 to MaxReactionLen bytes of valid
// UTF-8 with no control characters and no spaces, and something visible (the server's rule).
func ValidReaction(s string) bool { return ident.ValidReaction(s) }

// ConvInfo describes one conversation as the requesting user sees it: what a client needs to
// rebase (jump to the head without replaying history) and to page history.
type ConvInfo struct {
	Conv     string   `msgpack:"conv"`      // conversation id
	Kind     ConvKind `msgpack:"kind"`      // direct or group
	Epoch    Epoch    `msgpack:"epoch"`     // the conversation log's epoch
	First    Position `msgpack:"first"`     // first retained conv_seq
	Head     Position `msgpack:"head"`      // last conv_seq (First-1 when nothing is retained)
	Members  []string `msgpack:"members"`   // current members, sorted: all when MemberCount <= MaxInlineMembers, else none
	ReadMark Position `msgpack:"read_mark"` // highest conv_seq the requesting user marked read
	// MemberCount is the number of members; page them with [Members] when Members is empty.
	MemberCount uint32 `msgpack:"member_count"`
	Role        Role   `msgpack:"role"` // the requesting user's role (groups; RoleMember in a direct conversation)
	// DeliveredMark (revision 5) is the highest conv_seq one of the requesting user's devices
	// has stored, as far as the server has recorded it (at least ReadMark).
	DeliveredMark Position `msgpack:"delivered_mark"`
	// PeerDelivered (revision 5) is, in a direct conversation, the other member's delivered
	// mark: the requesting user's messages up to it are delivered. 0 in a group, whose counts
	// are asked for with [Receipts].
	PeerDelivered Position `msgpack:"peer_delivered"`
	// PeerRead (revision 5) is, in a direct conversation, the other member's read mark: the
	// requesting user's messages up to it are read. 0 in a group.
	PeerRead Position `msgpack:"peer_read"`
	// Source (revision 6) is set for a large group: the user follows its conversation log as a
	// source of its sync stream (SyncStart.Sources) instead of getting its entries in the user
	// log.
	Source bool `msgpack:"source"`
}

// ValidID reports whether s may be used as a user, device, conversation or client message id:
// 1 to MaxIDLen bytes of printable ASCII except space (0x21 to 0x7e). It is the storage core's
// rule (package ident, shared by both).
func ValidID(s string) bool { return ident.Valid(s) }

// DirectConv returns the id of the direct conversation of users a and b, in either order: the
// only id under which the server creates it (§4). It returns "" if a or b is not a valid id or
// a == b.
func DirectConv(a, b string) string { return ident.DirectConv(a, b) }
