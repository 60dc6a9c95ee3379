package main

import (
	"bytes"
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/bench/peerresult"
)

// tiny are shapes small enough for a test: a few seconds per system.
var tiny = shapes{duration: 300 * time.Millisecond, writers: 4, users: 10, body: 64, subscribers: 3, rate: 50,
	catchup: 250, page: 100, conns: 2}

// TestEtcd and TestRedis run the three shapes on a real server of each kind, started and
// stopped as the scenario does, and check every shape measured something; each skips when its
// server is not installed.
func TestEtcd(t *testing.T) {
	checkShapes(t, "etcd", func(ctx context.Context) error { return measureEtcd(ctx, "etcd", 1, tiny) }, 1)
}

func TestEtcdThreeMembers(t *testing.T) {
	if testing.Short() {
		t.Skip("three etcd members")
	}
	checkShapes(t, "etcd", func(ctx context.Context) error { return measureEtcd(ctx, "etcd", 3, tiny) }, 3)
}

func TestRedis(t *testing.T) {
	checkShapes(t, "redis-server", func(ctx context.Context) error { return measureRedis(ctx, "redis-server", tiny) }, 1)
}

// TestPebble runs the shapes on raw Pebble: appends and catch-up measure, push is skipped
// (Pebble has no subscriptions) with the reason.
func TestPebble(t *testing.T) {
	rs := collect(t, func(ctx context.Context) error { return measurePebble(ctx, tiny) })
	if len(rs) != 3 {
		t.Fatalf("%d results, want one per shape: %+v", len(rs), rs)
	}
	if r := rs[0]; r.Shape != peerresult.Appends || r.Failed != "" || r.Count == 0 || r.PerSec <= 0 {
		t.Errorf("appends: %+v", r)
	}
	if r := rs[1]; r.Shape != peerresult.Push || r.Skip == "" || r.Count != 0 {
		t.Errorf("push: %+v, want skipped", r)
	}
	if r := rs[2]; r.Shape != peerresult.CatchUp || r.Failed != "" || r.Count != tiny.catchup {
		t.Errorf("catch-up: %+v, want %d entries", r, tiny.catchup)
	}
}

// collect runs run with the results going to a buffer, and reads them back.
func collect(t *testing.T, run func(context.Context) error) []peerresult.Result {
	t.Helper()
	var buf bytes.Buffer
	results = &buf
	t.Cleanup(func() { results = nil })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		t.Fatal(err)
	}
	rs, err := peerresult.Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func checkShapes(t *testing.T, bin string, run func(context.Context) error, nodes int) {
	if _, err := exec.LookPath(bin); err != nil {
		t.Skipf("%s not installed", bin)
	}
	rs := collect(t, run)
	if len(rs) != 3 {
		t.Fatalf("%d results, want one per shape: %+v", len(rs), rs)
	}
	for i, shape := range []peerresult.Shape{peerresult.Appends, peerresult.Push, peerresult.CatchUp} {
		r := rs[i]
		if r.Shape != shape || r.Failed != "" || r.Nodes != nodes || r.Count == 0 {
			t.Errorf("%s: %+v", shape, r)
		}
	}
	if rs[1].Count != int(float64(tiny.rate)*tiny.duration.Seconds()) || rs[2].Count != tiny.catchup {
		t.Errorf("push saw %d values, catch-up read %d entries", rs[1].Count, rs[2].Count)
	}
	t.Logf("%s: %.0f appends/s (p99 %v), push p99 %v, catch-up %.0f entries/s", rs[0].System, rs[0].PerSec, rs[0].P99, rs[1].P99, rs[2].PerSec)
}
