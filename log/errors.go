package log

import (
	"errors"
	"fmt"
)

// Sentinel errors returned by [Tx] operations. A command that fails with one of them changes
// nothing in the shard (every check runs before the first write) and replicas agree on the
// failure, because the checks are deterministic.
var (
	// ErrInvalid reports a malformed request: a bad id, an unknown kind, a missing field.
	ErrInvalid = errors.New("log: invalid request")
	// ErrConflict reports a resend of (sender, client_msg_id, kind) whose payload differs from the
	// original: the client reused an id for a different message.
	ErrConflict = errors.New("log: client_msg_id reused with a different payload")
	// ErrNoConversation reports a conversation that does not exist.
	ErrNoConversation = errors.New("log: no such conversation")
	// ErrConversationExists reports an attempt to create a conversation that exists.
	ErrConversationExists = errors.New("log: conversation already exists")
	// ErrNotMember reports a sender that is not a member of the conversation.
	ErrNotMember = errors.New("log: sender is not a member of the conversation")
	// ErrNotGroup reports a membership change on a direct conversation.
	ErrNotGroup = errors.New("log: conversation is not a group")
	// ErrNoMessage reports a recall of a message that is not in the conversation.
	ErrNoMessage = errors.New("log: no such message in the conversation")
	// ErrNotSender reports a recall by someone other than the message's sender.
	ErrNotSender = errors.New("log: only the sender may recall a message")
	// ErrRecallWindow reports a recall after the recall window has passed.
	ErrRecallWindow = errors.New("log: recall window has passed")
	// ErrAlreadyRecalled reports a second recall of the same message.
	ErrAlreadyRecalled = errors.New("log: message already recalled")
	// ErrOutOfOrder reports a delivery batch that would skip source entries; see [OutOfOrderError].
	ErrOutOfOrder = errors.New("log: delivery batch out of order")
	// ErrNoDeadLetter reports a dead letter that does not exist (dropped or replayed already).
	ErrNoDeadLetter = errors.New("log: no such dead letter")
	// ErrCorrupt reports a stored value that does not decode. It means disk corruption or a bug,
	// never bad client input.
	ErrCorrupt = errors.New("log: corrupt value")
	// ErrNotPermitted reports a group change the sender's role does not allow (see [Role]).
	ErrNotPermitted = errors.New("log: the sender's role in the group does not allow this")
	// ErrGroupFull reports a group change that would take the group over its size limit.
	ErrGroupFull = errors.New("log: the group would exceed its size limit")
)

// ErrNotYet refuses a delivery batch holding an entry whose barrier this shard has not reached
// (Delivery.After): the entry's conversation moved, and the old home's last deliveries of it
// must be applied first. Nothing was applied; the sender retries the batch shortly.
var ErrNotYet = errors.New("log: a delivery waits for another shard's earlier deliveries")

// OutOfOrderError is returned by [Tx.Deliver] when a batch starts after the destination's
// high-water mark for its source, so applying it would skip source entries. The sender resumes
// from Mark.
type OutOfOrderError struct {
	Source ShardID
	Mark   uint64 // highest source outbox position applied so far
	Prev   uint64 // the batch's claimed predecessor
}

func (e *OutOfOrderError) Error() string {
	return fmt.Sprintf("log: delivery from shard %d out of order: batch follows %d, applied up to %d",
		e.Source, e.Prev, e.Mark)
}

// Is makes errors.Is(err, ErrOutOfOrder) true.
func (e *OutOfOrderError) Is(target error) bool { return target == ErrOutOfOrder }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// Rejected reports whether err is a refusal of the request: the command was deterministically
// refused and nothing changed. Any other error from a [Tx] operation (an I/O failure, ErrCorrupt)
// means the state machine cannot safely go on.
func Rejected(err error) bool {
	for _, s := range rejections {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// rejections lists the refusals. Their positions are RejectionCode's numbers, which nodes of
// different versions exchange: only append to this list, never reorder it.
var rejections = []error{
	ErrInvalid, ErrConflict, ErrNoConversation, ErrConversationExists, ErrNotMember, ErrNotGroup,
	ErrNoMessage, ErrNotSender, ErrRecallWindow, ErrAlreadyRecalled, ErrOutOfOrder, ErrNoDeadLetter,
	ErrNotPermitted, ErrGroupFull, ErrMoving, ErrMoved, ErrNotYet,
}

// RejectionCode returns a stable number for the refusal err wraps, for carrying it between nodes
// (raftstore forwards proposals to shard leaders); ok is false if err is not a refusal. An
// *OutOfOrderError is a refusal but carries fields: callers send those separately.
func RejectionCode(err error) (code uint8, ok bool) {
	for i, s := range rejections {
		if errors.Is(err, s) {
			return uint8(i + 1), true
		}
	}
	return 0, false
}

// RejectionFromCode rebuilds a refusal from RejectionCode's number and the original error's
// message: errors.Is matches the same sentinel and Error returns msg. An unknown code yields nil.
func RejectionFromCode(code uint8, msg string) error {
	if code == 0 || int(code) > len(rejections) {
		return nil
	}
	return &rejection{sentinel: rejections[code-1], msg: msg}
}

// rejection is a refusal rebuilt from another node's answer.
type rejection struct {
	sentinel error
	msg      string
}

func (r *rejection) Error() string { return r.msg }
func (r *rejection) Unwrap() error { return r.sentinel }
