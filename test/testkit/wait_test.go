package testkit

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fakeTB records a Fatalf instead of failing the real test. Like testing.T's, its Fatalf ends
// the calling goroutine, so Wait must run on a goroutine of its own. Any other method of
// testing.TB panics (the embedded interface is nil): Wait must not use them.
type fakeTB struct {
	testing.TB
	fatal string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// runWait runs wait with a fakeTB on its own goroutine and returns what it reported and how
// long it took.
func runWait(wait func(tb testing.TB)) (fatal string, took time.Duration) {
	tb := &fakeTB{}
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		wait(tb)
	}()
	<-done
	return tb.fatal, time.Since(start)
}

// TestWaitSucceeds: Wait returns as soon as the condition holds, without failing.
func TestWaitSucceeds(t *testing.T) {
	calls := 0
	fatal, _ := runWait(func(tb testing.TB) {
		Wait(tb, 10*time.Second, "the third call", func() (bool, string) {
			calls++
			return calls == 3, fmt.Sprint(calls, " calls")
		})
	})
	if fatal != "" || calls != 3 {
		t.Fatalf("Wait made %d calls and reported %q", calls, fatal)
	}
}

// TestWaitTimesOut: Wait fails after the timeout, naming what it waited for and the last state.
func TestWaitTimesOut(t *testing.T) {
	calls := 0
	const timeout = 150 * time.Millisecond
	fatal, took := runWait(func(tb testing.TB) {
		Wait(tb, timeout, "the impossible", func() (bool, string) {
			calls++
			return false, fmt.Sprintf("state %d", calls)
		})
	})
	want := fmt.Sprintf("timed out after %v waiting for the impossible; last state: state %d", timeout, calls)
	if fatal != want {
		t.Fatalf("Wait reported %q, want %q", fatal, want)
	}
	if took < timeout || calls < 3 {
		t.Fatalf("Wait gave up after %v and %d calls, with a timeout of %v", took, calls, timeout)
	}
}

// TestWaitTrue: WaitTrue passes the condition through and fails without a state.
func TestWaitTrue(t *testing.T) {
	if fatal, _ := runWait(func(tb testing.TB) { WaitTrue(tb, time.Second, "true", func() bool { return true }) }); fatal != "" {
		t.Fatalf("WaitTrue on a true condition reported %q", fatal)
	}
	fatal, _ := runWait(func(tb testing.TB) { WaitTrue(tb, 50*time.Millisecond, "never", func() bool { return false }) })
	if fatal != "timed out after 50ms waiting for never" || strings.Contains(fatal, "state") {
		t.Fatalf("WaitTrue reported %q", fatal)
	}
}
