package syncd

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd/buildinfo"
	"github.com/syncd-dev/syncd/syncd/transport"
)

// Metrics (DESIGN §7). Everything registers on the server's own registry, never on
// prometheus.DefaultRegisterer, so two servers can run in one process. Names follow
// syncd_<subsystem>_<name>; labels are low-cardinality only (result, shard), never user, device
// or conversation ids.

// Results of a send, the values of the result label of syncd_send_ack_seconds.
const (
	sendOK        = "ok"        // appended and acknowledged
	sendDuplicate = "duplicate" // a retry of a request already applied; the original ack resent
	sendRefused   = "refused"   // refused by the log (forbidden, conflict, too large, …)
	sendError     = "error"     // not known to be applied (timeout, leadership lost, shutdown, …)
)

var sendResults = [...]string{sendOK, sendDuplicate, sendRefused, sendError}

// Why a connection was refused before or at Hello for want of room, the values of the reason
// label of syncd_handshake_refused_total.
const (
	refusedSource  = "source"        // Config.MaxHandshakesPerSource handshakes from its source already
	refusedBusy    = "busy"          // Config.MaxHandshakes handshakes on the node already
	refusedTimeout = "hello_timeout" // no Hello within Config.HelloTimeout
)

var refusedReasons = [...]string{refusedSource, refusedBusy, refusedTimeout}

// Why a request was refused with overloaded, the values of the reason label of
// syncd_request_refused_total.
const (
	refusedAnswers  = "answer_bytes" // its connection's, device's or user's answer budget is spent (Config.MaxAnswerBytesPer…)
	refusedInFlight = "in_flight"    // Config.MaxInFlight requests are being served on the node
)

var requestRefusedReasons = [...]string{refusedAnswers, refusedInFlight}

// Results of reporting a user's deliveries to one conversation, the values of the result label of
// syncd_delivery_reports_total (delivery.go).
const (
	reportAdvanced = "advanced" // the member's delivered mark moved
	reportNoop     = "noop"     // no entry written: the mark was there (a repeated report), or a group above status_fanout_limit
	reportRefused  = "refused"  // refused for good (the user left the conversation): skipped
	reportError    = "error"    // not known to be applied; the log's report is retried next round
)

var reportResults = [...]string{reportAdvanced, reportNoop, reportRefused, reportError}

// The transports a session may come by, the values of the transport label of
// syncd_sessions_total; and why a browser's request was refused before it became a session, the
// values of the reason label of syncd_web_refused_total (transport.WebConfig.Refused).
var (
	transportKinds    = [...]string{string(transport.QUIC), string(transport.WebTransport), string(transport.WebSocket)}
	webRefusedReasons = [...]string{"origin", "path", "sessions", "upgrade"}
)

// latencyBuckets spans 0.5 ms to 5 s exponentially: three buckets a decade (1-2-5, factor ≈ 2.15),
// with boundaries an operator can read. For a finer P99, the histograms are also native
// histograms (factor 1.1) for scrapers that negotiate them; the text format keeps these buckets.
var latencyBuckets = []float64{
	0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5,
}

// latencyOpts are the options of a latency histogram syncd_<subsystem>_<name> (no subsystem: "").
func latencyOpts(subsystem, name, help string) prometheus.HistogramOpts {
	return prometheus.HistogramOpts{Namespace: "syncd", Subsystem: subsystem, Name: name, Help: help, Buckets: latencyBuckets,
		NativeHistogramBucketFactor: nativeBucketFactor, NativeHistogramMaxBucketNumber: nativeMaxBuckets}
}

// Native-histogram settings of the latency histograms: at most 160 buckets each (a few KB),
// halving the resolution rather than growing further.
const (
	nativeBucketFactor = 1.1
	nativeMaxBuckets   = 160
)

// metrics holds the server's instruments. Its methods are safe for concurrent use and do nothing
// on a nil *metrics, so code paths under test need not build one.
type metrics struct {
	sendAck     [len(sendResults)]prometheus.Observer
	delivery    prometheus.Histogram
	deviceAck   prometheus.Histogram
	readAfter   prometheus.Histogram
	fanout      prometheus.Histogram
	syncStreams prometheus.Gauge
	staleTurns  prometheus.Counter
	clientGaps  prometheus.Counter
	mismatches  prometheus.Counter
	refused     []prometheus.Counter // by refusedReasons
	reqRefused  []prometheus.Counter // by requestRefusedReasons
	writeStalls prometheus.Counter
	validated   prometheus.Counter
	movePause   prometheus.Histogram
	moveCopied  prometheus.Counter
	sessions    []prometheus.Counter // by transportKinds
	webRefused  []prometheus.Counter // by webRefusedReasons
	reports     []prometheus.Counter // by reportResults

	// User-log entries retention trimmed, and stored device cursors those trims passed (retention.go).
	retentionTrimmed prometheus.Counter
	retentionPassed  prometheus.Counter
}

