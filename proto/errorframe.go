package proto

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Error is both the Error frame (type 3) and the Go error for a refused request, so the server
// sends exactly what a check returned (setting ID) and the client returns exactly what it
// received. The server sends it on any stream: on a request stream with the id of the request
// it answers (or 0 for a frame it could not attribute, such as a malformed one); on the control
// and sync streams with id 0, usually just before closing the stream or the connection with
// the same code.
//
// Match it with errors.Is(err, &Error{Code: c}) or [IsCode]: only the code is compared.
type Error struct {
	ID           uint64 `msgpack:"id"`             // request id, or 0
	Code         Code   `msgpack:"code"`           // what went wrong; see codes.go
	Message      string `msgpack:"message"`        // for humans and logs; never parse it
	RetryAfterMs uint32 `msgpack:"retry_after_ms"` // minimum wait before retrying; 0 = none
}

// FrameType implements Frame.
func (*Error) FrameType() Type { return TypeError }

// RequestID implements Response.
func (e *Error) RequestID() uint64 { return e.ID }

// Error formats the code, the message and the retry hint.
func (e *Error) Error() string {
	s := "proto: " + e.Code.String()
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.RetryAfterMs > 0 {
		s += " (retry after " + strconv.FormatUint(uint64(e.RetryAfterMs), 10) + "ms)"
	}
	return s
}

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, &Error{Code: CodeNotMember}) matches any not_member error.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t != nil && t.Code == e.Code
}

// RetryAfter returns RetryAfterMs as a duration.
func (e *Error) RetryAfter() time.Duration {
	return time.Duration(e.RetryAfterMs) * time.Millisecond
}

// Errorf returns an *Error with code c and a formatted message.
func Errorf(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Message: fmt.Sprintf(format, args...)}
}

// IsCode reports whether err is or wraps an *Error with code c.
func IsCode(err error, c Code) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == c
}

// CodeOf returns the wire code for err: the code of an *Error it wraps, the matching code for
// the Reader's sentinels (ErrMalformed, ErrUnknownType, ErrFrameTooLarge, ErrBadVersion), and
// CodeInternal for any other error. It returns 0 for nil.
func CodeOf(err error) Code {
	var e *Error
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e.Code
	case errors.Is(err, ErrMalformed):
		return CodeMalformed
	case errors.Is(err, ErrUnknownType):
		return CodeUnknownFrame
	case errors.Is(err, ErrFrameTooLarge):
		return CodeFrameTooLarge
	case errors.Is(err, ErrBadVersion):
		return CodeUnsupportedVersion
	}
	return CodeInternal
}

// Sentinel errors of the framing layer, returned (wrapped with details) by [Reader.Next],
// [Decode] and [AppendFrame].
var (
	// ErrFrameTooLarge: a frame's declared length exceeds the reader's limit (or AppendFrame's
	// MaxFrameLimit, or the limit given to WriteFrameWithin, which then writes nothing). The
	// Reader cannot find the next frame: it returns this error from then on and the caller must
	// close the stream.
	ErrFrameTooLarge = errors.New("proto: frame too large")
	// ErrBadVersion: the frame's version byte is not FrameVersion. The frame was consumed.
	ErrBadVersion = errors.New("proto: unsupported frame version")
	// ErrUnknownType: the frame type is unknown. The frame was consumed; the stream can go on.
	ErrUnknownType = errors.New("proto: unknown frame type")
	// ErrMalformed: the body is not valid for its type (or the frame is shorter than its
	// header). The frame was consumed; the stream can go on.
	ErrMalformed = errors.New("proto: malformed frame")
)
