package adminapi

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DefaultAddr is the default address of a node's admin HTTP server (DESIGN §7). It is loopback
// so that the operator endpoints, metrics, readiness and pprof are exposed only when an operator
// chooses to.
const DefaultAddr = "127.0.0.1:7380"

// Node attributes a syncd node publishes in its cluster status, so that any node can tell an
// operator where every node serves.
const (
	AttrClient = "client" // QUIC address for devices
	AttrAdmin  = "admin"  // admin HTTP address
	AttrFormat = "format" // the level of the replicated formats its build reads (syncd/formats.go)
)

// ClusterView answers GET /v1/cluster: every node of the cluster as the node asked could reach
// it, and every shard's replicas with their Raft state and lag.
type ClusterView struct {
	Node   string        `json:"node"` // the node that answered
	Nodes  []ClusterNode `json:"nodes"`
	Shards []ShardView   `json:"shards"`
	// RF is the cluster's replication factor and MapIndex the version of its cluster map.
	RF       int    `json:"rf"`
	MapIndex uint64 `json:"map_index"`
	// Moves are the moves of users' logs and conversations in progress; Overrides the users
	// and ConvOverrides the conversations pinned to a shard by a move that completed
	// (key → shard).
	Moves         []MoveView        `json:"moves,omitempty"`
	Overrides     map[string]uint32 `json:"overrides,omitempty"`
	ConvOverrides map[string]uint32 `json:"conv_overrides,omitempty"`
	// Splits are the users whose streams are split into sub-logs, with their sub-logs' shards
	// (sub-log i's at index i; the first is the user's own log's).
	Splits map[string][]uint32 `json:"splits,omitempty"`
}

// MoveView is one move of a user's log (User) or of a conversation (Conv) between shards in
// progress, at its step (copy, cutover, fence, drop: docs/MOVES.md).
type MoveView struct {
	ID   uint64 `json:"id"`
	User string `json:"user,omitempty"`
	Conv string `json:"conv,omitempty"`
	// Slots, for a slot move, is its range of hash slots, "first-last".
	Slots string `json:"slots,omitempty"`
	// Subs, for a split of User's stream, is its number of sub-logs (From is To).
	Subs    int       `json:"subs,omitempty"`
	From    uint32    `json:"from"`
	To      uint32    `json:"to"`
	Step    string    `json:"step"`
	Started time.Time `json:"started"`
}

// MoveStarted answers POST /v1/moves: the move asked for. Watch it in GET /v1/cluster.
type MoveStarted struct {
	ID    uint64 `json:"id"`
	User  string `json:"user,omitempty"`
	Conv  string `json:"conv,omitempty"`
	Slots string `json:"slots,omitempty"` // a slot move's range, "first-last"
	Subs  int    `json:"subs,omitempty"`  // a split's sub-logs (User is split; From is To)
	From  uint32 `json:"from"`
	To    uint32 `json:"to"`
}

// ClusterNode is one node: its addresses, whether it answered, and how many shards it leads.
type ClusterNode struct {
	ID         string `json:"id"`
	RaftAddr   string `json:"raft_addr"`
	ClientAddr string `json:"client_addr,omitempty"`
	AdminAddr  string `json:"admin_addr,omitempty"`
	// Format is the level of the replicated formats the node's build reads (AttrFormat); a
	// cluster writes a level's formats once every node has it.
	Format    string `json:"format,omitempty"`
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	Leads     int    `json:"leads"`              // shards it leads
	Placed    int    `json:"placed"`             // shards the cluster map places on it
	Removing  bool   `json:"removing,omitempty"` // being removed: its replicas move away
}

// ShardView is one shard: its leader, its voters, and each reachable replica's indexes.
type ShardView struct {
	Shard  uint32   `json:"shard"`
	Leader string   `json:"leader"` // "" if no reachable node leads it
	Term   uint64   `json:"term"`
	Voters []string `json:"voters"`
	Placed []string `json:"placed"` // where the cluster map wants its replicas
	Slots  int      `json:"slots"`  // hash slots it owns in the cluster map's slot table
	// SlotRanges are those slots as ranges, "first-last" (or one slot, "n"), ascending.
	SlotRanges []string `json:"slot_ranges,omitempty"`
	// Creating: added online and its Raft group has not had a leader yet.
	Creating bool          `json:"creating,omitempty"`
	Replicas []ReplicaView `json:"replicas"`
}

// ShardAdded answers POST /v1/shards: the id of the data shard added. It owns no hash slot until
// slots are moved to it.
type ShardAdded struct {
	Shard uint32 `json:"shard"`
}

