package proto

import "strconv"

// Code is an error code carried in an [Error] frame, and also used as the QUIC application
// error code when the server resets a stream or closes a connection for that reason. Codes are
// part of the wire format: never renumber or reuse one. Zero is never sent; a receiver treats
// zero and codes it does not know like [CodeInternal].
//
// "Retryable" below means: sending the same request again later (for a mutation: with the same
// client_msg_id) may succeed and is safe; [Code.Retryable] reports it. Retries always back off
// (about 1s, 3s, 7s, 15s, 30s, each plus 0–50% jitter, bounded) and wait at least the Error's
// retry_after_ms when it is set.
type Code uint16

// Framing and stream codes (1–9).
const (
	// CodeMalformed: a frame's body is not valid msgpack for its type, or a frame is shorter than
	// its header. The frame was skipped and the stream continues. Not retryable: a client bug.
	CodeMalformed Code = 1
	// CodeUnknownFrame: the frame type is unknown to the server (a newer client). The frame was
	// skipped and the stream continues. Not retryable: stop using that frame with this server.
	CodeUnknownFrame Code = 2
	// CodeFrameTooLarge: a frame's declared length exceeds the limit (DefaultMaxFrame, then
	// Welcome's max_frame). The stream cannot be resynchronised and is reset. Not retryable as
	// is: split or shrink the request.
	CodeFrameTooLarge Code = 3
	// CodeUnsupportedVersion: the frame version byte or Hello's proto_version is not supported.
	// The connection is closed. Not retryable: upgrade the client.
	CodeUnsupportedVersion Code = 4
	// CodeUnexpectedFrame: a known frame on the wrong stream or in the wrong state (a request
	// before Welcome, a second Hello or SyncStart, a server-to-client type). The stream is reset.
	// Not retryable: a client bug.
	CodeUnexpectedFrame Code = 5
	// CodeNeedsUpgrade: the request needs a protocol feature of a later revision that the
	// client did not use: a sync stream without a vector cursor (SyncStart.Subs, revision 3)
	// for a user whose stream is split into sub-logs. The stream is closed. Not retryable:
	// upgrade the client.
	CodeNeedsUpgrade Code = 6
)

// Authentication and authorisation codes (10–19).
const (
	// CodeUnauthenticated: the token is missing, malformed, badly signed or for another server.
	// The connection is closed. Not retryable: obtain a new token, then reconnect.
	CodeUnauthenticated Code = 10
	// CodeTokenExpired: the token has expired (at Hello, or later on a live connection, which is
	// then closed). Not retryable as is: refresh the token and reconnect; the outbox and the
	// sync cursor carry over.
	CodeTokenExpired Code = 11
	// CodeForbidden: the request acts as another user or device, or reads another user's log.
	// Not retryable.
	CodeForbidden Code = 12
)

// Request codes (20–39): the request was refused and changed nothing.
const (
	// CodeInvalidArgument: a field is missing or malformed (bad id, zero request id, a cursor
	// position without an epoch, a receipt beyond the conversation head). Not retryable.
	CodeInvalidArgument Code = 20
	// CodeTooLarge: a body over max_body, more than MaxMembers members, an over-long token.
	// Not retryable as is.
	CodeTooLarge Code = 21
	// CodeNotMember: the user is not a member of the conversation. Not retryable.
	CodeNotMember Code = 22
	// CodeNoConversation: the conversation does not exist (a Send to a new direct conversation
	// must name the peer). Not retryable.
	CodeNoConversation Code = 23
	// CodeConversationExists: CreateGroup for an id that exists (created by another request: a
	// resend of the original CreateGroup gets its original Ack). Not retryable: pick another id.
	CodeConversationExists Code = 24
	// CodeNotGroup: a membership change on a direct conversation. Not retryable.
	CodeNotGroup Code = 25
	// CodeNoMessage: the recall target is not a message of this conversation (or is no longer
	// retained). Not retryable.
	CodeNoMessage Code = 26
	// CodeNotSender: only a message's sender may recall it. Not retryable.
	CodeNotSender Code = 27
	// CodeRecallWindow: the recall window (measured on the server's clock) has passed. Not
	// retryable.
	CodeRecallWindow Code = 28
	// CodeAlreadyRecalled: the message was already recalled by another request. Not retryable;
	// the client may treat its recall as done.
	CodeAlreadyRecalled Code = 29
	// CodeConflict: the client_msg_id was already used by this user for the same action with a
	// different payload (within the dedup window, 24 h by default). Not retryable: it is a client
	// bug; mark the message failed and never reuse ids.
	CodeConflict Code = 30
	// CodeNotPermitted: the user's role in the group does not allow the change (adding needs an
	// admin or the owner, removing needs a higher rank, roles are the owner's, the owner leaves
	// last). Not retryable.
	CodeNotPermitted Code = 31
	// CodeGroupFull: the change would take the group over the server's size limit. Not
	// retryable as is.
	CodeGroupFull Code = 32
	// CodeTooManyGroups: a user the change adds to a group (the creator included) is already a
	// member of the server's limit of groups. Nothing was applied; the message names the user.
	// Not retryable as is: leave that user out, or the user leaves a group first.
	CodeTooManyGroups Code = 33
	// CodeTooOld: a Digest range starts below the log's first retained position: those entries
	// were trimmed by retention, and the server never answers a silently shorter range. Not
	// retryable as is: ask again from the first retained position (HeadCheck's First, ConvInfo's
	// First). Revision 4; a sync stream says the same with the TooOld frame.
	CodeTooOld Code = 34
	// CodeEpochChanged: a Digest names an epoch other than the log's: the log was re-created and
	// positions of the old epoch mean nothing in it. Not retryable as is: resync the new epoch
	// (the sync stream answers EpochChanged). Revision 4.
	CodeEpochChanged Code = 35
)

