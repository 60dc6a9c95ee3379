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

// errorCodes is the one table that maps internal errors to wire codes. Anything not listed is
// CodeInternal, and is logged: a client never sees an internal error's text.
var errorCodes = []struct {
	err  error
	code proto.Code
}{
	{log.ErrInvalid, proto.CodeInvalidArgument},
	{log.ErrConflict, proto.CodeConflict},
	{log.ErrNoConversation, proto.CodeNoConversation},
	{log.ErrConversationExists, proto.CodeConversationExists},
	{log.ErrNotMember, proto.CodeNotMember},
	{log.ErrNotGroup, proto.CodeNotGroup},
	{log.ErrNotPermitted, proto.CodeNotPermitted},
	{log.ErrGroupFull, proto.CodeGroupFull},
	{log.ErrNoMessage, proto.CodeNoMessage},
	{log.ErrNotSender, proto.CodeNotSender},
	{log.ErrRecallWindow, proto.CodeRecallWindow},
	{log.ErrAlreadyRecalled, proto.CodeAlreadyRecalled},
	{auth.ErrTokenExpired, proto.CodeTokenExpired},
	{auth.ErrTokenInvalid, proto.CodeUnauthenticated},
	{raftstore.ErrNotLeader, proto.CodeUnavailable},
	{raftstore.ErrNoShard, proto.CodeUnavailable},
	{raftstore.ErrShutdown, proto.CodeUnavailable},
	{raftstore.ErrTimeout, proto.CodeTimeout},
	{raftstore.ErrLeadershipLost, proto.CodeTimeout},
	{raftstore.ErrUnreachable, proto.CodeTimeout}, // forwarded, outcome unknown: retry, dedup decides
	{raftstore.ErrLowDisk, proto.CodeUnavailable}, // with lowDiskRetryAfter
}

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
			if errors.Is(err, raftstore.ErrLowDisk) {
				out.RetryAfterMs = retryAfterMs(lowDiskRetryAfter)
			}
			return out
		}
	}
	logger.Error("internal error answering a request", "id", id, "err", err)
	return &proto.Error{ID: id, Code: proto.CodeInternal, Message: "internal error; it was logged on the server"}
}