// ReplicaView is one node's replica of a shard. Lag is how many entries of the leader's log it
// has not applied yet (0 without a reachable leader).
type ReplicaView struct {
	Node    string `json:"node"`
	State   string `json:"state"`
	Term    uint64 `json:"term"`
	Commit  uint64 `json:"commit"`
	Applied uint64 `json:"applied"`
	Last    uint64 `json:"last"`
	Lag     uint64 `json:"lag"`
}

// Trace limits. DefaultTraceScan bounds how many entries of each member's log a trace reads back
// from the head looking for the message (?scan=N raises it up to MaxTraceScan); a trace covers at
// most MaxTraceMembers users (?user=uid narrows it to one).
const (
	DefaultTraceScan = 1000
	MaxTraceScan     = 100_000
	MaxTraceMembers  = 1000
)

// CursorReport answers GET /v1/cursors?user=uid: the user's log on its shard, as one replica has
// it (this node's, or one on a node that hosts the shard), and the stored cursor of each device that has acknowledged one (a device that
// never acked is not listed: the server knows devices only by their cursors). Exists is false for
// a user whose log does not exist yet (nothing was ever delivered to it); Epoch is then 0.
type CursorReport struct {
	Node    string         `json:"node"` // the node whose replica of the user's shard answered
	User    string         `json:"user"`
	Shard   uint32         `json:"shard"`
	Exists  bool           `json:"exists"`
	Epoch   uint64         `json:"epoch"`
	First   uint64         `json:"first"` // first retained position
	Head    uint64         `json:"head"`  // last position; First-1 when the log is empty
	Devices []DeviceCursor `json:"devices"`
}

// DeviceCursor is one device's stored cursor. Behind is Head-Pos when the cursor is of the log's
// epoch; when it is not (the log was re-created since), Behind is null and EpochChanged is set:
// the device resyncs from scratch on its next sync — unless Continues is set too: the log was
// restored from a backup holding everything up to the cursor, and the device goes on in the new
// epoch from where it is.
type DeviceCursor struct {
	Device       string  `json:"device"`
	Epoch        uint64  `json:"epoch"`
	Pos          uint64  `json:"pos"`
	Behind       *uint64 `json:"behind"`
	EpochChanged bool    `json:"epoch_changed,omitempty"`
	Continues    bool    `json:"continues,omitempty"`
}

// TraceReport answers GET /v1/trace?msg_id=shard.index.sub: where a message lives on its home
// shard and, for each user concerned, whether it reached the user's log and which of the user's
// devices have stored it. Each part is read on a replica of its shard, wherever that is: Node
// names the node that answered for the home shard, TraceUser.Node the one for each user.
type TraceReport struct {
	Node      string `json:"node"` // the node whose replica of the home shard answered
	MsgID     string `json:"msg_id"`
	HomeShard uint32 `json:"home_shard"`
	Conv      string `json:"conv"`
	ConvKind  string `json:"conv_kind"` // "direct" or "group"
	ConvSeq   uint64 `json:"conv_seq"`
	Recalled  bool   `json:"recalled"`
	// Entry is the conversation entry, from the conversation log or, once that trimmed it, from
	// the outbox's copy; null when neither holds it any more.
	Entry  *TraceEntry `json:"entry"`
	Outbox TraceOutbox `json:"outbox"`
	Scan   int         `json:"scan"` // the most entries of each user's log read looking for the message
	// Users lists the conversation's current members and, while the outbox holds the message,
	// its recipients (who may have left since), sorted by user id.
	Users          []TraceUser `json:"users"`
	UsersTruncated bool        `json:"users_truncated,omitempty"` // more than MaxTraceMembers
}

// TraceEntry is the traced conversation entry. Bodies are not shown, only their size.
type TraceEntry struct {
	Source    string   `json:"source"` // "history" (the conversation log) or "outbox"
	Kind      string   `json:"kind"`
	Sender    string   `json:"sender"`
	Time      int64    `json:"time"` // the proposer's clock, Unix ns
	BodyBytes int      `json:"body_bytes"`
	ReadUpTo  uint64   `json:"read_up_to,omitempty"` // receipts; delivered reports: the sender's devices stored up to it
	Target    string   `json:"target,omitempty"`     // recalls
	Members   []string `json:"members,omitempty"`    // group creation and membership changes
}

// TraceOutbox is the home shard's outbox as it concerns the message. While fan-out has not
// passed the message on every destination, the outbox holds it at Pos and names its Recipients;
// once every destination's mark has passed it the record is trimmed (Retained false, Pos 0).
type TraceOutbox struct {
	First      uint64   `json:"first"`
	Head       uint64   `json:"head"`
	Retained   bool     `json:"retained"`
	Pos        uint64   `json:"pos,omitempty"`
	Recipients []string `json:"recipients,omitempty"`
}

