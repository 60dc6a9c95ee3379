package log

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/syncd-dev/syncd/proto/ident"
)

// ShardID names one shard (one Raft group). Shard IDs are never reused, which is what makes
// [MsgID]s derived from them unique forever.
type ShardID uint32

// Position is a place in a log: the first entry is at 1, the next at 2, and so on without holes.
// Zero means "before the first entry".
type Position uint64

// Epoch identifies one incarnation of a log. It is fixed when the log is created and changes only
// if the log is re-created (for example restored from a backup), so a cursor taken from another
// incarnation can be told apart. Zero means "unknown" in a [Cursor] and "no log yet" in a read.
type Epoch uint64

// Cursor is a device's place in a log: the last position it has stored, and the epoch that
// position belongs to.
type Cursor struct {
	Epoch Epoch
	Pos   Position
}

// Stamp identifies the command being applied: its Raft index and the proposer's clock (Unix
// nanoseconds) carried inside the command. Every time-dependent decision (dedup expiry, recall
// window, retention by age) uses Time, never the local clock, so replicas agree.
type Stamp struct {
	Index uint64
	Time  int64
}

// MsgID is the server-assigned, globally unique id of a conversation entry. It is derived from the
// shard that assigned it and the Raft index of the command, so every replica computes the same id
// and no id is ever reused (shard IDs are never reused and Raft indexes only grow). Sub numbers
// entries created by the same command and is zero today.
type MsgID struct {
	Shard ShardID
	Index uint64
	Sub   uint32
}

// IsZero reports whether id is the zero MsgID, which no entry ever has.
func (id MsgID) IsZero() bool { return id == MsgID{} }

// String formats id as "shard.index.sub", the form syncctl prints and ParseMsgID reads.
func (id MsgID) String() string {
	return fmt.Sprintf("%d.%d.%d", id.Shard, id.Index, id.Sub)
}

// ParseMsgID parses the form produced by [MsgID.String].
func ParseMsgID(s string) (MsgID, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return MsgID{}, fmt.Errorf("log: bad msg id %q: want shard.index.sub", s)
	}
	shard, err1 := strconv.ParseUint(parts[0], 10, 32)
	index, err2 := strconv.ParseUint(parts[1], 10, 64)
	sub, err3 := strconv.ParseUint(parts[2], 10, 32)
	if err1 != nil || err2 != nil || err3 != nil || index == 0 {
		return MsgID{}, fmt.Errorf("log: bad msg id %q: want shard.index.sub", s)
	}
	return MsgID{Shard: ShardID(shard), Index: index, Sub: uint32(sub)}, nil
}

// appendMsgID appends the 16-byte fixed-width big-endian form of id.
func appendMsgID(b []byte, id MsgID) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(id.Shard))
	b = binary.BigEndian.AppendUint64(b, id.Index)
	return binary.BigEndian.AppendUint32(b, id.Sub)
}

// Kind says what a log entry means.
type Kind uint8

// Entry kinds. Values are persisted: never renumber them.
const (
	KindMessage      Kind = 1 // a message with a body
	KindReceipt      Kind = 2 // the sender has read the conversation up to ReadUpTo
	KindRecall       Kind = 3 // the sender recalls its message Target
	KindGroupCreate  Kind = 4 // a group was created with Members
	KindMemberAdd    Kind = 5 // Members joined the group
	KindMemberRemove Kind = 6 // Members left or were removed from the group
	KindRoleChange   Kind = 7 // the owner gave Members the role Role
	// KindDelivered: the sender's devices have stored the conversation up to ReadUpTo (one
	// device suffices: delivery is what a device acked). Only the server's delivery reporter
	// appends it ([Shard.DeliveryDue]); it takes a conv_seq like a receipt.
	KindDelivered Kind = 8
	// KindEdit: the sender replaces the Body of its message Target (only a message's author
	// edits it, and not once it is recalled). Every member receives it, like the message.
	KindEdit Kind = 9
	// KindReaction: the sender puts Reaction on the message Target, or takes it back (Remove).
	// The last reaction entry of a (Target, sender, Reaction) in conversation order says
	// whether it is on, so a repeat changes nothing a reader shows. Every member receives it.
	KindReaction Kind = 10
)

var kindNames = [...]string{"", "message", "receipt", "recall", "group_create", "member_add", "member_remove", "role_change", "delivered", "edit", "reaction"}

// String returns the lower-case name of k ("message", "receipt", …).
func (k Kind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return k >= KindMessage && k <= KindReaction }

// Targeted reports whether k acts on an earlier message named by Target (recall, edit,
// reaction).
func (k Kind) Targeted() bool { return k == KindRecall || k == KindEdit || k == KindReaction }

// Membership reports whether k changes who is in a group or what they may do.
func (k Kind) Membership() bool { return k >= KindGroupCreate && k <= KindRoleChange }

// Role is a member's rank in a group. The creator is its owner; the owner names admins; owners
// and admins add members and remove those ranked below them; anyone may leave. Values are
// persisted and sent on the wire: never renumber them.
type Role uint8

// Roles, lowest first.
const (
	RoleMember Role = 1
	RoleAdmin  Role = 2
	RoleOwner  Role = 3
)

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return r >= RoleMember && r <= RoleOwner }

var roleNames = [...]string{"", "member", "admin", "owner"}

// String returns the lower-case name of r ("member", "admin", "owner").
func (r Role) String() string {
	if r.Valid() {
		return roleNames[r]
	}
	return "role(" + strconv.Itoa(int(r)) + ")"
}

