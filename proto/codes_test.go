package proto

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
)

func TestCodes(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Codes() {
		if seen[c.String()] {
			t.Errorf("duplicate name %q", c)
		}
		seen[c.String()] = true
	}
	if len(Codes()) != len(codeNames) {
		t.Errorf("Codes() lists %d of %d codes", len(Codes()), len(codeNames))
	}
	// The numbers are on the wire: pin a few.
	for c, n := range map[Code]uint16{CodeMalformed: 1, CodeUnauthenticated: 10, CodeInvalidArgument: 20,
		CodeConflict: 30, CodeRateLimited: 40, CodeTimeout: 45, CodeInternal: 50} {
		if uint16(c) != n {
			t.Errorf("%s = %d, want %d", c, c, n)
		}
	}
	retryable := map[Code]bool{CodeRateLimited: true, CodeOverloaded: true, CodeTooManyConnections: true,
		CodeUnavailable: true, CodeTimeout: true}
	for _, c := range append(Codes(), 0, 999) {
		if c.Retryable() != retryable[c] {
			t.Errorf("%s.Retryable() = %v", c, c.Retryable())
		}
	}
	if Code(999).String() != "code(999)" || Code(999).Known() || Code(0).Known() {
		t.Error("unknown codes misdescribed")
	}
}

func TestErrorMatching(t *testing.T) {
	err := fmt.Errorf("sending: %w", &Error{ID: 3, Code: CodeNotMember, Message: "bob is not in g1"})
	if !errors.Is(err, &Error{Code: CodeNotMember}) || errors.Is(err, &Error{Code: CodeNotSender}) {
		t.Error("errors.Is compares codes wrongly")
	}
	if !IsCode(err, CodeNotMember) || IsCode(err, CodeInternal) || IsCode(io.EOF, CodeInternal) {
		t.Error("IsCode")
	}
	if errors.Is(err, (*Error)(nil)) {
		t.Error("matches a nil *Error")
	}
	for e, want := range map[error]Code{
		err: CodeNotMember, nil: 0, io.EOF: CodeInternal,
		fmt.Errorf("x: %w", ErrMalformed): CodeMalformed, ErrUnknownType: CodeUnknownFrame,
		ErrFrameTooLarge: CodeFrameTooLarge, ErrBadVersion: CodeUnsupportedVersion,
	} {
		if got := CodeOf(e); got != want {
			t.Errorf("CodeOf(%v) = %s, want %s", e, got, want)
		}
	}
}

func TestErrorText(t *testing.T) {
	e := Errorf(CodeRateLimited, "%d sends/s", 60)
	e.RetryAfterMs = 1500
	if got := e.Error(); got != "proto: rate_limited: 60 sends/s (retry after 1500ms)" {
		t.Errorf("Error() = %q", got)
	}
	if e.RetryAfter() != 1500*time.Millisecond {
		t.Errorf("RetryAfter() = %v", e.RetryAfter())
	}
	if got := (&Error{Code: CodeInternal}).Error(); got != "proto: internal" {
		t.Errorf("Error() = %q", got)
	}
}