// Statuses of a [TraceUser].
const (
	TraceDelivered    = "delivered"     // the user's log holds the message at Pos
	TracePending      = "pending"       // fan-out has not passed the message's outbox position for the user's shard yet
	TraceNotFound     = "not_found"     // fan-out passed it, but the scanned part of the log does not hold it
	TraceNotRecipient = "not_recipient" // the outbox record does not name the user (e.g. a receipt, or a later member)
	TraceUnavailable  = "unavailable"   // no replica of the user's shard could be read: neither this node nor any node hosting it answered
)

// TraceUser is the message as one user's log has it. SourceMark is the highest outbox position
// of the home shard that the user's shard has applied: once it reaches Outbox.Pos, fan-out has
// passed the message there. Devices are past the message when their cursor is of the log's epoch
// and at or after Pos.
type TraceUser struct {
	User       string        `json:"user"`
	Node       string        `json:"node,omitempty"` // the node whose replica of the user's shard answered; empty when unavailable
	Shard      uint32        `json:"shard"`
	Member     bool          `json:"member"`    // a current member of the conversation
	Recipient  *bool         `json:"recipient"` // named by the outbox record; null once it is trimmed
	Status     string        `json:"status"`    // one of the Trace… statuses
	Note       string        `json:"note,omitempty"`
	Epoch      uint64        `json:"epoch"`
	First      uint64        `json:"first"`
	Head       uint64        `json:"head"`
	Pos        uint64        `json:"pos,omitempty"` // where the user's log holds the message
	Scanned    int           `json:"scanned"`
	SourceMark uint64        `json:"source_mark"`
	Devices    []TraceDevice `json:"devices"`
}

// TraceDevice is one device of a traced user: its stored cursor and whether it is past the message.
type TraceDevice struct {
	Device string `json:"device"`
	Epoch  uint64 `json:"epoch"`
	Pos    uint64 `json:"pos"`
	Past   bool   `json:"past"`
}

// DeadLetterView is one dead letter as the admin endpoint lists it. The body is not shown, only
// its size: operators triage by ids and reason, not by reading users' messages.
type DeadLetterView struct {
	ID        string    `json:"id"`
	Source    uint32    `json:"source"`
	Dest      uint32    `json:"dest"`
	Pos       uint64    `json:"pos"`
	Users     []string  `json:"users"`
	Reason    string    `json:"reason"`
	FailedAt  time.Time `json:"failed_at"`
	MsgID     string    `json:"msg_id"`
	Conv      string    `json:"conv"`
	ConvSeq   uint64    `json:"conv_seq"`
	Kind      string    `json:"kind"`
	Sender    string    `json:"sender"`
	Time      time.Time `json:"time"`
	BodyBytes int       `json:"body_bytes"`
	// Class is the refusal's class: "retryable" (replayed automatically with backoff),
	// "permanent" (waits for an operator) or "unknown" (recorded before classes were kept).
	Class    string `json:"class"`
	Attempts uint32 `json:"attempts"` // automatic replays refused so far
	// NextTry is when the next automatic replay is due; absent when none is scheduled.
	NextTry *time.Time `json:"next_try,omitempty"`
	// GaveUp says the automatic replays ended (the cap, or a refusal not retried).
	GaveUp bool `json:"gave_up,omitempty"`
	// ArchivedAt is when it moved to the archive; absent for a held one.
	ArchivedAt *time.Time `json:"archived_at,omitempty"`
}

// DeadLetterList is the answer of GET /v1/deadletters (?archived=1: of the archive).
type DeadLetterList struct {
	Total uint64           `json:"total"` // dead letters held (or archived) by all the data shards of the cluster
	Items []DeadLetterView `json:"items"` // at most limit of them, in id order per shard, shards in order
}

// Revocation answers POST /v1/users/{uid}/devices/{dev}/revoke: every token of the device issued
// at or before Before (Unix seconds) plus the clock skew a token's issue time may have
// (auth.MaxClockSkew, 30 s: nodes accepted tokens issued that far ahead) is refused by every
// node, and its sessions are closed; a token issued later is accepted. Until (Unix seconds) is
// when the cluster forgets the revocation: by then no token it covers can be valid (Before plus
// the node's maximum token lifetime and the skew).
type Revocation struct {
	User   string `json:"user"`
	Device string `json:"device"`
	Before int64  `json:"before"`
	Until  int64  `json:"until"`
}

// OpsError is the JSON body of an admin endpoint's error answer.
type OpsError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty"` // what to do
}

// DeadLetterID names the dead letter of outbox position pos of shard src refused by shard dest:
// "<source>-<destination>-<position>", the id dlq list prints and replay and drop take.
func DeadLetterID(src, dest uint32, pos uint64) string {
	return fmt.Sprintf("%d-%d-%d", src, dest, pos)
}