// MaxInlineMembers is the most members a membership entry carries into user logs and a
// conversation's state carries inline. A larger list stays in the conversation log only (and is
// paged with [Shard.MembersAfter]); the copies say how many there were. Without the cap, building
// a group of n members would write n copies of an n-member list: O(n²) bytes.
const MaxInlineMembers = 32

// ConvKind says whether a conversation is between two users or a group.
type ConvKind uint8

// Conversation kinds. Values are persisted.
const (
	ConvDirect ConvKind = 1
	ConvGroup  ConvKind = 2
)

// Entry is one entry of a conversation log or of a user log. The fields common to both describe
// the conversation entry; Seq is the position in the log the entry was read from (the conversation
// log's ConvSeq for conversation reads, the user log's seq for user reads).
//
// Entries returned by reads are owned by the caller.
type Entry struct {
	Seq      Position // position in the log this entry was read from
	Kind     Kind
	MsgID    MsgID
	Conv     string
	ConvSeq  Position // position in the conversation log
	Sender   string
	Time     int64    // proposer's clock when the conversation entry was appended (Unix ns)
	Body     []byte   // message body (KindMessage), the new body (KindEdit)
	ReadUpTo Position // KindReceipt: read up to this ConvSeq; KindDelivered: stored up to it
	Target   MsgID    // KindRecall, KindEdit, KindReaction: the message acted on
	Reaction string   // KindReaction: the reaction put on (or taken off) Target
	Remove   bool     // KindReaction: Reaction is taken off
	Members  []string // membership kinds: the users concerned (left out of copies over MaxInlineMembers)
	Role     Role     // KindRoleChange: the role given to Members
	// MemberCount is how many users a membership entry concerned when Members is not all of
	// them (more than MaxInlineMembers): empty in a user log's copy, cut to one destination's
	// recipients in a delivery (CopyFor). Zero when Members is complete.
	MemberCount int
	// Source marks a membership entry of a large group (read diffusion, LargeGroupThreshold)
	// that starts (KindGroupCreate, KindMemberAdd) or ends (KindMemberRemove) the following of
	// the conversation log by the users who receive it in their logs: their devices read the
	// group's other entries from the conversation log itself (entryV3).
	Source bool
	// Folded is set on a user log's copy that a later entry of the same log supersedes (a
	// receipt or delivered report by a later one of the same reader, an edit by a later edit or
	// the recall of its message, a reaction by a later one of the same reaction): the position
	// of that later entry. A folded copy keeps its kind, ids, positions, sender, time and
	// Target, and drops its payload (Body, ReadUpTo, Reaction, Remove): the position is still
	// answered, explicitly, and costs a few dozen bytes (fold.go).
	Folded Position
	// BodyHash is a folded copy's SHA-256 of the Body it dropped (none if it had none), so that
	// a digest of the log is the same whether a device stored the copy before or after the
	// fold (proto.AppendDigestRecord).
	BodyHash []byte
}

// CopyFor returns the copy of e for recipients users of one destination shard (sorted, as an
// outbox item's recipients are). A membership entry concerning more than MaxInlineMembers users
// names only those among users, and says in MemberCount how many it concerned in all: a group
// of n members then costs O(n) bytes of deliveries, not n per destination, and each destination
// still learns which of its users joined or left.
func (e Entry) CopyFor(users []string) Entry {
	if len(e.Members) <= MaxInlineMembers || e.MemberCount != 0 {
		return e
	}
	e.MemberCount = len(e.Members)
	// A split user's log here is one of its sub-logs: the member is the user it belongs to.
	named := users
	if slices.ContainsFunc(users, func(id string) bool { return baseUser(id) != id }) {
		named = make([]string, len(users))
		for i, id := range users {
			named[i] = baseUser(id)
		}
		slices.Sort(named)
	}
	var mine []string
	for _, m := range e.Members {
		if _, ok := slices.BinarySearch(named, m); ok {
			mine = append(mine, m)
		}
	}
	e.Members = mine
	return e
}

// groupsDelta is how the entry changes the number of groups the log's user is a member of: +1
// for a group creation or addition naming them, -1 for a removal (or leave) naming them. A split
// user's sub-logs count the groups whose entries they receive (split.go). Membership entries'
// Members are sorted.
func (e *Entry) groupsDelta(log string) int {
	if _, named := slices.BinarySearch(e.Members, baseUser(log)); !named {
		return 0
	}
	switch e.Kind {
	case KindGroupCreate, KindMemberAdd:
		return 1
	case KindMemberRemove:
		return -1
	}
	return 0
}

// userCopy is the entry as a user log stores it: a member list longer than MaxInlineMembers, or
// one already cut down by CopyFor, only as its length.
func (e Entry) userCopy() Entry {
	switch {
	case e.MemberCount != 0:
		e.Members = nil
	case len(e.Members) > MaxInlineMembers:
		e.Members, e.MemberCount = nil, len(e.Members)
	}
	return e
}

// Size is the approximate number of bytes the entry occupies, used for read byte limits.
func (e *Entry) Size() int {
	n := 64 + len(e.Conv) + len(e.Sender) + len(e.Body)
	for _, m := range e.Members {
		n += len(m) + 1
	}
	return n
}

// MaxIDLen is the longest user, device, conversation or client message id accepted.
const MaxIDLen = ident.MaxLen

// ValidID reports whether s may be used as a user, device, conversation or client message id
// (package ident holds the rule, shared with the wire protocol).
func ValidID(s string) bool { return ident.Valid(s) }

// ValidLog reports whether s names a user's log: a user id, or the id of one of its sub-logs
// ([SubLog]).
func ValidLog(s string) bool { return ident.ValidLog(s) }
