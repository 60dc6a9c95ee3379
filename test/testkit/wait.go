package testkit

import (
	"testing"
	"time"
)

// Polling intervals of Wait: the first polls come quickly, so in-process conditions are seen
// within milliseconds, and the interval then grows so a condition that costs an HTTP round trip
// or a process status is not asked hundreds of times a second.
const (
	firstPoll = 10 * time.Millisecond
	maxPoll   = 100 * time.Millisecond
)

// Wait polls cond until it reports true or timeout passes; then it fails t with what (the
// condition waited for, e.g. "every node to be ready") and cond's last description of the state.
// cond is called on the calling goroutine, which must be the test's (Wait calls t.Fatalf).
func Wait(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for poll := firstPoll; ; poll = min(2*poll, maxPoll) {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if state == "" {
				t.Fatalf("timed out after %v waiting for %s", timeout, what)
			}
			t.Fatalf("timed out after %v waiting for %s; last state: %s", timeout, what, state)
		}
		time.Sleep(poll)
	}
}

// WaitTrue is Wait for a condition with nothing to say about the state it saw.
func WaitTrue(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Wait(t, timeout, what, func() (bool, string) { return cond(), "" })
}