// ParseDeadLetterID parses an id made by DeadLetterID.
func ParseDeadLetterID(id string) (src, dest uint32, pos uint64, err error) {
	parts := strings.Split(id, "-")
	var n [3]uint64
	if len(parts) == 3 {
		for i, p := range parts {
			if n[i], err = strconv.ParseUint(p, 10, 64); err != nil {
				break
			}
		}
	}
	if len(parts) != 3 || err != nil || n[0] > 1<<32-1 || n[1] > 1<<32-1 {
		return 0, 0, 0, fmt.Errorf("bad dead letter id %q: want <source>-<destination>-<position>, as dlq list prints", id)
	}
	return uint32(n[0]), uint32(n[1]), n[2], nil
}

// BrowserCerts answers GET /v1/webtransport/certs: the certificates a page pins to reach the node
// over WebTransport (PROTOCOL §2.3), the one served now first. Empty when the node serves a
// CA-issued certificate, which browsers trust without a pin.
type BrowserCerts struct {
	Certs []BrowserCert `json:"certs"`
}

// BrowserCert is one certificate a page pins (serverCertificateHashes).
type BrowserCert struct {
	SHA256    string    `json:"sha256"` // SHA-256 of the certificate's DER, 64 lower-case hex digits
	NotBefore time.Time `json:"not_before"`
	NotAfter  time.Time `json:"not_after"`
}

// Replica check limits (POST /v1/shards/check): a check waits DefaultCheckWait for every
// replica's checksum (?wait= sets it, up to MaxCheckWait, below the admin server's write
// timeout); a replica without one by then is reported pending, never as a mismatch.
const (
	DefaultCheckWait = 10 * time.Second
	MaxCheckWait     = 45 * time.Second
)

// Verdicts of a [ShardCheck].
const (
	CheckAgree      = "agree"      // every replica computed the same checksum and number of keys
	CheckMismatch   = "mismatch"   // two replicas hold different state at the same Raft index: see the replicas marked differs
	CheckIncomplete = "incomplete" // none differ, but some replica has no checksum (pending, missed or failed): check again
	CheckFailed     = "failed"     // the check could not be started on the shard (Error): no leader, a node of an older version…
)

// Statuses of a [ReplicaChecksum].
const (
	ReplicaMatch   = "match"   // computed, the same as a majority of the replicas (or all of them)
	ReplicaDiffers = "differs" // computed, and not what a majority computed (or no majority agrees): replace this replica
	ReplicaPending = "pending" // no checksum within the wait: still applying or computing, or its node did not answer
	ReplicaMissed  = "missed"  // applied past the check's index without a checksum at it (a snapshot, a restart, an older version): check again
	ReplicaFailed  = "failed"  // its scan failed: it could not read its own state (Note says why)
)

// ReplicaCheckReport answers POST /v1/shards/check (every data shard) and POST
// /v1/shards/{id}/check (one): for each shard, the Raft index of the check's command, at which
// every replica checksummed its state, and each replica's result. Mismatches counts the shards
// whose verdict is CheckMismatch.
type ReplicaCheckReport struct {
	Node       string       `json:"node"`    // the node that ran the check
	WaitMS     int64        `json:"wait_ms"` // how long it waited for the replicas
	Shards     []ShardCheck `json:"shards"`
	Mismatches int          `json:"mismatches"`
}

// ShardCheck is one shard's part of a [ReplicaCheckReport].
type ShardCheck struct {
	Shard   uint32 `json:"shard"`
	Index   uint64 `json:"index"`   // the check's Raft index; 0 if it was not started
	Verdict string `json:"verdict"` // one of the Check… verdicts
	Error   string `json:"error,omitempty"`
	// Replicas are the members of the shard's Raft group, by node id.
	Replicas []ReplicaChecksum `json:"replicas"`
}

// ReplicaChecksum is one replica's checksum of its state at a check's index.
type ReplicaChecksum struct {
	Node   string `json:"node"`
	Voter  bool   `json:"voter"`
	State  string `json:"state,omitempty"` // its Raft state ("leader", "follower", …) as it last answered
	Status string `json:"status"`          // one of the Replica… statuses
	// Checksum (16 hex digits) and Keys are its state's, once computed.
	Checksum string `json:"checksum,omitempty"`
	Keys     uint64 `json:"keys,omitempty"`
	// Applied is the last Raft index its state reflected when it last answered.
	Applied    uint64     `json:"applied"`
	ComputedAt *time.Time `json:"computed_at,omitempty"`
	Note       string     `json:"note,omitempty"` // why it is not a match, in words
}