// newMetrics registers the server's metrics on reg, which must be private to this server (a
// fresh prometheus.NewRegistry). Values that already live elsewhere are read at scrape time:
// conns returns the number of open client connections, fan supplies the fan-out's counters, and
// node supplies per-shard Raft state, outbox positions and dead-letter counts, and the cluster
// (nil for a node of none) the moves in progress. It panics if reg already holds these metrics.
func newMetrics(reg *prometheus.Registry, node metricsNode, cl *cluster.Cluster, conns func() int64, fan fanoutStats) *metrics {
	sendAck := prometheus.NewHistogramVec(latencyOpts("send", "ack_seconds",
		"Time from receiving a send request to writing its answer, by result (ok, duplicate, refused, error)."), []string{"result"})
	m := &metrics{
		delivery: prometheus.NewHistogram(latencyOpts("", "delivery_seconds",
			"Time from a conversation entry's append (its entry time) to its push on a device's sync stream; the commit-to-device latency.")),
		deviceAck: prometheus.NewHistogram(latencyOpts("", "device_ack_seconds",
			"Time from a conversation entry's append to the cursor ack of the device it was pushed to live: the device has stored it (the delivered-to-a-device stage).")),
		readAfter: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "syncd", Name: "read_after_seconds",
			Help:    "Time from a message's append to a read receipt marking it read (the newest message the receipt covers), for receipts made through this node while the conversation's home replica is here: the read stage.",
			Buckets: []float64{1, 5, 30, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 24 * 3600, 3 * 24 * 3600, 7 * 24 * 3600},
		}),
		fanout: prometheus.NewHistogram(latencyOpts("fanout", "delivery_seconds",
			"Time from a conversation entry's append (its entry time) to the commit of its delivery to a recipient's shard, by this node's fan-out: the part of syncd_delivery_seconds spent before the sync stream is woken.")),
		syncStreams: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "syncd", Name: "sync_streams",
			Help: "Open sync streams.",
		}),
		staleTurns: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "syncd", Subsystem: "sync", Name: "stale_total",
			Help: "Times an idle sync stream found the replica it reads stale (not heard from its shard's leader within the lease) and told its device so instead of heartbeating.",
		}),
		clientGaps: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "syncd", Subsystem: "client", Name: "gaps_total",
			Help: "Gaps clients reported (Report kind gap): a sync batch that did not continue the device's stored cursor, which the device refetched. At most 10 a minute per device are counted.",
		}),
		mismatches: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "syncd", Subsystem: "client", Name: "digest_mismatches_total",
			Help: "Digest mismatches clients reported (Report kind mismatch): a range of a log the device stored that differed from the server's digest of it, which the device refetched. At most 10 a minute per device are counted.",
		}),
		movePause: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "syncd", Subsystem: "move", Name: "pause_seconds",
			Help:    "How long a move paused the writes of the user's log or conversation it moved (fence to switch), for the moves this node drove.",
			Buckets: latencyBuckets,
		}),
		moveCopied: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "syncd", Subsystem: "move", Name: "copied_bytes_total",
			Help: "Bytes of users' logs and conversations copied to other shards by the moves this node drove.",
		}),
		retentionTrimmed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "syncd", Subsystem: "retention", Name: "user_entries_trimmed_total",
			Help: "Entries the retention passes of the shards this node led trimmed from user logs.",
		}),
		retentionPassed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "syncd", Subsystem: "retention", Name: "cursors_passed_total",
			Help: "Stored device cursors a retention trim of a user log moved past (the bound reached them, or their device had stopped holding as inactive). A device that syncs from a passed cursor is answered too_old and rebases; one reading a live sync stream may already be further (cursor stores trail it by up to a second).",
		}),
	}
	for i, r := range sendResults { // every result exists from the start, at zero
		m.sendAck[i] = sendAck.WithLabelValues(r)
	}
	var refused, reqRefused, sessions, webRefused, reports *prometheus.CounterVec
	reports, m.reports = labelledCounters(prometheus.CounterOpts{
		Namespace: "syncd", Subsystem: "delivery", Name: "reports_total",
		Help: "Reports of a user's deliveries to a conversation (a device's cursor ack passed messages of it), by result: advanced (the member's delivered mark moved and the senders were told), noop (no entry written: the mark was there already, or the group is above status_fanout_limit and only its counts moved), refused (the user is no longer a member), error (retried next round).",
	}, "result", reportResults[:])
	refused, m.refused = labelledCounters(prometheus.CounterOpts{
		Namespace: "syncd", Subsystem: "handshake", Name: "refused_total",
		Help: "Client connections closed before or at Hello for want of room, by reason: source (the per-source handshake limit), busy (the node's handshake limit), hello_timeout.",
	}, "reason", refusedReasons[:])
	reqRefused, m.reqRefused = labelledCounters(prometheus.CounterOpts{
		Namespace: "syncd", Subsystem: "request", Name: "refused_total",
		Help: "Requests refused with overloaded, by reason: answer_bytes (the connection's, device's or user's answers not yet read hold their budget), in_flight (max_in_flight requests being served).",
	}, "reason", requestRefusedReasons[:])
	sessions, m.sessions = labelledCounters(prometheus.CounterOpts{
		Namespace: "syncd", Name: "sessions_total",
		Help: "Client sessions welcomed (Hello accepted), by transport: quic (syncd/1), webtransport, websocket.",
	}, "transport", transportKinds[:])
	webRefused, m.webRefused = labelledCounters(prometheus.CounterOpts{
		Namespace: "syncd", Subsystem: "web", Name: "refused_total",
		Help: "Browser requests refused before they became a session, by reason: origin (not in allowed_origins), path (not /syncd/1), sessions (too many WebTransport sessions on one connection), upgrade (not a valid WebTransport or WebSocket upgrade).",
	}, "reason", webRefusedReasons[:])
	m.writeStalls = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "syncd", Subsystem: "stream", Name: "write_timeouts_total",
		Help: "Request and sync streams reset with timeout because a write to them made no progress within write_timeout (the client did not read).",
	})
	m.validated = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "syncd", Subsystem: "handshake", Name: "address_validated_total",
		Help: "Client connections that proved their source address (a QUIC Retry, asked for while half the handshake limit is in use, or an address token).",
	})
	build := buildinfo.Get()
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "syncd", Name: "build_info",
		Help:        "Always 1; its labels say which build this node runs (syncd -version), to follow a rolling upgrade.",
		ConstLabels: prometheus.Labels{"version": build.Version, "revision": build.Revision, "goversion": build.GoVersion},
	})
	buildInfo.Set(1)
	reg.MustRegister(buildInfo)
	reg.MustRegister(node.Collectors()...)
	reg.MustRegister(
		sendAck, m.delivery, m.deviceAck, m.readAfter, m.fanout, m.syncStreams, m.staleTurns, m.clientGaps, m.mismatches, refused, m.validated,
		reqRefused, m.writeStalls, sessions, webRefused, reports,
		m.movePause, m.moveCopied, m.retentionTrimmed, m.retentionPassed,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "syncd", Name: "moves_in_progress",
			Help: "Moves of users' logs between shards in progress in the cluster map.",
		}, func() float64 { cm, _ := cl.Map(); return float64(len(cm.Moves)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "syncd", Name: "connections",
			Help: "Open client connections.",
		}, func() float64 { return float64(conns()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "syncd", Subsystem: "fanout", Name: "delivered_total",
			Help: "User-log entries written by this node's fan-out.",
		}, func() float64 { return float64(fan.Delivered()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "syncd", Subsystem: "fanout", Name: "failures_total",
			Help: "Fan-out deliveries to a destination, and rounds of a source (outbox read, trim), that failed and were retried.",
		}, func() float64 { return float64(fan.Failures()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "syncd", Subsystem: "fanout", Name: "dead_lettered_total",
			Help: "Deliveries this node's fan-out moved to dead letters because the destination refused them.",
		}, func() float64 { return float64(fan.DeadLettered()) }),
		deadLetterProcessCounter("replayed", fan.Compensated),
		deadLetterProcessCounter("refused", fan.CompensationRefused),
		deadLetterProcessCounter("gave_up", fan.CompensationGaveUp),
		deadLetterProcessCounter("archived", fan.Archived),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "syncd", Subsystem: "replica", Name: "checksum_mismatches_total",
			Help: "Replica checks made through this node (syncctl shard check) that found a shard's replicas holding different state at the same Raft index.",
		}, func() float64 { return float64(node.ChecksumMismatches()) }),
		newShardCollector(node),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// registerDiskMetrics registers the free-space gauges of the disk holding the node's store, read
// from disk (raftstore.Node.DiskSpace) at scrape time.
func registerDiskMetrics(reg *prometheus.Registry, disk func() raftstore.DiskSpace) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "syncd", Subsystem: "disk", Name: "free_bytes",
			Help: "Free space of the disk holding the store, as last measured (every second).",
		}, func() float64 { return float64(disk().Free) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "syncd", Subsystem: "disk", Name: "low",
			Help: "1 while free disk space is below min_free_disk and the node refuses new writes, else 0.",
		}, func() float64 {
			if disk().Low {
				return 1
			}
			return 0
		}),
	)
}

