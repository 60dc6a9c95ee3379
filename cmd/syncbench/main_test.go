package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/bench"
)

// TestInProcessSends runs the sends scenario the way `syncbench -scenario sends` does: against a
// fresh in-process server, with more devices dialled than the server admits handshakes from one
// address at once (max_handshakes_per_source, 16) and than QUIC queues before the server accepts
// (32). It used to fail at once with CONNECTION_REFUSED; every device must now connect and sends
// be acked.
func TestInProcessSends(t *testing.T) {
	ctx, target := inProcessTarget(t)
	r, err := bench.Sends(ctx, target, 100, 8, 500*time.Millisecond, 64)
	if err != nil {
		t.Fatal(err)
	}
	if r.Acked == 0 || r.Errors != 0 {
		t.Fatalf("sends: %+v", r)
	}
	t.Logf("%.0f acked/s, p99 %v", r.PerSec, r.P99)
}

// TestInProcessCatchUp runs -scenario catchup's replays the way syncbench does (one backlog,
// -repeat replays, the median): every replay reads the whole backlog, in order.
func TestInProcessCatchUp(t *testing.T) {
	ctx, target := inProcessTarget(t)
	r := catchUpRow(ctx, options{catchup: 2000, repeat: 2}, target, bench.BareResult{}, func(float64) string { return "-" })
	if r.value == "FAILED" || !strings.Contains(r.note, "2000 entries") || !strings.Contains(r.note, "median of 2") {
		t.Fatalf("catch-up row: %+v", r)
	}
	t.Logf("%s: %s", r.value, r.note)
}

// inProcessTarget starts syncbench's in-process server (2 shards) for the test, stopped when it
// ends, and returns it with a context bounding the test.
func inProcessTarget(t *testing.T) (context.Context, bench.Target) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	target, _, cleanup, err := setupTarget(ctx, options{shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	return ctx, target
}
