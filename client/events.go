package client

import "github.com/syncd-dev/syncd/proto"

// Event is something the app should know about: a new entry, a status change of a sent message, a
// repaired gap, a rebase. Events arrive on Client.Events in the order they happened.
type Event interface{ isEvent() }

// EntryEvent: an entry of the user's log was stored locally (a message, receipt, recall or
// membership change, from this device or any other).
type EntryEvent struct{ Entry proto.Entry }

// StatusEvent: a queued mutation changed status: Sent (with the server's Ack) or Failed (with
// the reason; the app may queue it again).
type StatusEvent struct {
	ClientMsgID string
	Status      Status
	Ack         *proto.Ack // when Sent
	Err         error      // when Failed
}

// GapEvent: a batch did not continue the stored cursor; the SDK discarded it and refetched from
// the cursor. Nothing was skipped.
type GapEvent struct{ At proto.Position }

// RebaseEvent: the stored cursor was too old (trimmed) or too far behind (ceiling); the SDK
// jumped to the head. Entries in between were not replayed: the app should refresh its
// conversation list from the server.
type RebaseEvent struct {
	Epoch proto.Epoch
	Head  proto.Position
}

// EpochEvent: the user's log was re-created (for example restored from a backup); the SDK
// resynced it from the start of the new epoch, keeping local history.
type EpochEvent struct{ Epoch proto.Epoch }

func (EntryEvent) isEvent()  {}
func (StatusEvent) isEvent() {}
func (GapEvent) isEvent()    {}
func (RebaseEvent) isEvent() {}
func (EpochEvent) isEvent()  {}
