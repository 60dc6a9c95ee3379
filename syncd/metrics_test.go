package syncd

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/syncd/admin"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/peer"
	"github.com/syncd-dev/syncd/test/testkit"
)

// startMetricsNode starts a real single node hosting shards 1 and 2 and waits for their leaders.
func startMetricsNode(t testing.TB) *raftstore.Node {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelError}))
	dir := t.TempDir()
	tls, err := raftstoretest.TLS(dir, "n1")
	if err != nil {
		t.Fatal(err)
	}
	node, err := raftstore.New(raftstore.Config{NodeID: "n1", Dir: dir, TLS: tls, Shards: []raftstore.ShardID{1, 2}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := node.Close(); err != nil {
			t.Error(err)
		}
	})
	for _, s := range node.Shards() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _, err := node.WaitLeader(ctx, s)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	return node
}

// TestAdminServesMetricsHealthReadinessAndPprof runs the admin server over real HTTP against a
// real node and checks every endpoint, including the per-shard Raft series and fan-out lag.
func TestAdminServesMetricsHealthReadinessAndPprof(t *testing.T) {
	node := startMetricsNode(t)
	logger := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelError}))

	// One outbox record on shard 1 that no fan-out delivers: its lag is 1, shard 2's is 0.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := node.Propose(ctx, 1, raftstore.AppendCommand(&log.Append{Conv: "g1", Sender: "alice",
		ClientMsgID: "c1", Kind: log.KindGroupCreate, Members: []string{"alice", "bob"}})); err != nil {
		t.Fatal(err)
	}

	var conns atomic.Int64
	conns.Store(3)
	reg := prometheus.NewRegistry()
	m := newMetrics(reg, node, nil, conns.Load, stubFanout{delivered: 7, failures: 2, deadLettered: 1})
	m.observeSend(3*time.Millisecond, sendOK)
	m.observeSend(time.Millisecond, sendDuplicate)
	m.observeSend(time.Second, "bogus") // counted as error: the label set stays fixed
	m.observeDelivery(20 * time.Millisecond)
	m.observeDelivery(-time.Second) // clock skew counts as zero
	m.observeFanout(3 * time.Millisecond)
	m.syncStreamOpened()
	m.syncStreamOpened()
	m.syncStreamClosed()
	m.clientGap()
	m.clientMismatch()
	m.clientMismatch()
	m.syncStale()

	var notReady atomic.Bool
	ready := func() error {
		if notReady.Load() {
			return errors.New("no known leader for shards [2]")
		}
		return admin.LeadersReady(node)
	}
	token := strings.Repeat("t", adminapi.MinTokenLen)
	adm, err := admin.Start(admin.Config{Addr: "127.0.0.1:0", Token: token, Node: node,
		Routing: cluster.Even(2), Peer: peer.New(node), Registry: reg, Ready: ready, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			adm.Close(context.Background())
		}
	}()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	base := "http://" + adm.Addr().String()

	code, body := testkit.HTTP(t, http.MethodGet, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	for _, want := range []string{
		`syncd_send_ack_seconds_bucket{result="ok",le="0.0005"} 0`,
		`syncd_send_ack_seconds_count{result="ok"} 1`,
		`syncd_send_ack_seconds_count{result="duplicate"} 1`,
		`syncd_send_ack_seconds_count{result="refused"} 0`,
		`syncd_send_ack_seconds_count{result="error"} 1`,
		`syncd_send_ack_seconds_bucket{result="ok",le="+Inf"} 1`,
		`syncd_delivery_seconds_count 2`,
		`syncd_delivery_seconds_sum 0.02`,
		`syncd_delivery_seconds_bucket{le="5"} 2`,
		`syncd_fanout_delivery_seconds_count 1`,
		`syncd_fanout_delivery_seconds_bucket{le="0.002"} 0`,
		`syncd_fanout_delivery_seconds_bucket{le="0.005"} 1`,
		`syncd_fanout_delivered_total 7`,
		`syncd_sync_stale_total 1`,
		`syncd_raft_lease_held{shard="1"} 1`,
		`syncd_fanout_failures_total 2`,
		`syncd_fanout_dead_lettered_total 1`,
		`syncd_dead_letters{shard="1"} 0`,
		`syncd_fanout_lag_entries{shard="1"} 1`,
		`syncd_fanout_lag_entries{shard="2"} 0`,
		`syncd_connections 3`,
		`syncd_build_info{goversion="` + runtime.Version() + `",revision="",version="devel"} 1`,
		`syncd_sync_streams 1`,
		`syncd_client_gaps_total 1`,
		`syncd_client_digest_mismatches_total 2`,
		`syncd_raft_is_leader{shard="1"} 1`,
		`syncd_raft_is_leader{shard="2"} 1`,
		`syncd_raft_term{shard="1"} `,
		`syncd_raft_term{shard="2"} `,
		`syncd_raft_commit_index{shard="1"} `,
		`syncd_raft_applied_index{shard="2"} `,
		`syncd_raft_last_index{shard="1"} `,
		`syncd_raft_snapshot_restores_total{shard="1"} 0`,
		`syncd_raft_snapshot_restores_total{shard="2"} 0`,
		"\ngo_goroutines ",
		"\nprocess_start_time_seconds ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "syncd_") && (strings.Contains(line, "alice") || strings.Contains(line, "bob")) {
			t.Errorf("/metrics exposes a user id: %s", line)
		}
	}
	if t.Failed() {
		t.Log(body)
	}

	if code, body := testkit.HTTP(t, http.MethodGet, base+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := testkit.HTTP(t, http.MethodGet, base+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz while ready: %d %q", code, body)
	}
	notReady.Store(true)
	if code, body := testkit.HTTP(t, http.MethodGet, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no known leader") {
		t.Errorf("/readyz while not ready: %d %q", code, body)
	}
	if code, body := testkit.HTTP(t, http.MethodGet, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while not ready: %d %q", code, body)
	}
	if code, body := testkit.HTTP(t, http.MethodGet, base+"/debug/pprof/", testkit.Bearer(token)); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/: %d", code)
	}
	if code, _ := testkit.HTTP(t, http.MethodGet, base+"/debug/pprof/goroutine?debug=1", testkit.Bearer(token)); code != http.StatusOK {
		t.Errorf("/debug/pprof/goroutine: %d", code)
	}
	if code, _ := testkit.HTTP(t, http.MethodGet, base+"/nope", testkit.Bearer(token)); code != http.StatusNotFound {
		t.Errorf("/nope: %d, want 404", code)
	}

	closeCtx, closeCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer closeCancel()
	closed = true
	if err := adm.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Get(base + "/healthz"); err == nil {
		t.Error("admin server still answers after close")
	}
}