// Load and availability codes (40–49).
const (
	// CodeRateLimited: the device sends faster than send_rate_per_s. Nothing was applied.
	// Retryable after retry_after_ms.
	CodeRateLimited Code = 40
	// CodeOverloaded: the server sheds load (too many requests in flight) or refuses a handshake
	// during a reconnect storm. Nothing was applied. Retryable after retry_after_ms.
	CodeOverloaded Code = 41
	// CodeTooManyStreams: the connection has more open streams than the server allows. Not
	// retryable as is: pipeline requests on the open request streams instead. The reference
	// server never sends it: its QUIC stream limit (Limits.MaxStreams) makes a client wait.
	CodeTooManyStreams Code = 42
	// CodeTooManyConnections: the user or device has too many connections, or the node is full.
	// The connection is closed. Retryable: reconnect after retry_after_ms with backoff.
	CodeTooManyConnections Code = 43
	// CodeUnavailable: the shard concerned has no leader right now, or the node is shutting down.
	// The request may or may not have been applied. Retryable (same client_msg_id). Also: the
	// node or the shard's leader is low on disk space; then retry_after_ms is set and nothing was
	// applied (reads and syncs go on).
	CodeUnavailable Code = 44
	// CodeTimeout: the server gave up waiting for the outcome; the request may or may not have
	// been applied. Retryable: resend with the same client_msg_id, dedup returns the original
	// Ack if it was applied.
	CodeTimeout Code = 45
	// CodeSuperseded: another sync stream of the same user and device replaced this one (the
	// device reconnected, or two app instances share a device id). The stream is closed. Not
	// retryable: do not fight over the stream; a client that knows it is the only instance
	// reconnects with backoff.
	CodeSuperseded Code = 46
)

// CodeInternal (50): a server bug or storage failure. The request may or may not have been
// applied. Not retryable automatically: mark the message failed; a user-initiated resend must
// reuse the same client_msg_id.
const CodeInternal Code = 50

var codeNames = map[Code]string{
	CodeMalformed:          "malformed",
	CodeUnknownFrame:       "unknown_frame",
	CodeFrameTooLarge:      "frame_too_large",
	CodeUnsupportedVersion: "unsupported_version",
	CodeUnexpectedFrame:    "unexpected_frame",
	CodeNeedsUpgrade:       "needs_upgrade",
	CodeUnauthenticated:    "unauthenticated",
	CodeTokenExpired:       "token_expired",
	CodeForbidden:          "forbidden",
	CodeInvalidArgument:    "invalid_argument",
	CodeTooLarge:           "too_large",
	CodeNotMember:          "not_member",
	CodeNoConversation:     "no_conversation",
	CodeConversationExists: "conversation_exists",
	CodeNotGroup:           "not_group",
	CodeNoMessage:          "no_message",
	CodeNotSender:          "not_sender",
	CodeRecallWindow:       "recall_window",
	CodeAlreadyRecalled:    "already_recalled",
	CodeConflict:           "conflict",
	CodeNotPermitted:       "not_permitted",
	CodeGroupFull:          "group_full",
	CodeTooManyGroups:      "too_many_groups",
	CodeTooOld:             "too_old",
	CodeEpochChanged:       "epoch_changed",
	CodeRateLimited:        "rate_limited",
	CodeOverloaded:         "overloaded",
	CodeTooManyStreams:     "too_many_streams",
	CodeTooManyConnections: "too_many_connections",
	CodeUnavailable:        "unavailable",
	CodeTimeout:            "timeout",
	CodeSuperseded:         "superseded",
	CodeInternal:           "internal",
}

// Codes returns every code this version knows, in ascending order.
func Codes() []Code {
	var out []Code
	for c := Code(1); c <= CodeInternal; c++ {
		if c.Known() {
			out = append(out, c)
		}
	}
	return out
}

// Known reports whether c is a code this version knows.
func (c Code) Known() bool {
	_, ok := codeNames[c]
	return ok
}

// String returns the snake_case name of c ("not_member", …) or "code(N)".
func (c Code) String() string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return "code(" + strconv.Itoa(int(c)) + ")"
}

// Retryable reports whether the same request (for a mutation, with the same client_msg_id) may
// be sent again after a backoff of at least the Error's retry_after_ms: true for
// CodeRateLimited, CodeOverloaded, CodeTooManyConnections, CodeUnavailable and CodeTimeout,
// false for every other code, including unknown ones.
func (c Code) Retryable() bool {
	switch c {
	case CodeRateLimited, CodeOverloaded, CodeTooManyConnections, CodeUnavailable, CodeTimeout:
		return true
	}
	return false
}
