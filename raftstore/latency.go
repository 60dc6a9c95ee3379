package raftstore

import (
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// latencies are the node's histograms of where a write's time goes below the application, all
// shards together (issue #26): the Raft log's durable write, the state machine's apply, and a
// proposal's commit on the leader; with the store's write-ahead log fsyncs (Pebble's own
// histogram, read at scrape time), they tell a slow disk from a slow quorum from a slow apply.
// One series each, so that a node with many shards costs no more to scrape.
type latencies struct {
	logWrite prometheus.Histogram // raftLog.StoreLogs: a batch of Raft entries written and fsynced
	apply    prometheus.Histogram // fsm.ApplyBatch: a batch of entries applied to the state
	commit   prometheus.Histogram // proposeLocal: a proposal on the leader, to its applied result
}

// latencyBuckets run from 100 µs to about 6.5 s, doubling: an fsync on a good SSD is well under a
// millisecond, a commit across nodes a few, and anything past a second is an outage.
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 2, 17)

func newLatencies() *latencies {
	h := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "syncd", Subsystem: "raft", Name: name,
			Help: help, Buckets: latencyBuckets})
	}
	return &latencies{
		logWrite: h("log_write_seconds", "Time to write and fsync one batch of Raft entries to the node's store (every shard's, the meta group's included)."),
		apply:    h("apply_seconds", "Time to apply one batch of committed entries to a data shard's state."),
		commit:   h("commit_seconds", "Time from proposing a command on its shard's leader here to its applied result: replication to a quorum, the durable writes and the local apply."),
	}
}

// since records the time from start in h.
func since(h prometheus.Histogram, start time.Time) { h.Observe(time.Since(start).Seconds()) }

// Collectors returns the node's latency metrics, for the application's registry: the Raft log
// writes, applies and commits (syncd_raft_*_seconds) and the store's write-ahead log fsyncs
// (syncd_pebble_wal_fsync_seconds).
func (n *Node) Collectors() []prometheus.Collector {
	return []prometheus.Collector{n.lat.logWrite, n.lat.apply, n.lat.commit, walFsync{n.db}}
}

// walFsync exports Pebble's histogram of write-ahead log fsyncs, which Pebble keeps in
// nanoseconds and without a name, as syncd_pebble_wal_fsync_seconds. It is read at scrape time.
type walFsync struct{ db *pebble.DB }

var walFsyncDesc = prometheus.NewDesc("syncd_pebble_wal_fsync_seconds",
	"Time of each fsync of the store's write-ahead log (every durable write of the node waits for one).", nil, nil)

func (w walFsync) Describe(ch chan<- *prometheus.Desc) { ch <- walFsyncDesc }

func (w walFsync) Collect(ch chan<- prometheus.Metric) {
	h := w.db.Metrics().LogWriter.FsyncLatency
	if h == nil {
		return
	}
	var m dto.Metric
	if err := h.Write(&m); err != nil || m.Histogram == nil {
		return
	}
	buckets := make(map[float64]uint64, len(m.Histogram.Bucket))
	for _, b := range m.Histogram.Bucket {
		buckets[b.GetUpperBound()/1e9] = b.GetCumulativeCount()
	}
	ch <- prometheus.MustNewConstHistogram(walFsyncDesc, m.Histogram.GetSampleCount(), m.Histogram.GetSampleSum()/1e9, buckets)
}