// registerAnswerMetrics registers the gauge of the bytes the node's answer budgets hold
// (answerBudgets), read at scrape time.
func registerAnswerMetrics(reg *prometheus.Registry, held func() int64) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "syncd", Name: "answer_bytes",
		Help: "Bytes of answers this node holds for clients: being built (a page counts max_frame) or waiting to be written.",
	}, func() float64 { return float64(held()) }))
}

// metricsNode is what the metrics read of the node at scrape time (*raftstore.Node): its
// replicas' Raft state and stores, and their leases.
type metricsNode interface {
	nodeShards
	WatchLease(shard raftstore.ShardID) (raftstore.Lease, <-chan struct{}, error)
	Collectors() []prometheus.Collector // the node's latency histograms (raftstore.Node)
	ChecksumMismatches() uint64         // replica checks that found replicas differing (raftstore.Node)
}

// fanoutStats are the fan-out counters the metrics read at scrape time (*Fanout).
type fanoutStats interface {
	Delivered() uint64    // user-log entries written
	Failures() uint64     // deliveries and rounds that failed and were retried
	DeadLettered() uint64 // deliveries moved to dead letters
	// The dead-letter process (fanout/compensate.go).
	Compensated() uint64         // dead letters replayed automatically
	CompensationRefused() uint64 // automatic replays refused and scheduled again
	CompensationGaveUp() uint64  // dead letters given up
	Archived() uint64            // dead letters archived
}

