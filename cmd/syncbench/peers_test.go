package main

import (
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/bench"
	"github.com/syncd-dev/syncd/bench/peerresult"
)

// generatorOutput is what the peer load generator writes for a run where etcd ran and Redis was
// not installed (lines as peerresult.Write makes them), with a shape and a system failed.
const generatorOutput = `{"system":"etcd 3.4.23, 1 member","nodes":1,"shape":"appends","per_sec":16000,"p50_ns":3600000,"p99_ns":13400000,"count":160000,"errors":2,"note":"64 closed-loop writers"}
{"system":"etcd 3.4.23, 1 member","nodes":1,"shape":"push","p50_ns":720000,"p99_ns":3500000,"count":10000,"note":"200 live subscribers"}
{"system":"etcd 3.4.23, 1 member","nodes":1,"shape":"catchup","per_sec":60000,"count":100000,"note":"pages of 1000"}

{"system":"etcd 3.4.23, 3 members","nodes":3,"shape":"appends","per_sec":6000,"p50_ns":9000000,"p99_ns":28000000,"count":60000}
{"system":"etcd 3.4.23, 3 members","nodes":3,"shape":"push","failed":"a subscription failed: lost"}
{"system":"etcd 3.4.23, 5 members","nodes":5,"shape":"appends","per_sec":5000,"count":50000}
{"system":"etcd 3.4.23, 7 members","nodes":7,"failed":"not ready within 30s"}
{"system":"Redis, appendfsync always","nodes":1,"skipped":"redis-server not installed (apt-get install redis-server)"}
`

// TestPeerRows reads the generator's output and turns it into the table: each peer figure with
// the figure of syncd with as many nodes for the same shape divided by it (none where syncd was
// not run with that many), failures and skipped peers as rows of their own.
func TestPeerRows(t *testing.T) {
	results, err := peerresult.Read(strings.NewReader(generatorOutput))
	if err != nil {
		t.Fatal(err)
	}
	figs := map[int]figures{
		1: {sends: bench.SendResult{PerSec: 8000}, delivery: bench.DeliveryResult{P99: 7 * time.Millisecond},
			catchUp: bench.CatchUpResult{PerSec: 300000}},
		3: {sends: bench.SendResult{PerSec: 3000}},
	}
	want := []row{
		{name: "etcd 3.4.23, 1 member: appends", value: "16000 acked/s", p50: 3600 * time.Microsecond, p99: 13400 * time.Microsecond,
			ratio: "rate 0.50", note: "64 closed-loop writers; 2 appends failed"},
		{name: "etcd 3.4.23, 1 member: push", value: "10000 events", p50: 720 * time.Microsecond, p99: 3500 * time.Microsecond,
			ratio: "p99 2.00", note: "200 live subscribers"},
		{name: "etcd 3.4.23, 1 member: catch-up", value: "60000 entries/s", ratio: "rate 5.00", note: "pages of 1000"},
		{name: "etcd 3.4.23, 3 members: appends", value: "6000 acked/s", p50: 9 * time.Millisecond, p99: 28 * time.Millisecond, ratio: "rate 0.50"},
		{name: "etcd 3.4.23, 3 members: push", value: "FAILED", note: "a subscription failed: lost"},
		{name: "etcd 3.4.23, 5 members: appends", value: "5000 acked/s", ratio: "-"},
		{name: "etcd 3.4.23, 7 members", value: "FAILED", note: "not ready within 30s"},
		{name: "Redis, appendfsync always", value: "skipped", note: "redis-server not installed (apt-get install redis-server)"},
	}
	got := peerRows(results, figs)
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}

	// Without a syncd figure (its scenario failed) there is no ratio.
	if r := peerRows(results[:1], map[int]figures{1: {}}); r[0].ratio != "-" {
		t.Errorf("ratio without syncd's figure: %q", r[0].ratio)
	}
}
