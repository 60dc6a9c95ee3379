package proccluster

import (
	"testing"

	"github.com/syncd-dev/syncd/raftstore"
)

// TestParseShardMetrics parses a small exposition in the shape syncd's /metrics has: HELP and
// TYPE lines, per-shard series with and without TYPE, labels in either order, and series that
// are not per-shard.
func TestParseShardMetrics(t *testing.T) {
	got, err := ParseShardMetrics(`# HELP syncd_raft_is_leader 1 if this node leads the shard, else 0.
# TYPE syncd_raft_is_leader gauge
syncd_raft_is_leader{shard="1"} 0
syncd_raft_is_leader{shard="3"} 1
# TYPE syncd_raft_term gauge
syncd_raft_term{shard="1"} 6
syncd_raft_term{shard="3"} 7
syncd_raft_commit_index{shard="3"} 42
syncd_raft_applied_index{shard="3"} 41
syncd_raft_last_index{shard="3"} 43
syncd_dead_letters{shard="3"} 1
syncd_fanout_lag_entries{node="n1",shard="3"} 2
syncd_raft_snapshot_restores_total{shard="5"} 9
syncd_send_ack_seconds_bucket{result="ok",le="0.005"} 3
`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[raftstore.ShardID]ShardStat{
		1: {Term: 6},
		3: {Leader: true, Term: 7, Commit: 42, Applied: 41, Last: 43, DeadLetters: 1, Lag: 2},
	}
	if len(got) != len(want) {
		t.Errorf("got %d shards, want %d: %v", len(got), len(want), got)
	}
	for shard, w := range want {
		if g := got[shard]; g == nil || *g != w {
			t.Errorf("shard %d: got %+v, want %+v", shard, g, w)
		}
	}

	for name, body := range map[string]string{
		"bad shard": `syncd_raft_term{shard="x"} 1` + "\n",
		"bad value": `syncd_raft_term{shard="1"} one` + "\n",
	} {
		if _, err := ParseShardMetrics(body); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