// deadLetterProcessCounter is one series of syncd_dead_letter_compensation_total: result is a
// fixed label value, so the set of series is fixed.
func deadLetterProcessCounter(result string, read func() uint64) prometheus.CounterFunc {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "syncd", Name: "dead_letter_compensation_total",
		Help: "The dead-letter process on this node, by result: replayed (an automatic replay delivered it), refused " +
			"(refused again, scheduled once more), gave_up (cap of attempts, or a refusal not retried: it waits for an operator), archived.",
		ConstLabels: prometheus.Labels{"result": result},
	}, func() float64 { return float64(read()) })
}

// observeSend records the send→ack latency of one request with its result (one of the send*
// constants; anything else counts as sendError, which keeps the label set fixed).
func (m *metrics) observeSend(d time.Duration, result string) {
	if m == nil {
		return
	}
	i := len(sendResults) - 1 // sendError
	for j, r := range sendResults {
		if r == result {
			i = j
			break
		}
	}
	m.sendAck[i].Observe(d.Seconds())
}

// observeDelivery records the commit→device latency of one entry pushed on a sync stream: now
// minus the entry's time. Clock skew between the appending node and this one can make it
// negative; that counts as zero.
func (m *metrics) observeDelivery(d time.Duration) {
	if m == nil {
		return
	}
	m.delivery.Observe(max(d, 0).Seconds())
}

// observeDeviceAck records the append→device-ack latency of one entry pushed live (ackClock).
// Clock skew counts as zero, as in observeDelivery.
func (m *metrics) observeDeviceAck(d time.Duration) {
	if m == nil {
		return
	}
	m.deviceAck.Observe(max(d, 0).Seconds())
}

// observeReadAfter records the append→read time of one message (Server.observeRead). Clock skew
// counts as zero, as in observeDelivery.
func (m *metrics) observeReadAfter(d time.Duration) {
	if m == nil {
		return
	}
	m.readAfter.Observe(max(d, 0).Seconds())
}

