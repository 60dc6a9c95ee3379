package client

import (
	"time"

	"github.com/syncd-dev/syncd/proto"
)

// Event is something the app should know about: a new entry, a status change of a sent message, a
// repaired gap, a rebase, a stored range found differing from the server's, whether the device is
// connected, whether syncing works or the serving node is stale. Events arrive on Client.Events
// in the order they happened.
type Event interface{ isEvent() }

// EntryEvent: an entry of the user's log was stored locally (a message, receipt, recall or
// membership change, from this device or any other). Sub is the sub-log it came in, for a user
// whose stream an operator split (0 otherwise): Entry.Seq is a position of that sub-log. Each
// conversation's entries come in one sub-log, in order; there is no order across sub-logs, as
// there is none across conversations.
//
// Source, when set, says the entry came instead from a source of the sync stream: the
// conversation log of that large group, which the device follows directly rather than through
// the user's log (PROTOCOL §6 "Sources", revision 6). Entry.Seq is then its conv_seq and Sub is
// 0. A large group's entries come from its source, in conversation order, except those that
// concern the user's own membership (Entry.Source set: where the following starts and ends) and
// the user's own receipts there (conv_seq 0), which come in the user's log.
type EntryEvent struct {
	Entry  proto.Entry
	Sub    uint32
	Source string
}

// StatusEvent: a queued mutation changed status: Sent (with the server's Ack) or Failed (with
// the reason; the app may queue it again); or a message of this user's, sent from this device or
// another, took a step beyond sent: Delivered (a device of another member stored it) or Read
// (another member read it). Each step comes once, in order — a message whose read mark arrives
// first gets Delivered and then Read — and never after a restart for a step already reported.
// In a group one other member suffices; Client.Receipts gives the counts.
type StatusEvent struct {
	ClientMsgID string // the id Send returned; "" for a Delivered or Read step of a message another device sent
	Status      Status
	Ack         *proto.Ack // when Sent
	Err         error      // when Failed
	// The message, for Delivered and Read (the Ack says it for Sent).
	Conv    string
	ConvSeq proto.Position
	MsgID   proto.MsgID
}

// DeliveryEvent: User, another member of Conv, moved a mark: its devices have stored Conv up
// to UpTo (State StatusDelivered), or it has read it up to UpTo (State StatusRead; a read mark
// moves the delivered mark too, and that comes first). The SDK learns marks from the
// KindDelivered and KindReceipt entries of the user's log; in a group of more members than the
// server's status_fanout_limit (100) no delivered entry is sent (the counts are: Receipts).
// Marks only move forward; each move comes once.
type DeliveryEvent struct {
	Conv  string
	User  string
	State Status // StatusDelivered or StatusRead
	UpTo  proto.Position
}

// GapEvent: a batch did not continue the stored cursor (or a source ended beyond it); the SDK
// discarded it and refetched from the cursor. Nothing was skipped.
type GapEvent struct {
	At     proto.Position
	Sub    uint32 // the sub-log (0 unless the user's stream is split)
	Source string // the source (a large group's conversation id; At is a conv_seq), "" for the user's log
}

// RebaseEvent: the stored cursor was too old (trimmed) or further behind than Config.Ceiling, so
// the SDK did not replay the entries in between: it loaded every conversation's state (members,
// this user's read mark) and, where the device's copy was behind, its latest entries
// (Config.RebaseHistory) into the local store, then moved the cursor to Head. Convs are the
// conversations it loaded: refresh their views (Messages, Members, ReadMark). Entries older than
// what it loaded are not stored; History fetches them on demand.
//
// Source, when set, names the one source (a large group) that jumped instead, alone, after its
// own TooOld or Rebase: Convs is that conversation, and Epoch and Head are its conversation
// log's. A rebase of the user's log moves the cursors of the large groups it loads too.
type RebaseEvent struct {
	Epoch  proto.Epoch
	Head   proto.Position
	Sub    uint32   // the sub-log that jumped (0 unless the user's stream is split)
	Source string   // the source that jumped, "" for the user's log
	Convs  []string // the conversations whose state and recent history were loaded, in id order
}

// EpochEvent: the user's log was re-created (for example restored from a backup); the SDK
// resynced it from the start of the new epoch, keeping local history. With Source set, it was
// that large group's conversation log, resynced from its first retained entry. A log restored
// from a backup that holds everything the device stored is not resynced and raises no event: the
// cursor takes the new epoch at its position (PROTOCOL §8.4, EpochChanged with continues).
type EpochEvent struct {
	Epoch  proto.Epoch
	Sub    uint32 // the sub-log re-created (0 unless the user's stream is split)
	Source string // the source re-created (a large group's conversation id), "" for the user's log
}