// TestMetricsTwoServersInOneProcess checks that metrics live on private registries: two sets
// over the same node register without conflict and are gathered independently.
func TestMetricsTwoServersInOneProcess(t *testing.T) {
	node := startMetricsNode(t)
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	a := newMetrics(regA, node, nil, func() int64 { return 0 }, stubFanout{})
	b := newMetrics(regB, node, nil, func() int64 { return 0 }, stubFanout{})
	a.clientGap()
	a.clientGap()
	b.clientGap()
	for _, c := range []struct {
		reg  *prometheus.Registry
		want float64
	}{{regA, 2}, {regB, 1}} {
		mfs, err := c.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, mf := range mfs {
			if mf.GetName() == "syncd_client_gaps_total" {
				found = true
				if got := mf.GetMetric()[0].GetCounter().GetValue(); got != c.want {
					t.Errorf("syncd_client_gaps_total = %v, want %v", got, c.want)
				}
			}
		}
		if !found {
			t.Error("syncd_client_gaps_total not gathered")
		}
	}
	var nilMetrics *metrics // code paths without metrics must not crash
	nilMetrics.observeSend(time.Millisecond, sendOK)
	nilMetrics.observeDelivery(time.Millisecond)
	nilMetrics.syncStreamOpened()
	nilMetrics.syncStreamClosed()
	nilMetrics.clientGap()
	nilMetrics.clientMismatch()
}

// TestAdminLeadersReady checks the readiness condition against a real node, before and after
// it shuts down, and that scraping a closed node's shards does not fail.
func TestAdminLeadersReady(t *testing.T) {
	node := startMetricsNode(t)
	if err := admin.LeadersReady(node); err != nil {
		t.Fatalf("leadersReady with leaders: %v", err)
	}
	reg := prometheus.NewRegistry()
	newMetrics(reg, node, nil, func() int64 { return 0 }, stubFanout{})
	if err := node.Close(); err != nil {
		t.Fatal(err)
	}
	if err := admin.LeadersReady(node); err == nil {
		t.Error("leadersReady after Close: nil, want an error")
	}
	if _, err := reg.Gather(); err != nil {
		t.Errorf("gather after node.Close: %v", err)
	}
}

// stubFanout reports fixed fan-out counters.
type stubFanout struct{ delivered, failures, deadLettered uint64 }

func (s stubFanout) Delivered() uint64           { return s.delivered }
func (s stubFanout) Failures() uint64            { return s.failures }
func (s stubFanout) DeadLettered() uint64        { return s.deadLettered }
func (s stubFanout) Compensated() uint64         { return 0 }
func (s stubFanout) CompensationRefused() uint64 { return 0 }
func (s stubFanout) CompensationGaveUp() uint64  { return 0 }
func (s stubFanout) Archived() uint64            { return 0 }

// testLog writes log records to the test log.
type testLog struct{ t testing.TB }

func (w testLog) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