// observeFanout records the append→delivered latency of one entry the fan-out delivered (a
// fanout.Config.Observe). Clock skew counts as zero, as in observeDelivery.
func (m *metrics) observeFanout(d time.Duration) {
	if m == nil {
		return
	}
	m.fanout.Observe(max(d, 0).Seconds())
}

// observeMove records a move this node drove to its switch: the writes' pause and the bytes copied.
func (m *metrics) observeMove(pause time.Duration, copied int64) {
	if m == nil {
		return
	}
	m.movePause.Observe(pause.Seconds())
	m.moveCopied.Add(float64(copied))
}

// observeUserTrim records a retention trim of a user log: the entries it dropped and the device
// cursors it moved past.
func (m *metrics) observeUserTrim(trimmed, passed int) {
	if m == nil {
		return
	}
	m.retentionTrimmed.Add(float64(trimmed))
	m.retentionPassed.Add(float64(passed))
}

// syncStreamOpened and syncStreamClosed track the open sync streams; call them in pairs.
func (m *metrics) syncStreamOpened() {
	if m != nil {
		m.syncStreams.Inc()
	}
}

func (m *metrics) syncStreamClosed() {
	if m != nil {
		m.syncStreams.Dec()
	}
}

// syncStale counts a sync stream turning stale (session.idleStale).
func (m *metrics) syncStale() {
	if m != nil {
		m.staleTurns.Inc()
	}
}

// clientGap counts a gap a client reported in its log (a Report of kind gap).
func (m *metrics) clientGap() {
	if m != nil {
		m.clientGaps.Inc()
	}
}

// clientMismatch counts a digest mismatch a client reported (a Report of kind mismatch).
func (m *metrics) clientMismatch() {
	if m != nil {
		m.mismatches.Inc()
	}
}

// shardCollector reports per-shard state read at scrape time: this node's Raft view of every
// shard it hosts and the fan-out lag of its outbox replica.
type shardCollector struct {
	node                                            metricsNode
	isLeader, term, commit, applied, last, restores *prometheus.Desc
	lag, deadLetters, leaseHeld                     *prometheus.Desc
	deadLettersByReason, deadLettersGaveUp          *prometheus.Desc
	deadLettersArchived                             *prometheus.Desc
}

func newShardCollector(node metricsNode) *shardCollector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"shard"}, nil)
	}
	return &shardCollector{
		node:     node,
		isLeader: desc("syncd_raft_is_leader", "1 if this node leads the shard, else 0."),
		term:     desc("syncd_raft_term", "Current Raft term of this node's replica of the shard."),
		commit:   desc("syncd_raft_commit_index", "Raft commit index of this node's replica of the shard."),
		applied:  desc("syncd_raft_applied_index", "Last Raft index handed to the state machine of this node's replica of the shard."),
		last:     desc("syncd_raft_last_index", "Last index in the Raft log of this node's replica of the shard."),
		restores: desc("syncd_raft_snapshot_restores_total", "Snapshots installed in this node's replica of the shard since start."),
		lag: desc("syncd_fanout_lag_entries",
			"Outbox records of the shard not yet delivered everywhere and trimmed (head − first retained + 1), as this node's replica sees them. The outbox is trimmed every 100 ms, so a busy shard shows about that much of its traffic; a lag that keeps growing is a destination behind."),
		leaseHeld: desc("syncd_raft_lease_held",
			"1 if this node's replica of the shard holds its lease (it leads, or heard from its leader within the lease), else 0: its sync streams send Stale instead of heartbeats."),
		deadLetters: desc("syncd_dead_letters",
			"Dead letters held by the shard (deliveries its fan-out could not complete), as this node's replica sees them; list them with syncctl dlq list."),
		deadLettersByReason: prometheus.NewDesc("syncd_dead_letters_by_reason",
			"Dead letters held by the shard by reason class: retryable (replayed automatically with backoff), permanent (waits for an operator), unknown (recorded before classes).",
			[]string{"shard", "reason"}, nil),
		deadLettersGaveUp: desc("syncd_dead_letters_gave_up",
			"Dead letters held by the shard whose automatic replays ended (cap of attempts, or refused for a reason not retried): they wait for an operator."),
		deadLettersArchived: desc("syncd_dead_letters_archived",
			"Dead letters in the shard's archive (not retried and older than dead_letter_archive_after); list them with syncctl dlq list -archived."),
	}
}