// SourceEndEvent: the device no longer follows the large group Source (PROTOCOL §6 "Sources"):
// the user was removed from it, at Last+1 — the removal itself comes in the user's log, as an
// EntryEvent — and the device has stored every entry of it up to Last that was the user's. If
// the user is added again, the group's entries come again from its source.
type SourceEndEvent struct {
	Source string
	Last   proto.Position
}

// MismatchEvent: what the device stored of positions From..To of sub-log Sub of the user's log
// (in Epoch) differs from what the server holds there — the digests of the range differ
// (PROTOCOL §8.7): a storage bug, a database restored from a backup or changed by hand. The SDK
// reported it to the server, dropped its stored entries from From on and refetches them: they
// come again as EntryEvents and replace the stored copies of their messages, so refresh the
// views of the conversations they name. Sub is 0 unless the user's stream is split.
//
// GaveUp: the range still differed after that refetch. The SDK keeps what the server sent, does
// not report or refetch the range again (it would loop) and logs an error: a bug of the store or
// of the server, worth reporting to syncd's developers with the time (the server logged the first
// report with the user and the device).
type MismatchEvent struct {
	Sub      uint32
	Epoch    proto.Epoch
	From, To proto.Position
	GaveUp   bool
}

// SyncedEvent: the device has stored the user's log up to the head the server reported (Epoch,
// Head): it is caught up. It comes once per sync stream when the stream catches up (after the
// first Heartbeat or the Batch that reaches the head), and again after the device fell behind; a
// steady stream of new entries shows as EntryEvents only. It also means syncing works again
// after a SyncFailedEvent. For a split user's stream it comes once every sub-log the device knows
// has caught up, and for a user in large groups once every source the stream serves has too;
// Epoch and Head are the user's own log's (sub-log 0).
type SyncedEvent struct {
	Epoch proto.Epoch
	Head  proto.Position
}

// StaleEvent: the node serving this device cannot currently prove the head of the user's log —
// its replica has not heard from the log's shard leader for Unheard (the node is cut off from the
// rest of the cluster, or the cluster has lost its quorum) — so new entries may arrive late. Head
// is the last head that node knows. Show the user that the app is connecting rather than up to
// date; a SyncedEvent says when it is current again. The SDK keeps the stream, and after
// Config.StaleFailover moves to another node of Config.Addrs if there is one. It comes once per
// such episode. Source, when set, says the replica is one of that large group's conversation log,
// whose epoch and head Epoch and Head then are (a source of the sync stream, revision 6).
type StaleEvent struct {
	Epoch   proto.Epoch
	Head    proto.Position
	Unheard time.Duration
	Source  string
}

// SyncFailedEvent: syncing has failed Failures times in a row (SyncFailureThreshold or more)
// without any progress — connections that could not be made, or ended before their sync stream
// stored a batch or heard a heartbeat — most recently with Err. The SDK keeps trying, with a
// backoff growing to 30 s, and sends one such event per further failure, until a SyncedEvent
// says it works again. Causes that persist are worth showing the user: a token the server
// refuses (Err is an *proto.Error with CodeUnauthenticated or CodeTokenExpired), a server that
// cannot be reached, frames beyond the announced max_frame (a server bug or a hostile relay),
// a local store that fails.
type SyncFailedEvent struct {
	Err      error
	Failures int
}

// ConnectedEvent: the SDK is connected to the node at Addr and authenticated (Welcome): queued
// mutations are being sent and the sync stream is starting; the online-only queries (History,
// Conversations, FetchMembers) work until an OfflineEvent. Resumed says the TLS handshake resumed
// an earlier session with that node (a cheaper reconnect). It comes once per connection.
type ConnectedEvent struct {
	Addr    string
	Resumed bool
}

// OfflineEvent: the SDK has no connection: the one it had ended, or (for a Client from Open) its
// first attempt failed. Err says why. It keeps trying on its own, with backoff; meanwhile the
// local store is readable, mutations queue in the outbox, and the online-only queries return
// ErrOffline. It comes once per lost connection, not at every failed redial (SyncFailedEvent
// reports those that persist); a ConnectedEvent ends the episode.
type OfflineEvent struct {
	Err error
}

// SyncFailureThreshold is the number of failed attempts in a row after which the SDK reports a
// SyncFailedEvent: a single dropped connection is routine and only delays; three in a row, with
// the backoff between them (1.5 to 2.25 s after the first), is not.
const SyncFailureThreshold = 3

func (EntryEvent) isEvent()    {}
func (StatusEvent) isEvent()   {}
func (DeliveryEvent) isEvent() {}
func (GapEvent) isEvent()      {}
func (RebaseEvent) isEvent()   {}
func (EpochEvent) isEvent()    {}

func (SourceEndEvent) isEvent() {}

func (MismatchEvent) isEvent() {}

func (SyncedEvent) isEvent()     {}
func (StaleEvent) isEvent()      {}
func (SyncFailedEvent) isEvent() {}
func (ConnectedEvent) isEvent()  {}
func (OfflineEvent) isEvent()    {}
