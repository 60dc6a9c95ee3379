package proto

import (
	"strconv"
	"strings"
)

// When the server closes a connection because of an error, the QUIC CONNECTION_CLOSE carries the
// error's code as the application error code and a reason phrase of this form:
//
//	reason = [ "retry_after_ms=" 1*DIGIT "; " ] message
//
// e.g. "retry_after_ms=5000; server overloaded (handshakes from your address)". The prefix is
// there exactly when the error has a retry-after; it is the one part of a reason phrase a client
// may parse (the message is for humans). It exists because the Error frame the server writes on
// the control stream just before closing is often lost: a CONNECTION_CLOSE discards stream data
// still in flight, so a client that reads the close gets the whole error anyway.

// retryAfterKey starts the machine-readable prefix of a close reason.
const retryAfterKey = "retry_after_ms="

// maxReasonLen bounds the reason phrase CloseReason builds: a CONNECTION_CLOSE must fit one
// packet (quic-go does not split it), and the message is only for humans.
const maxReasonLen = 512

// CloseReason returns the reason phrase for a connection closed with e (see the grammar above):
// the retry-after prefix when e has one, then e's message, cut to 512 bytes.
func CloseReason(e *Error) string {
	msg := e.Message
	if e.RetryAfterMs > 0 {
		msg = retryAfterKey + strconv.FormatUint(uint64(e.RetryAfterMs), 10) + "; " + msg
	}
	if len(msg) > maxReasonLen {
		msg = msg[:maxReasonLen]
	}
	return msg
}

// ErrorFromClose returns the error a connection close stands for: the code is the QUIC
// application error code (a code beyond uint16, never sent by a server, becomes CodeInternal),
// and the reason phrase gives the retry-after and the message (CloseReason). A reason without
// the prefix, or with a malformed one, is all message.
func ErrorFromClose(code uint64, reason string) *Error {
	e := &Error{Code: CodeInternal, Message: reason}
	if code <= uint64(^uint16(0)) {
		e.Code = Code(code)
	}
	rest, ok := strings.CutPrefix(reason, retryAfterKey)
	if !ok {
		return e
	}
	digits, msg, ok := strings.Cut(rest, "; ")
	ms, err := strconv.ParseUint(digits, 10, 32)
	if !ok || err != nil || digits == "" || digits[0] == '+' {
		return e
	}
	e.RetryAfterMs, e.Message = uint32(ms), msg
	return e
}