func (c *shardCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.isLeader, c.term, c.commit, c.applied, c.last, c.restores, c.lag, c.deadLetters, c.leaseHeld,
		c.deadLettersByReason, c.deadLettersGaveUp, c.deadLettersArchived} {
		ch <- d
	}
}

func (c *shardCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v uint64, shard string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), shard)
	}
	for _, st := range c.node.Status() {
		shard := strconv.FormatUint(uint64(st.Shard), 10)
		var leader uint64
		if st.State == "leader" {
			leader = 1
		}
		gauge(c.isLeader, leader, shard)
		if l, _, err := c.node.WatchLease(st.Shard); err == nil {
			var held uint64
			if l.Held {
				held = 1
			}
			gauge(c.leaseHeld, held, shard)
		}
		gauge(c.term, st.Term, shard)
		gauge(c.commit, st.CommitIndex, shard)
		gauge(c.applied, st.AppliedIndex, shard)
		gauge(c.last, st.LastIndex, shard)
		ch <- prometheus.MustNewConstMetric(c.restores, prometheus.CounterValue, float64(st.Restores), shard)
		// The outbox lives in the node's store: skip it once the shard has shut down (the store
		// is closing), and omit a series that cannot be read rather than failing the scrape.
		// The admin server must still be closed before the node (see admin.Server.Close).
		if st.State == "shutdown" {
			continue
		}
		if state, err := c.node.State(st.Shard); err == nil {
			if info, err := state.Outbox(); err == nil {
				var lag uint64
				if info.Head >= info.First {
					lag = info.Head - info.First + 1
				}
				gauge(c.lag, lag, shard)
			}
			if st, err := state.DeadLetterStats(); err == nil {
				gauge(c.deadLetters, st.Held, shard)
				for _, class := range log.DeadLetterClasses {
					ch <- prometheus.MustNewConstMetric(c.deadLettersByReason, prometheus.GaugeValue, float64(st.ByClass[class]), shard, class.String())
				}
				gauge(c.deadLettersGaveUp, st.GaveUp, shard)
				gauge(c.deadLettersArchived, st.Archived, shard)
			}
		}
	}
}

// handshakeRefused counts a connection refused for reason (one of the refused* constants).
func (m *metrics) handshakeRefused(reason string) {
	if m == nil {
		return
	}
	incReason(m.refused, refusedReasons[:], reason)
}

// requestRefused counts a request refused with overloaded for reason (one of the
// requestRefusedReasons).
func (m *metrics) requestRefused(reason string) {
	if m == nil {
		return
	}
	incReason(m.reqRefused, requestRefusedReasons[:], reason)
}

// labelledCounters makes a counter vector of one label and its counter for each of values, which
// exist from the start, at zero (a fixed label set: a scrape shows every one).
func labelledCounters(opts prometheus.CounterOpts, label string, values []string) (*prometheus.CounterVec, []prometheus.Counter) {
	vec := prometheus.NewCounterVec(opts, []string{label})
	counters := make([]prometheus.Counter, len(values))
	for i, v := range values {
		counters[i] = vec.WithLabelValues(v)
	}
	return vec, counters
}

// incReason increments the counter of counters that stands at reason's index in reasons.
func incReason(counters []prometheus.Counter, reasons []string, reason string) {
	for i, r := range reasons {
		if r == reason {
			counters[i].Inc()
		}
	}
}

// deliveryReported counts one report of deliveries with its result (one of reportResults).
func (m *metrics) deliveryReported(result string) {
	if m != nil {
		incReason(m.reports, reportResults[:], result)
	}
}

// sessionWelcomed counts a session welcomed over transport kind k.
func (m *metrics) sessionWelcomed(k transport.Kind) {
	if m != nil {
		incReason(m.sessions, transportKinds[:], string(k))
	}
}

// webRefusal counts a browser's request refused for reason (one of webRefusedReasons).
func (m *metrics) webRefusal(reason string) {
	if m != nil {
		incReason(m.webRefused, webRefusedReasons[:], reason)
	}
}

// writeTimedOut counts a stream reset because a write to it made no progress in time.
func (m *metrics) writeTimedOut() {
	if m != nil {
		m.writeStalls.Inc()
	}
}

// addressValidated counts a connection that proved its source address.
func (m *metrics) addressValidated() {
	if m != nil {
		m.validated.Inc()
	}
}
