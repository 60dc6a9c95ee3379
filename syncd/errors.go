package syncd

import (
	"errors"
	"log/slog"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/auth"
)

// errorCodes is the one table that maps internal errors to wire codes, with the retry-after the
// client is told when the condition is known to last a while. Anything not listed is
// CodeInternal, and is logged: a client never sees an internal error's text.
var errorCodes = []struct {
	err        error
	code       proto.Code
	retryAfter time.Duration
}{
	{log.ErrInvalid, proto.CodeInvalidArgument, 0},
	{log.ErrConflict, proto.CodeConflict, 0},
	{log.ErrNoConversation, proto.CodeNoConversation, 0},
	{log.ErrConversationExists, proto.CodeConversationExists, 0},
	{log.ErrNotMember, proto.CodeNotMember, 0},
	{log.ErrNotGroup, proto.CodeNotGroup, 0},
	{log.ErrNotPermitted, proto.CodeNotPermitted, 0},
	{log.ErrGroupFull, proto.CodeGroupFull, 0},
	{log.ErrNoMessage, proto.CodeNoMessage, 0},
	{log.ErrNotSender, proto.CodeNotSender, 0},
	{log.ErrRecallWindow, proto.CodeRecallWindow, 0},
	{log.ErrAlreadyRecalled, proto.CodeAlreadyRecalled, 0},
	// The user's log is moving between shards: its writes pause for the move's switch, well
	// under a second; a read that reached the shard it is leaving or entering is asked again.
	{log.ErrMoving, proto.CodeUnavailable, moveRetry},
	{log.ErrMoved, proto.CodeUnavailable, moveRetry},
	{auth.ErrTokenExpired, proto.CodeTokenExpired, 0},
	{auth.ErrTokenInvalid, proto.CodeUnauthenticated, 0},
	{raftstore.ErrNotLeader, proto.CodeUnavailable, 0},
	// This node is cut off from the shard's group (or the group has no quorum): refused at once,
	// not at RequestTimeout, so the client retries after a second or moves to another node.
	{raftstore.ErrNoLeader, proto.CodeUnavailable, noLeaderRetry},
	{raftstore.ErrNoShard, proto.CodeUnavailable, 0},
	{raftstore.ErrShutdown, proto.CodeUnavailable, 0},
	{raftstore.ErrTimeout, proto.CodeTimeout, 0},
	{raftstore.ErrLeadershipLost, proto.CodeTimeout, 0},
	{raftstore.ErrUnreachable, proto.CodeTimeout, 0}, // forwarded, outcome unknown: retry, dedup decides
	{raftstore.ErrLowDisk, proto.CodeUnavailable, lowDiskRetryAfter},
}

// moveRetry is the retry-after of a write that met a user's log moving: the pause of a move.
const moveRetry = 200 * time.Millisecond

// noLeaderRetry is the retry-after of a refusal for want of a leader: about an election's length,
// after which the shard may have one again (or the client has moved on).
const noLeaderRetry = time.Second

// lowDiskRetryAfter is the retry_after_ms of a write refused because the node is low on disk
// space: that lasts until retention or an operator frees space, minutes rather than
// milliseconds, and the node checks its free space every second.
const lowDiskRetryAfter = 10 * time.Second

// wireError turns err into the Error frame for request id, logging what clients do not see.
func wireError(logger *slog.Logger, id uint64, err error) *proto.Error {
	var pe *proto.Error
	if errors.As(err, &pe) {
		out := *pe
		out.ID = id
		return &out
	}
	for _, e := range errorCodes {
		if errors.Is(err, e.err) {
			out := &proto.Error{ID: id, Code: e.code, Message: err.Error()}
			if e.retryAfter > 0 {
				out.RetryAfterMs = retryAfterMs(e.retryAfter)
			}
			return out
		}
	}
	logger.Error("internal error answering a request", "id", id, "err", err)
	return &proto.Error{ID: id, Code: proto.CodeInternal, Message: "internal error; it was logged on the server"}
}
