package syncd

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/tracing"
	"github.com/syncd-dev/syncd/syncd/transport"
)

// Config configures a Server. Zero fields take the documented defaults, which together make a
// single node that needs no setup; Validate reports every problem at once.
type Config struct {
	// Dir is the data directory: the store, Raft snapshots, the token secret and the
	// self-signed certificate. Default "./syncd-data".
	Dir string
	// ListenAddr is the UDP address of the QUIC listener for clients. Default "127.0.0.1:7300".
	ListenAddr string
	// WebAddr is where browsers connect (PROTOCOL §2.3, §2.4), path /syncd/1: WebTransport over
	// HTTP/3 on its UDP port and WebSocket on its TCP port (plain ws:// when the address is
	// loopback, TLS otherwise). Default "": ListenAddr's host and the next port
	// (127.0.0.1:7301); "off" serves no browser.
	WebAddr string
	// DisableWebTransport and DisableWebSocket turn one of the two browser transports off.
	// Default: both on.
	DisableWebTransport, DisableWebSocket bool
	// AllowedOrigins is the allow-list of the page origins browsers may connect from:
	// "scheme://host[:port]", the port possibly "*", or "*" for any origin. Default
	// transport.DefaultOrigins: pages of the loopback host only.
	AllowedOrigins []string
	// AdminAddr is the TCP address of the admin HTTP server (/metrics, /healthz, /readyz,
	// /debug/pprof, the operator endpoints /v1/...). Default adminapi.DefaultAddr, on loopback:
	// expose it deliberately. An address that is not loopback needs AdminTokenFile.
	AdminAddr string
	// AdminTokenFile is the file holding the admin token (adminapi.ReadToken), the bearer
	// credential of /v1/... and /debug/pprof/; it must exist. Default: Dir/admin.token
	// (adminapi.TokenFile), created on first start, which only a loopback AdminAddr may use: a
	// node reachable from other machines runs with a token its operator made and keeps.
	AdminTokenFile string
	// AdminMetricsAuth makes /metrics need the admin token too. Default false: /metrics is open
	// (like /healthz and /readyz), for Prometheus.
	AdminMetricsAuth bool
	// NodeID, RaftAddr, Peers: see raftstore.Config. Defaults "n1", "127.0.0.1:7400", none.
	// Peers are the first nodes of a new cluster, each given the same list; a node joining an
	// existing cluster sets Join instead.
	NodeID   string
	RaftAddr string
	Peers    []raftstore.Peer
	// Join is the Raft address of any node of an existing cluster, for a new node that joins it:
	// the cluster then places replicas on it. Default none (a new cluster of Peers, or alone).
	Join string
	// ReplicationFactor is how many nodes hold a replica of each shard, capped by the number of
	// nodes. Default 3. Only a new cluster's first nodes use it; it is kept in the cluster map.
	ReplicationFactor int
	// PeerDial overrides the address used to dial a peer by node id, e.g. through a NAT or a
	// fault-injecting relay in tests; the cluster keeps the addresses nodes advertise. An id may
	// name a node that joins later. Default none.
	PeerDial map[string]string
	// Shards is the number of data shards (Raft groups) of a new cluster, fixed when the cluster
	// is created: a node joining a cluster or restarting on existing data follows the cluster
	// map's count and slot table instead. Default 4: on a node of two cores, four shards sent more
	// than two or eight (docs/OPERATIONS.md "How many shards", DECISIONS D70); a hot shard splits
	// later (`syncctl shard split`).
	Shards int
	// TokenSecret signs device tokens: the current key of the server's keyring, with which
	// MintToken signs and whose tokens it accepts. Default: Dir/token.key, created on first start.
	TokenSecret []byte
	// TokenKeys are more secrets whose tokens the server accepts (each named by its key id,
	// auth.KeyID): a new key rolled out to every node before it becomes TokenSecret, or an old
	// one being retired after it was replaced (docs/OPERATIONS.md, "Rotating the token key").
	// Default none.
	TokenKeys [][]byte
	// MaxTokenLifetime is the longest a token may be valid (its expiry minus its issue time);
	// a token valid for longer is refused, at Hello and in Refresh. It also bounds how long a
	// device revocation must be remembered. Default 720h (30 days).
	MaxTokenLifetime time.Duration
	// CertFile and KeyFile are the TLS certificate for clients. Default: a self-signed
	// certificate in Dir, created on first start; clients pin its fingerprint.
	CertFile, KeyFile string
	// NodeCAFile, NodeCertFile and NodeKeyFile secure the node plane (Raft, forwarded proposals,
	// calls: everything on RaftAddr) with mutual TLS 1.3: the cluster CA's certificate, and this
	// node's certificate (issued by that CA, naming NodeID) and key; all three or none. Default:
	// nodecert.CAFile, nodecert.CertFile and nodecert.KeyFile in Dir. A node with no other peer
	// and no Join creates a CA and its certificate there on first start; a node of a cluster must
	// be given them (syncctl cert create-ca, create-node), as every node shares one CA.
	NodeCAFile, NodeCertFile, NodeKeyFile string
	// InsecureNodePlane turns the node plane's TLS off: anyone who can reach RaftAddr can then
	// propose any command and read every log. For experiments only; logged as a warning at start.
	// Default false.
	InsecureNodePlane bool
	// Limits announced to clients; zero fields take the protocol defaults of
	// proto.Limits.WithDefaults (MaxFrame 1 MiB, MaxBody 64 KiB, MaxBatch 256, HeartbeatMs
	// 15000). The limits the server enforces from other fields are always announced from them:
	// SendRatePerS and SendBurst from SendRate and SendBurst, QueryRatePerS and QueryBurst from
	// QueryRate and QueryBurst, MaxStreams from MaxStreamsPerConn, RequestIdleMs from
	// RequestIdle (rates rounded down to whole tokens per second). MaxFrame must be at least
	// proto.MinFrameLimit (128 KiB) and hold the largest entry in a page
	// (proto.MaxEntryLen(MaxBody) + proto.PageOverhead); every frame the server sends fits it.
	Limits proto.Limits
	// DedupWindow is how long a client_msg_id is remembered. Default 24h.
	DedupWindow time.Duration
	// RecallWindow is how long after sending a message its sender may recall it. Default 2m.
	RecallWindow time.Duration
	// MaxConnections caps concurrent client connections; more get TooManyConnections with a
	// retry-after. Default 20000.
	MaxConnections int
	// MaxStreamsPerConn caps the bidirectional streams a connection may have open at once, the
	// control stream included (QUIC's stream limit; announced as max_streams). Clients may open
	// no unidirectional stream. Default 16.
	MaxStreamsPerConn int
	// RequestIdle is how long a request stream may go without a frame from the client before the
	// server closes it, after answering what it received (announced as request_idle_ms); it also
	// bounds the wait for a new stream's first frame. Default 5m.
	RequestIdle time.Duration
	// Retention bounds every user log; trimmed positions are answered "too old" and devices
	// rebase. Zero fields mean no bound (MinAge: no retention by device cursors); it is taken
	// as a whole, so setting any field leaves the others zero. The default keeps entries an
	// active device has not acked up to 30 days (MaxAge), entries every active device has acked
	// 7 days (MinAge, so that a device added later still finds a week in its log), and a device
	// unseen for 30 days (InactiveAfter) holds nothing (log.Retention, docs/DECISIONS.md D67).
	Retention log.Retention
	// ConvRetention bounds every conversation log (the history History pages, and what a large
	// group's members follow); trimmed positions are answered "too old", and a device behind
	// them rebases that source. Zero fields mean no bound, the default: chat history is kept.
	ConvRetention log.Retention
	// RetentionInterval is how often each shard leader applies Retention and ConvRetention.
	// Default 10m.
	RetentionInterval time.Duration
	// RequestTimeout bounds one request's replication. Default 10s.
	RequestTimeout time.Duration
	// SendRate and SendBurst bound each device's mutations: SendRate per second sustained,
	// SendBurst at once. Excess gets RateLimited with a retry-after. Defaults 20/s and 100.
	SendRate  float64
	SendBurst int
	// MaxInFlight caps the requests being served at once on this server: mutations while they
	// are replicated, queries while they read. Beyond it a request is refused at once with
	// Overloaded and a retry-after, rather than queueing into timeouts. Default 1024.
	MaxInFlight int
	// MaxAnswerBytesPerConn, MaxAnswerBytesPerDevice and MaxAnswerBytesPerUser cap the bytes of
	// answers this node holds for one connection, for all connections of one device, and for all
	// devices of one user: from the moment a request is read until its answer is written (an
	// answer being built counts max_frame if it may be a page, an answer waiting to be written
	// its encoded size, every request at least a few KiB). A request beyond any of them is
	// refused at once with Overloaded and a retry-after, so a client that does not read its
	// answers cannot make the node hold more. Each must hold one full page (Limits.MaxFrame
	// and the request's overhead), and PerConn ≤ PerDevice ≤ PerUser. Defaults 8 MiB, 16 MiB
	// and 32 MiB.
	MaxAnswerBytesPerConn   int64
	MaxAnswerBytesPerDevice int64
	MaxAnswerBytesPerUser   int64
	// WriteTimeout bounds how long a write to a client's request or sync stream may make no
	// progress (the client does not read, and QUIC flow control holds the write): then the
	// server resets the stream with Timeout, both ways, and releases what it held for it.
	// Default 10s.
	WriteTimeout time.Duration
	// MaxHandshakes caps connections being authenticated at once; beyond it new connections are
	// closed with Overloaded and a retry-after (reconnect storms). Once half of them are in use,
	// new connections must first prove their source address (QUIC Retry), so the other half
	// cannot be taken from spoofed addresses. Default 256.
	MaxHandshakes int
	// MaxHandshakesPerSource caps the connections being authenticated at once from one source
	// (an IPv4 address, or an IPv6 /64), so that one machine cannot take the whole MaxHandshakes
	// gate with connections that never say Hello; more are closed with Overloaded and a
	// retry-after. Default 16.
	MaxHandshakesPerSource int
	// HelloTimeout is how long a new connection has to send its Hello (from the end of the QUIC
	// handshake); a connection that has not is closed with Timeout. Default 5s.
	HelloTimeout time.Duration
	// QueryRate and QueryBurst bound each device's queries (ConvList, ConvState, History,
	// Members, HeadCheck) like SendRate and SendBurst its mutations. Defaults 50/s and 200.
	QueryRate  float64
	QueryBurst int
	// MaxConnectionsPerUser caps the connections one user may have open on this node, all its
	// devices together; more get TooManyConnections with a retry-after. Default 32.
	MaxConnectionsPerUser int
	// MaxGroupSize caps a group's members. Default 100000 (log.DefaultMaxGroupSize).
	MaxGroupSize int
	// LargeGroupThreshold is the most members a group may have and still be copied into every
	// member's log; past it a group is large for good: its members' devices follow its
	// conversation log as a source of their sync streams (read diffusion, docs/ARCHITECTURE.md
	// "Large groups"). Default 1000 (log.DefaultLargeGroupThreshold).
	LargeGroupThreshold int
	// StatusFanoutLimit is the largest group whose delivered steps reach the senders as entries
	// of their logs (kind delivered, like receipts); in larger groups the marks and counts move
	// but only the Receipts query shows them, so that one message does not bring the sender an
	// entry per member. Default 100 (log.DefaultStatusFanoutLimit).
	StatusFanoutLimit int
	// DisableDeliveryReports turns off the delivered step (delivery.go): the leader of each shard
	// reports what its users' devices acked to the conversations concerned, which tell the
	// senders. A cluster upgrading from a version without it (one whose nodes cannot apply the
	// delivered appends and op 11) runs with it off until every node has the new version.
	DisableDeliveryReports bool
	// DeliveryReportInterval is how often the leader of a shard reports what its users' devices
	// acked to the conversations concerned (delivery.go): the delay of the delivered step and
	// how much one report coalesces. Default 250ms.
	DeliveryReportInterval time.Duration
	// MembersPerMinute caps the users one user may name in group creations and additions per
	// minute, so nobody fills others' logs with groups; at least proto.MaxMembers (one full
	// request). Default 2000.
	MembersPerMinute int
	// MaxGroupsPerUser caps the groups one user may be a member of: a creation or an addition
	// naming a user already in that many is refused with TooManyGroups, so nobody can bury
	// another user's conversation list; users the named user has not talked to fill at most four
	// fifths of it, so that nobody can spend it for them (groupquota.go). The count is the user's
	// own shard's (log.Shard.UserGroups), which this node makes up for the changes it admitted
	// until they are delivered; through several nodes a burst can pass the cap by what the others
	// admitted meanwhile. Default 1000.
	MaxGroupsPerUser int
	// MinFreeDisk is the free-space watermark, in bytes, of the disk holding Dir: below it the
	// node refuses sends and group changes with Unavailable and a retry-after, and /readyz says
	// why, while reads, syncs, deliveries and trims go on; below half of it the node does not
	// start. Default 256 MiB; negative turns the watermark off. See raftstore.Config.MinFreeDisk.
	MinFreeDisk int64
	// DeadLetterRetryBase is how long after its refusal a retryable dead letter (a destination
	// that refused for a state that passes, such as a move's fence) is first replayed by its
	// source shard's leader; each refused replay doubles the wait, up to a day. Default 1m.
	DeadLetterRetryBase time.Duration
	// DeadLetterRetryMaxAttempts caps the automatic replays of one dead letter; after the last
	// refused one it waits for an operator. Negative: no automatic replays. Default 8 (with the
	// default base, the last about 4 hours after the refusal).
	DeadLetterRetryMaxAttempts int
	// DeadLetterArchiveAfter moves a dead letter that is not being retried to its shard's
	// archive once it is this old, out of the held count and its alerts; archived ones are
	// listed, replayed and dropped apart, and leave the archive only by an operator's act.
	// Negative: never. Default 30 days.
	DeadLetterArchiveAfter time.Duration
	// DisableDeadLetterProcess records dead letters as before the process (no refusal code, no
	// automatic replays, no archive). Without it the process still waits, by itself, until every
	// node of the cluster applies its commands (ops 13 and 14, v2 dead-letter requests: the
	// format level, formats.go), so a rolling upgrade needs no setting.
	DisableDeadLetterProcess bool
	// TraceEndpoint turns tracing on: each message's send, commit, fan-out, delivery, push and
	// device ack become OpenTelemetry spans posted to this OTLP/HTTP collector URL (http:// or
	// https://; with no path, /v1/traces), attributes ids only (syncd/tracing). Default "": off,
	// no exporter and no goroutine. OTEL_EXPORTER_OTLP_ENDPOINT does not turn it on.
	TraceEndpoint string
	// TraceSampleRatio is the share of sends traced when TraceEndpoint is set, in (0, 1]; the
	// later steps of a message follow its send's decision. Default 1.
	TraceSampleRatio float64
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns what the zero fields of a Config stand for: a single node that needs no
// setup, each field's comment naming its default. It is the one place those defaults are
// written: cmd/syncd derives its flags, config file keys and -print-config output from it, and
// a Config field left zero and the same field copied from DefaultConfig give the same Server.
// Peers, Join, PeerDial, TokenSecret, TokenKeys, CertFile, KeyFile, AdminTokenFile, AdminMetricsAuth, the
// node certificate files, InsecureNodePlane and TraceEndpoint have no default (the zero value is the documented
// behaviour); Logger stays nil, meaning slog.Default() as of NewServer.
// The Limits fields announced from other fields (SendRatePerS, SendBurst, QueryRatePerS,
// QueryBurst, MaxStreams, RequestIdleMs) stay 0: the server always sets them from those.
func DefaultConfig() Config {
	return Config{
		Dir:               "./syncd-data",
		ListenAddr:        "127.0.0.1:7300",
		AllowedOrigins:    slices.Clone(transport.DefaultOrigins),
		AdminAddr:         adminapi.DefaultAddr,
		NodeID:            "n1",
		RaftAddr:          "127.0.0.1:7400",
		Shards:            4,
		ReplicationFactor: cluster.DefaultConfig().ReplicationFactor,
		Limits:            proto.Limits{}.WithDefaults(),
		DedupWindow:       time.Duration(log.DefaultDedupWindow),
		RecallWindow:      time.Duration(log.DefaultRecallWindow),
		MaxConnections:    20000,
		MaxStreamsPerConn: 16,
		RequestIdle:       5 * time.Minute,
		Retention: log.Retention{MaxAge: int64(30 * 24 * time.Hour), MinAge: int64(7 * 24 * time.Hour),
			InactiveAfter: int64(30 * 24 * time.Hour)},
		RetentionInterval: 10 * time.Minute,
		RequestTimeout:    10 * time.Second,
		SendRate:          20,
		SendBurst:         100,
		MaxInFlight:       1024,
		WriteTimeout:      10 * time.Second,
		MaxHandshakes:     256,
		HelloTimeout:      5 * time.Second,
		MaxTokenLifetime:  30 * 24 * time.Hour,
		QueryRate:         50,
		QueryBurst:        200,

		MaxConnectionsPerUser:  32,
		MaxGroupSize:           log.DefaultMaxGroupSize,
		LargeGroupThreshold:    log.DefaultLargeGroupThreshold,
		StatusFanoutLimit:      log.DefaultStatusFanoutLimit,
		DeliveryReportInterval: 250 * time.Millisecond,
		MembersPerMinute:       2000,
		MaxGroupsPerUser:       1000,
		MinFreeDisk:            raftstore.DefaultConfig().MinFreeDisk,
		TraceSampleRatio:       1,

		DeadLetterRetryBase:        time.Minute,
		DeadLetterRetryMaxAttempts: 8,
		DeadLetterArchiveAfter:     30 * 24 * time.Hour,

		MaxHandshakesPerSource: 16,

		MaxAnswerBytesPerConn:   8 << 20,
		MaxAnswerBytesPerDevice: 16 << 20,
		MaxAnswerBytesPerUser:   32 << 20,
	}
}

// withDefaults returns a copy of c with every zero field set from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.Dir = cmp.Or(c.Dir, d.Dir)
	c.ListenAddr = cmp.Or(c.ListenAddr, d.ListenAddr)
	if c.WebAddr == "" {
		c.WebAddr = nextPort(c.ListenAddr)
	}
	if c.AllowedOrigins == nil {
		c.AllowedOrigins = d.AllowedOrigins
	}
	c.AdminAddr = cmp.Or(c.AdminAddr, d.AdminAddr)
	c.NodeID = cmp.Or(c.NodeID, d.NodeID)
	c.RaftAddr = cmp.Or(c.RaftAddr, d.RaftAddr)
	c.Shards = cmp.Or(c.Shards, d.Shards)
	c.ReplicationFactor = cmp.Or(c.ReplicationFactor, d.ReplicationFactor)
	c.Limits = c.Limits.WithDefaults() // per field, as DefaultConfig's Limits came about
	c.DedupWindow = cmp.Or(c.DedupWindow, d.DedupWindow)
	c.RecallWindow = cmp.Or(c.RecallWindow, d.RecallWindow)
	c.MaxConnections = cmp.Or(c.MaxConnections, d.MaxConnections)
	c.MaxStreamsPerConn = cmp.Or(c.MaxStreamsPerConn, d.MaxStreamsPerConn)
	c.RequestIdle = cmp.Or(c.RequestIdle, d.RequestIdle)
	c.Retention = cmp.Or(c.Retention, d.Retention) // only as a whole: one bound set means the other is off
	c.RetentionInterval = cmp.Or(c.RetentionInterval, d.RetentionInterval)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, d.RequestTimeout)
	c.SendRate = cmp.Or(c.SendRate, d.SendRate)
	c.SendBurst = cmp.Or(c.SendBurst, d.SendBurst)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, d.MaxInFlight)
	c.MaxAnswerBytesPerConn = cmp.Or(c.MaxAnswerBytesPerConn, d.MaxAnswerBytesPerConn)
	c.MaxAnswerBytesPerDevice = cmp.Or(c.MaxAnswerBytesPerDevice, d.MaxAnswerBytesPerDevice)
	c.MaxAnswerBytesPerUser = cmp.Or(c.MaxAnswerBytesPerUser, d.MaxAnswerBytesPerUser)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, d.WriteTimeout)
	c.QueryRate = cmp.Or(c.QueryRate, d.QueryRate)
	c.QueryBurst = cmp.Or(c.QueryBurst, d.QueryBurst)
	c.MaxConnectionsPerUser = cmp.Or(c.MaxConnectionsPerUser, d.MaxConnectionsPerUser)
	c.MaxGroupSize = cmp.Or(c.MaxGroupSize, d.MaxGroupSize)
	c.LargeGroupThreshold = cmp.Or(c.LargeGroupThreshold, d.LargeGroupThreshold)
	c.StatusFanoutLimit = cmp.Or(c.StatusFanoutLimit, d.StatusFanoutLimit)
	c.DeliveryReportInterval = cmp.Or(c.DeliveryReportInterval, d.DeliveryReportInterval)
	c.MembersPerMinute = cmp.Or(c.MembersPerMinute, d.MembersPerMinute)
	c.MaxGroupsPerUser = cmp.Or(c.MaxGroupsPerUser, d.MaxGroupsPerUser)
	c.MaxHandshakes = cmp.Or(c.MaxHandshakes, d.MaxHandshakes)
	c.MinFreeDisk = cmp.Or(c.MinFreeDisk, d.MinFreeDisk)
	c.DeadLetterRetryBase = cmp.Or(c.DeadLetterRetryBase, d.DeadLetterRetryBase)
	c.DeadLetterRetryMaxAttempts = cmp.Or(c.DeadLetterRetryMaxAttempts, d.DeadLetterRetryMaxAttempts)
	c.DeadLetterArchiveAfter = cmp.Or(c.DeadLetterArchiveAfter, d.DeadLetterArchiveAfter)
	c.TraceSampleRatio = cmp.Or(c.TraceSampleRatio, d.TraceSampleRatio)
	c.Limits.SendRatePerS, c.Limits.SendBurst = uint32(c.SendRate), uint32(c.SendBurst)
	c.Limits.QueryRatePerS, c.Limits.QueryBurst = uint32(c.QueryRate), uint32(c.QueryBurst)
	c.Limits.MaxStreams = uint32(c.MaxStreamsPerConn)
	c.Limits.RequestIdleMs = uint32(min(c.RequestIdle.Milliseconds(), math.MaxUint32))
	c.MaxHandshakesPerSource = cmp.Or(c.MaxHandshakesPerSource, d.MaxHandshakesPerSource)
	c.HelloTimeout = cmp.Or(c.HelloTimeout, d.HelloTimeout)
	c.MaxTokenLifetime = cmp.Or(c.MaxTokenLifetime, d.MaxTokenLifetime)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports every problem with the configuration (after defaults), joined.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Shards < 1 || c.Shards > cluster.NumSlots {
		errs = append(errs, fmt.Errorf("syncd: Shards %d must be between 1 and %d", c.Shards, cluster.NumSlots))
	}
	if c.Join != "" && len(c.Peers) > 0 {
		errs = append(errs, errors.New("syncd: Join and Peers exclude each other: join an existing cluster, or start a new one with Peers"))
	}
	if c.ReplicationFactor < 1 {
		errs = append(errs, errors.New("syncd: ReplicationFactor must be ≥ 1"))
	}
	for id, addr := range c.PeerDial {
		if addr == "" {
			errs = append(errs, fmt.Errorf("syncd: PeerDial gives %q an empty address", id))
		}
	}
	if c.WebAddr != WebOff {
		if _, _, err := net.SplitHostPort(c.WebAddr); err != nil {
			errs = append(errs, fmt.Errorf("syncd: WebAddr %q: %v (host:port, or %q)", c.WebAddr, err, WebOff))
		}
	}
	if _, err := transport.ParseOrigins(c.AllowedOrigins); err != nil {
		errs = append(errs, fmt.Errorf("syncd: AllowedOrigins: %w", err))
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		errs = append(errs, errors.New("syncd: CertFile and KeyFile go together: set both or neither"))
	}
	if c.AdminTokenFile == "" && !loopback(c.AdminAddr) {
		errs = append(errs, fmt.Errorf("syncd: the admin address %s is not loopback, and the admin token is the "+
			"one generated in the data directory (%s), which serves loopback only: create a token of your own "+
			"(openssl rand -hex 32 > admin.token; chmod 600 admin.token), give it with AdminTokenFile "+
			"(syncd -admin-token-file), and hand it to operators only; or bind the admin address to 127.0.0.1",
			c.AdminAddr, adminapi.TokenFile))
	}
	if nodeFiles := []string{c.NodeCAFile, c.NodeCertFile, c.NodeKeyFile}; slices.Contains(nodeFiles, "") && slices.ContainsFunc(nodeFiles, func(f string) bool { return f != "" }) {
		errs = append(errs, errors.New("syncd: NodeCAFile, NodeCertFile and NodeKeyFile go together: set all three or none"))
	}
	if c.InsecureNodePlane && c.NodeCAFile+c.NodeCertFile+c.NodeKeyFile != "" {
		errs = append(errs, errors.New("syncd: InsecureNodePlane turns the node plane's TLS off: give it no node certificate files"))
	}
	if c.TokenSecret != nil && len(c.TokenSecret) < 16 {
		errs = append(errs, errors.New("syncd: TokenSecret must be at least 16 bytes"))
	}
	for i, k := range c.TokenKeys {
		if len(k) < 16 {
			errs = append(errs, fmt.Errorf("syncd: TokenKeys[%d] must be at least 16 bytes", i))
		}
	}
	if c.MaxTokenLifetime < time.Second {
		errs = append(errs, errors.New("syncd: MaxTokenLifetime must be at least a second (tokens count whole seconds)"))
	}
	if c.HelloTimeout < 100*time.Millisecond || c.HelloTimeout > time.Minute {
		errs = append(errs, fmt.Errorf("syncd: HelloTimeout %v must be between 100ms and 1m: a client says Hello right after the QUIC handshake", c.HelloTimeout))
	}
	if c.MaxHandshakesPerSource < 1 {
		errs = append(errs, errors.New("syncd: MaxHandshakesPerSource must be ≥ 1"))
	}
	if c.DeadLetterRetryBase < 0 {
		errs = append(errs, errors.New("syncd: DeadLetterRetryBase must be positive"))
	}
	if c.DedupWindow < time.Minute {
		errs = append(errs, errors.New("syncd: DedupWindow below a minute would let app retries duplicate messages"))
	}
	if c.MaxConnections < 1 || c.MaxStreamsPerConn < 2 {
		errs = append(errs, errors.New("syncd: MaxConnections must be ≥ 1 and MaxStreamsPerConn ≥ 2"))
	}
	if c.RequestIdle < 0 || c.RequestIdle.Milliseconds() > math.MaxUint32 {
		errs = append(errs, errors.New("syncd: RequestIdle must be positive and at most 49 days (request_idle_ms is a uint32)"))
	}
	if c.SendRate < 0 || c.SendBurst < 1 || c.MaxInFlight < 1 || c.MaxHandshakes < 1 {
		errs = append(errs, errors.New("syncd: SendRate must be ≥ 0 and SendBurst, MaxInFlight, MaxHandshakes ≥ 1"))
	}
	if c.QueryRate < 0 || c.QueryBurst < 1 || c.MaxConnectionsPerUser < 1 || c.MaxGroupSize < 2 || c.MaxGroupsPerUser < 1 ||
		c.StatusFanoutLimit < 2 || c.LargeGroupThreshold < 2 || c.DeliveryReportInterval < 0 {
		errs = append(errs, errors.New("syncd: QueryRate must be ≥ 0, QueryBurst, MaxConnectionsPerUser and MaxGroupsPerUser ≥ 1, MaxGroupSize, StatusFanoutLimit and LargeGroupThreshold ≥ 2, DeliveryReportInterval ≥ 0"))
	}
	if c.MembersPerMinute < proto.MaxMembers {
		errs = append(errs, fmt.Errorf("syncd: MembersPerMinute %d must be at least %d, the members one request may name", c.MembersPerMinute, proto.MaxMembers))
	}
	// A connection, a device and a user must each be able to have one page answer in flight, or
	// some requests could never be served.
	if need := pageAnswerCost(int(c.Limits.MaxFrame)); c.MaxAnswerBytesPerConn < need ||
		c.MaxAnswerBytesPerDevice < c.MaxAnswerBytesPerConn || c.MaxAnswerBytesPerUser < c.MaxAnswerBytesPerDevice {
		errs = append(errs, fmt.Errorf("syncd: MaxAnswerBytesPerConn %d, MaxAnswerBytesPerDevice %d and MaxAnswerBytesPerUser %d must each be at least %d (one page answer of Limits.MaxFrame %d), in that order",
			c.MaxAnswerBytesPerConn, c.MaxAnswerBytesPerDevice, c.MaxAnswerBytesPerUser, need, c.Limits.MaxFrame))
	}
	if err := tracing.CheckEndpoint(c.TraceEndpoint); err != nil {
		errs = append(errs, fmt.Errorf("syncd: TraceEndpoint: %w", err))
	}
	if !(c.TraceSampleRatio > 0 && c.TraceSampleRatio <= 1) {
		errs = append(errs, fmt.Errorf("syncd: TraceSampleRatio %v must be in (0, 1]", c.TraceSampleRatio))
	}
	if c.WriteTimeout < 100*time.Millisecond || c.WriteTimeout > 10*time.Minute {
		errs = append(errs, fmt.Errorf("syncd: WriteTimeout %v must be between 100ms and 10m", c.WriteTimeout))
	}
	// Every entry must fit a page on its own, or a sync stream could never get past it: the
	// largest entry (a full body, or a CreateGroup of proto.MaxMembers long ids) plus what a
	// page frame adds (proto.PageOverhead) must fit max_frame. proto.MinFrameLimit is chosen to
	// hold it (a proto test checks), and is the protocol's floor besides.
	maxFrame, maxBody := int(c.Limits.MaxFrame), int(c.Limits.MaxBody)
	entry := proto.MaxEntryLen(maxBody)
	if need := max(proto.MinFrameLimit, entry+proto.PageOverhead); maxFrame < need {
		errs = append(errs, fmt.Errorf("syncd: Limits.MaxFrame %d is too small: a frame must carry the largest entry (%d bytes encoded with MaxBody %d) in a page (up to %d bytes more), and the protocol's minimum is %d; set it to at least %d",
			maxFrame, entry, maxBody, proto.PageOverhead, proto.MinFrameLimit, need))
	}
	return errors.Join(errs...)
}

// WebOff is the WebAddr that serves no browser.
const WebOff = "off"

// nextPort is hostport with the next port number (port 0 stays 0: any free port); hostport
// itself if it does not parse (Validate says why).
func nextPort(hostport string) string {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport
	}
	n, err := strconv.Atoi(port)
	if err != nil || n >= 65535 {
		return hostport
	}
	if n > 0 {
		n++
	}
	return net.JoinHostPort(host, strconv.Itoa(n))
}

// loopback reports whether the host of hostport is a loopback address: an IP literal in
// 127.0.0.0/8 or ::1, or "localhost". Any other name counts as not loopback (it may resolve to
// anything), and so does an empty host (every interface).
func loopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// peerAddr returns the raftstore.Config.PeerAddr for PeerDial, nil without overrides; a peer
// without an override gets "", its known address.
func (c Config) peerAddr() func(id string) string {
	if len(c.PeerDial) == 0 {
		return nil
	}
	addrs := maps.Clone(c.PeerDial)
	return func(id string) string { return addrs[id] }
}
