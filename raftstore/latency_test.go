package raftstore_test

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestLatencyMetrics: after a node has taken a few proposals, each of its latency histograms —
// the Raft log's durable writes, the applies, the leader's commits and Pebble's write-ahead log
// fsyncs — has observations, in seconds (a sum far below the count times a second: Pebble's own
// histogram is in nanoseconds, which the export converts).
func TestLatencyMetrics(t *testing.T) {
	n := startSingle(t, t.TempDir(), nil)
	defer n.Close()
	for i := range 5 {
		propose(t, n, send("d:alice:bob", "alice", fmt.Sprint("m", i), "hello", "alice", "bob"))
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(n.Collectors()...)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range families {
		h := f.GetMetric()[0].GetHistogram()
		if h == nil || h.GetSampleCount() == 0 {
			t.Errorf("%s: no observations", f.GetName())
			continue
		}
		if avg := h.GetSampleSum() / float64(h.GetSampleCount()); avg <= 0 || avg > 1 {
			t.Errorf("%s: mean %v s, want a time in seconds below one", f.GetName(), avg)
		}
		seen[f.GetName()] = true
	}
	for _, name := range []string{"syncd_raft_log_write_seconds", "syncd_raft_apply_seconds", "syncd_raft_commit_seconds", "syncd_pebble_wal_fsync_seconds"} {
		if !seen[name] {
			t.Errorf("%s is missing", name)
		}
	}
	if got, err := testutil.GatherAndCount(reg, "syncd_raft_commit_seconds"); err != nil || got != 1 {
		t.Errorf("syncd_raft_commit_seconds: %d series, %v; want one for the whole node", got, err)
	}
}
