package proto

import (
	"strings"
	"testing"
)

func TestCloseReasonRoundTrip(t *testing.T) {
	for _, e := range []*Error{
		{Code: CodeOverloaded, Message: "server overloaded (handshakes); try another node", RetryAfterMs: 1000},
		{Code: CodeTooManyConnections, Message: "user alice has 32 connections open; close one", RetryAfterMs: 5000},
		{Code: CodeTokenExpired, Message: "the token expired at 2026-01-02T03:04:05Z"},
		{Code: CodeUnauthenticated, Message: "retry_after_ms=7; not a prefix when there is no retry-after? it is"},
		{Code: CodeUnavailable, Message: "", RetryAfterMs: 1},
	} {
		reason := CloseReason(e)
		got := ErrorFromClose(uint64(e.Code), reason)
		if e.RetryAfterMs == 0 && strings.HasPrefix(e.Message, retryAfterKey) {
			// A message that looks like the prefix is read as one: servers never write such.
			if got.Code != e.Code {
				t.Errorf("%q: code %v", reason, got.Code)
			}
			continue
		}
		if *got != *e {
			t.Errorf("%q: got %+v, want %+v", reason, got, e)
		}
	}
	if got := CloseReason(&Error{Code: CodeOverloaded, RetryAfterMs: 1500, Message: "x"}); got != "retry_after_ms=1500; x" {
		t.Errorf("reason %q", got)
	}
	if got := CloseReason(&Error{Message: strings.Repeat("m", 2000)}); len(got) != maxReasonLen {
		t.Errorf("long message: reason of %d bytes", len(got))
	}
}

// TestErrorFromCloseIsLenient: a reason phrase without the prefix, or with a malformed one, is a
// message; codes beyond uint16 are internal.
func TestErrorFromCloseIsLenient(t *testing.T) {
	for reason, want := range map[string]Error{
		"bye":                              {Code: CodeOverloaded, Message: "bye"},
		"retry_after_ms=; x":               {Code: CodeOverloaded, Message: "retry_after_ms=; x"},
		"retry_after_ms=12x; x":            {Code: CodeOverloaded, Message: "retry_after_ms=12x; x"},
		"retry_after_ms=+5; x":             {Code: CodeOverloaded, Message: "retry_after_ms=+5; x"},
		"retry_after_ms=5000":              {Code: CodeOverloaded, Message: "retry_after_ms=5000"},
		"retry_after_ms=99999999999; x":    {Code: CodeOverloaded, Message: "retry_after_ms=99999999999; x"},
		"retry_after_ms=250; slow; down":   {Code: CodeOverloaded, Message: "slow; down", RetryAfterMs: 250},
		"retry_after_ms=4294967295; limit": {Code: CodeOverloaded, Message: "limit", RetryAfterMs: 4294967295},
	} {
		if got := ErrorFromClose(uint64(CodeOverloaded), reason); *got != want {
			t.Errorf("%q: got %+v, want %+v", reason, got, want)
		}
	}
	if got := ErrorFromClose(1<<20, "x"); got.Code != CodeInternal {
		t.Errorf("code 1<<20: %v", got.Code)
	}
}
