package proccluster

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/syncd-dev/syncd/raftstore"
)

// ShardStat is one node's view of one shard, read from the per-shard series of its /metrics
// (the gauges of syncd's shard collector, labelled shard="<id>"). A field whose series the node
// did not report is zero: a node omits the fan-out lag and the dead-letter count of a shard that
// is shutting down or whose outbox it cannot read. It is a plain value.
//
// Node.Metrics returns it; the package's leader and settle checks read it, and so does the fault
// suite, to check that replicas caught up and fan-out drained.
type ShardStat struct {
	Leader      bool   // syncd_raft_is_leader is 1
	Term        uint64 // syncd_raft_term
	Commit      uint64 // syncd_raft_commit_index
	Applied     uint64 // syncd_raft_applied_index: last index handed to the state machine
	Last        uint64 // syncd_raft_last_index: last index in the node's Raft log
	DeadLetters uint64 // syncd_dead_letters
	Lag         uint64 // syncd_fanout_lag_entries: outbox records not yet delivered everywhere and trimmed
}

// shardSeries maps each series ParseShardMetrics reads to the ShardStat field it sets.
var shardSeries = map[string]func(*ShardStat, float64){
	"syncd_raft_is_leader":     func(s *ShardStat, v float64) { s.Leader = v == 1 },
	"syncd_raft_term":          func(s *ShardStat, v float64) { s.Term = uint64(v) },
	"syncd_raft_commit_index":  func(s *ShardStat, v float64) { s.Commit = uint64(v) },
	"syncd_raft_applied_index": func(s *ShardStat, v float64) { s.Applied = uint64(v) },
	"syncd_raft_last_index":    func(s *ShardStat, v float64) { s.Last = uint64(v) },
	"syncd_dead_letters":       func(s *ShardStat, v float64) { s.DeadLetters = uint64(v) },
	"syncd_fanout_lag_entries": func(s *ShardStat, v float64) { s.Lag = uint64(v) },
}

// ParseShardMetrics parses a Prometheus text exposition (the body of a syncd node's /metrics)
// and returns, per shard label, a ShardStat filled from the series named on its fields; other
// series are ignored. The caller owns the returned map. It fails if the body is not a valid
// exposition or a shard label is not a shard id.
//
// It uses the Prometheus client's own text parser (expfmt, which syncd's exporter links in
// anyway) rather than matching lines, so that label order, further labels, escaping and
// timestamps cannot make a series go unseen.
func ParseShardMetrics(body string) (map[raftstore.ShardID]*ShardStat, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("proccluster: metrics: %v", err)
	}
	out := map[raftstore.ShardID]*ShardStat{}
	for name, set := range shardSeries {
		for _, m := range families[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "shard" {
					continue
				}
				id, err := strconv.ParseUint(l.GetValue(), 10, 32)
				if err != nil {
					return nil, fmt.Errorf("proccluster: metrics: %s{shard=%q}: not a shard id", name, l.GetValue())
				}
				st := out[raftstore.ShardID(id)]
				if st == nil {
					st = &ShardStat{}
					out[raftstore.ShardID(id)] = st
				}
				// syncd exports gauges; a series without a TYPE line parses as untyped.
				v := m.GetGauge().GetValue()
				if m.Untyped != nil {
					v = m.GetUntyped().GetValue()
				}
				set(st, v)
			}
		}
	}
	return out, nil
}

// Metrics reads n's per-shard series from its /metrics (see ShardStat). The caller owns the map.
func (n *Node) Metrics(ctx context.Context) (map[raftstore.ShardID]*ShardStat, error) {
	code, body, err := n.AdminDo(ctx, http.MethodGet, "/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("%s /metrics: status %d", n.ID, code)
	}
	return ParseShardMetrics(body)
}
