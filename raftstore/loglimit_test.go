package raftstore

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLogLimiter: the first line of a kind passes, repeats within the window are held back and
// counted, the first one after the window passes with the count; kinds are independent, and the
// kinds remembered stay bounded.
func TestLogLimiter(t *testing.T) {
	l := newLogLimiter()
	t0 := time.Unix(1000, 0)
	step := func(kind string, at time.Duration, wantOK bool, wantHeld int) {
		t.Helper()
		if ok, held := l.allow(kind, t0.Add(at)); ok != wantOK || held != wantHeld {
			t.Fatalf("allow(%q, +%v) = %v, %d; want %v, %d", kind, at, ok, held, wantOK, wantHeld)
		}
	}
	step("flush failed", 0, true, 0)
	for i := range 1000 {
		step("flush failed", time.Duration(i)*time.Millisecond, false, 0)
	}
	step("other", time.Second, true, 0)
	step("flush failed", logLimitWindow, true, 1000)
	step("flush failed", logLimitWindow+time.Second, false, 0)
	step("flush failed", 3*logLimitWindow, true, 1)
	step("flush failed", 4*logLimitWindow+time.Second, true, 0)

	for i := range 10 * logLimitKinds {
		l.allow(fmt.Sprint("kind ", i), t0.Add(time.Duration(i)*time.Second))
	}
	if len(l.kinds) > logLimitKinds {
		t.Fatalf("%d kinds remembered, bound %d", len(l.kinds), logLimitKinds)
	}
	var none *logLimiter
	if ok, _ := none.allow("x", t0); !ok {
		t.Fatal("a nil limiter held a line back")
	}
}

// TestRepeatedErrorsAreBounded: Pebble's and raft's error lines repeated as fast as they retry
// (a full disk, an unreachable peer) come out once per window, with the details of the first.
func TestRepeatedErrorsAreBounded(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	p := newPebbleLogger(logger)
	hl := newRaftLogger(logger, 3)
	for i := range 5000 {
		p.Errorf("background error: %s", fmt.Sprintf("write %06d.sst: no space left on device", i))
		hl.Error("failed to append to logs", "error", "no space left on device", "index", i)
		hl.Warn("failed to contact", "server-id", "n2", "attempt", i)
	}
	out := buf.String()
	if lines := strings.Count(out, "\n"); lines != 3 {
		t.Fatalf("15000 repeated errors made %d lines, want 3:\n%s", lines, out)
	}
	for _, w := range []string{"000000.sst", "index=0", "attempt=0", "component=pebble", "component=raft"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}
