package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/raftstore/nodecert"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/auth"
)

// Defaults of the two settings that are cmd/syncd's own: they build the Logger, which
// syncd.Config takes ready-made.
const (
	defaultLogLevel  = "info"
	defaultLogFormat = "text"
)

// defaultMemoryLimit is the default of memory_limit, the other setting of cmd/syncd's own: the
// Go runtime's, process-wide (memory.go).
const defaultMemoryLimit = memoryLimitAuto

// defaults returns the settings of a node started with no flags and no file: syncd.DefaultConfig
// as the file spells it, so that -h, -print-config and docs/syncd.example.toml show real values
// without cmd/syncd writing any of them down.
func defaults() fileConfig {
	c := fromConfig(syncd.DefaultConfig())
	c.LogLevel, c.LogFormat, c.MemoryLimit = defaultLogLevel, defaultLogFormat, defaultMemoryLimit
	return c
}

// fromConfig spells cfg as settings; toConfig is its inverse. TokenSecret and TokenKeys have no
// spelling (the file names paths to them) and are left out; so are the log settings, which cfg
// holds as a Logger.
func fromConfig(cfg syncd.Config) fileConfig {
	c := fileConfig{
		DataDir: cfg.Dir, Listen: cfg.ListenAddr, Admin: cfg.AdminAddr, NodeID: cfg.NodeID,
		WebListen: cfg.WebAddr, WebTransport: !cfg.DisableWebTransport, WebSocket: !cfg.DisableWebSocket,
		AllowedOrigins: slices.Clone(cfg.AllowedOrigins),
		AdminTokenFile: cfg.AdminTokenFile, AdminMetricsAuth: cfg.AdminMetricsAuth,
		RaftAddr: cfg.RaftAddr, Shards: cfg.Shards, Join: cfg.Join, ReplicationFactor: cfg.ReplicationFactor,
		Cert: cfg.CertFile, Key: cfg.KeyFile,
		NodeCA: cfg.NodeCAFile, NodeCert: cfg.NodeCertFile, NodeKey: cfg.NodeKeyFile, InsecureNodePlane: cfg.InsecureNodePlane,
		// Empty rather than nil lists, so that they are printed ("peers = []") like every key.
		Peers: []string{}, PeerDial: []string{}, TokenKeys: []string{},
		MaxFrame: int(cfg.Limits.MaxFrame), MaxBody: int(cfg.Limits.MaxBody), MaxBatch: int(cfg.Limits.MaxBatch),
		HeartbeatInterval: duration(time.Duration(cfg.Limits.HeartbeatMs) * time.Millisecond),
		DedupWindow:       duration(cfg.DedupWindow), RecallWindow: duration(cfg.RecallWindow),
		MaxConnections: cfg.MaxConnections, MaxStreamsPerConn: cfg.MaxStreamsPerConn, RequestIdle: duration(cfg.RequestIdle),
		RetentionMaxCount: cfg.Retention.MaxCount, RetentionMaxAge: duration(cfg.Retention.MaxAge),
		RetentionMinAge: duration(cfg.Retention.MinAge), DeviceInactiveAfter: duration(cfg.Retention.InactiveAfter),
		ConvRetentionMaxCount: cfg.ConvRetention.MaxCount, ConvRetentionMaxAge: duration(cfg.ConvRetention.MaxAge),
		RetentionInterval: duration(cfg.RetentionInterval), RequestTimeout: duration(cfg.RequestTimeout),
		SendRate: cfg.SendRate, SendBurst: cfg.SendBurst, MaxInFlight: cfg.MaxInFlight, MaxHandshakes: cfg.MaxHandshakes,
		QueryRate: cfg.QueryRate, QueryBurst: cfg.QueryBurst, MaxConnsPerUser: cfg.MaxConnectionsPerUser,
		MaxGroupSize: cfg.MaxGroupSize, LargeGroupThreshold: cfg.LargeGroupThreshold, MembersPerMinute: cfg.MembersPerMinute, MaxGroupsPerUser: cfg.MaxGroupsPerUser,
		DeliveryReports: !cfg.DisableDeliveryReports, StatusFanoutLimit: cfg.StatusFanoutLimit, DeliveryReportInterval: duration(cfg.DeliveryReportInterval),
		MinFreeDisk:      byteSize(max(cfg.MinFreeDisk, 0)), // negative (off) is spelled 0
		MaxTokenLifetime: duration(cfg.MaxTokenLifetime), HelloTimeout: duration(cfg.HelloTimeout),
		MaxHandshakesPerSource: cfg.MaxHandshakesPerSource,
		MaxAnswerBytesPerConn:  int(cfg.MaxAnswerBytesPerConn), MaxAnswerBytesPerDev: int(cfg.MaxAnswerBytesPerDevice),
		MaxAnswerBytesPerUser: int(cfg.MaxAnswerBytesPerUser), WriteTimeout: duration(cfg.WriteTimeout),
		TraceOTLPEndpoint: cfg.TraceEndpoint, TraceSampleRatio: cfg.TraceSampleRatio,
		DeadLetterProcess: !cfg.DisableDeadLetterProcess, DeadLetterRetryBase: duration(cfg.DeadLetterRetryBase),
		DeadLetterRetryMax:     max(cfg.DeadLetterRetryMaxAttempts, 0),       // negative (off) is spelled 0
		DeadLetterArchiveAfter: duration(max(cfg.DeadLetterArchiveAfter, 0)), // negative (never) is spelled 0
	}
	for _, p := range cfg.Peers {
		c.Peers = append(c.Peers, p.ID+"="+p.Addr)
	}
	for _, id := range slices.Sorted(maps.Keys(cfg.PeerDial)) {
		c.PeerDial = append(c.PeerDial, id+"="+cfg.PeerDial[id])
	}
	return c
}

// A setting is one key of the config file and the flag of the same name in kebab-case
// (data_dir, -data-dir). The table settings is the one list of them: the flags, -h, and the
// commented file -print-config writes (docs/syncd.example.toml is its output for no flags and
// no file) all come from it, and its defaults from defaults().
type setting struct {
	key     string                // TOML key
	section string                // if set, a "--- section ---" heading before the key
	usage   string                // one-line flag help; a `quoted` word names the value in -h
	doc     string                // the comment above the key; "\n" starts a new line
	means   string                // appended to "Default <value>" when the value alone does not say
	field   func(*fileConfig) any // the field of fileConfig holding the value, as a pointer
}

var settings = []setting{
	{key: "data_dir", section: "Node", field: func(c *fileConfig) any { return &c.DataDir },
		usage: "directory for the store, snapshots, token secret, admin token and certificate",
		doc:   "Directory for the store, Raft snapshots, the token secret, the admin token and the self-signed certificate."},
	{key: "min_free_disk", field: func(c *fileConfig) any { return &c.MinFreeDisk },
		usage: "free `size` (bytes, or with a unit: 256MiB, 1GiB) on data_dir's disk below which the node refuses new writes " +
			"and hands its leaderships away (0: off); it does not start below half",
		doc: "Free space on the disk holding data_dir below which the node refuses sends and group changes " +
			"with Unavailable and a retry-after while it leads their shard, and hands its shard leaderships " +
			"to nodes with room (reads, syncs, deliveries and trims go on, /readyz says why), until an eighth " +
			"more is free again. The node does not start below half of it. A size: bytes, or a number with " +
			"a unit (KiB, MiB, GiB, TiB), such as \"256MiB\" or \"1GiB\". 0 turns the watermark off (a start " +
			"still needs room to replay the write-ahead log)."},
	{key: "listen", field: func(c *fileConfig) any { return &c.Listen },
		usage: "UDP `host:port` of the QUIC listener for clients",
		doc:   "UDP host:port of the QUIC listener for clients."},
	{key: "web_listen", field: func(c *fileConfig) any { return &c.WebListen },
		usage: "`host:port` browsers connect to: WebTransport on its UDP port, WebSocket on its TCP port (\"off\": none)",
		doc: "host:port browsers connect to, path /syncd/1 (docs/PROTOCOL.md §2.3, §2.4): WebTransport over " +
			"HTTP/3 on its UDP port, WebSocket on its TCP port (plain ws:// on a loopback address, TLS with cert " +
			"otherwise). \"off\" serves no browser.",
		means: ": listen's host and the next port (127.0.0.1:7301)"},
	{key: "webtransport", field: func(c *fileConfig) any { return &c.WebTransport },
		usage: "serve browsers over WebTransport on -web-listen",
		doc: "Serve browsers over WebTransport on web_listen. Without cert, pages pin the node's short-lived " +
			"browser certificates (GET /v1/webtransport/certs on the admin port)."},
	{key: "websocket", field: func(c *fileConfig) any { return &c.WebSocket },
		usage: "serve browsers over WebSocket on -web-listen (the fallback where WebTransport cannot run)",
		doc:   "Serve browsers over WebSocket on web_listen: the fallback where UDP is blocked or WebTransport is missing."},
	{key: "allowed_origins", field: func(c *fileConfig) any { return &c.AllowedOrigins },
		usage: "comma-separated page `origins` browsers may connect from (scheme://host[:port], port may be *; * for any)",
		doc: "Page origins browsers may connect from: \"scheme://host[:port]\" as the browser sends it, the port " +
			"possibly \"*\"; \"*\" alone allows every origin. A page of another origin is refused (403).\n" +
			`Example: allowed_origins = ["https://chat.example.com"]`,
		means: ": pages served from the loopback host only"},
	{key: "admin", field: func(c *fileConfig) any { return &c.Admin },
		usage: "TCP `host:port` of the admin HTTP server: /metrics, /healthz, /readyz, /debug/pprof",
		doc: "TCP host:port of the admin HTTP server: /metrics, /healthz, /readyz, /debug/pprof and the " +
			"operator endpoints syncctl uses, which need the admin token (admin_token_file). An address " +
			"that is not loopback needs admin_token_file set."},
	{key: "admin_token_file", field: func(c *fileConfig) any { return &c.AdminTokenFile },
		usage: "`file` holding the admin token, the bearer credential of /v1 and /debug/pprof (default: " +
			adminapi.TokenFile + " in -data-dir, created on first start, for a loopback -admin only)",
		doc: "File holding the admin token, the bearer credential syncctl and curl present " +
			"(\"Authorization: Bearer <token>\") to /v1/... and /debug/pprof/: 32 to 512 characters of " +
			"A-Z a-z 0-9 - . _ ~ + / =, e.g. made with \"openssl rand -hex 32\". Required when admin is " +
			"not a loopback address.",
		means: fmt.Sprintf(": data_dir/%s, created on first start (for a loopback admin address only)", adminapi.TokenFile)},
	{key: "admin_metrics_auth", field: func(c *fileConfig) any { return &c.AdminMetricsAuth },
		usage: "require the admin token for /metrics too",
		doc:   "Require the admin token for /metrics too (a Prometheus scrape then sends it: authorization.credentials_file).",
		means: ": /metrics is open, like /healthz and /readyz"},
	{key: "node_id", field: func(c *fileConfig) any { return &c.NodeID },
		usage: "this node's `id`, unique in the cluster",
		doc: fmt.Sprintf("This node's id, unique in the cluster: 1-%d printable ASCII characters, no space, "+
			`"=" or ",".`, log.MaxIDLen)},
	{key: "raft_addr", field: func(c *fileConfig) any { return &c.RaftAddr },
		usage: "`host:port` of the node's Raft listener (shared by all shards)",
		doc: "host:port of the node's Raft listener, shared by all shards; the other nodes dial the " +
			"address that peers gives for this node."},

	{key: "shards", section: "Cluster", field: func(c *fileConfig) any { return &c.Shards },
		usage: "number of shards (Raft groups) of a new cluster; a joining or restarting node follows the cluster map",
		doc: fmt.Sprintf("Number of shards (Raft groups) of a new cluster, 1 to %d, fixed when the cluster "+
			"is created: a node joining a cluster or restarting on its data follows the cluster map instead.", cluster.NumSlots)},
	{key: "peers", field: func(c *fileConfig) any { return &c.Peers },
		usage: "static cluster: comma-separated `id=host:port` (Raft addresses) of every node, this one included",
		doc: "A new cluster's first nodes: \"id=host:port\" (Raft address) of each of them, this one " +
			"included, the same list on every one. More nodes join later with join.\n" +
			`Example: peers = ["n1=10.0.0.1:7400", "n2=10.0.0.2:7400", "n3=10.0.0.3:7400"]`,
		means: ": a new single-node cluster (or, with join, none)"},
	{key: "peer_dial", field: func(c *fileConfig) any { return &c.PeerDial },
		usage: "comma-separated `id=host:port`: dial these peers there instead of the address the cluster knows (NAT, test relays)",
		doc: "Per-peer dial overrides, \"id=host:port\": dial these peers at that address instead of " +
			"their peers address, e.g. through a NAT or a fault-injecting relay in tests. The Raft " +
			"configuration keeps the addresses nodes advertise. An id may name a node that joins later.\n" +
			`Example: peer_dial = ["n2=192.168.1.20:7400"]`},
	{key: "join", field: func(c *fileConfig) any { return &c.Join },
		usage: "Raft `host:port` of any node of an existing cluster, for a new node joining it (instead of -peers)",
		doc: "A new node joining an existing cluster: the Raft address of any of its nodes (instead of " +
			"peers). The cluster then places replicas on this node.\n" +
			`Example: join = "10.0.0.1:7400"`,
		means: " (none)"},
	{key: "replication_factor", field: func(c *fileConfig) any { return &c.ReplicationFactor },
		usage: "replicas of each shard, capped by the number of nodes; set by a new cluster's first nodes",
		doc: "Replicas of each shard, capped by the number of nodes. Only a new cluster's first nodes " +
			"use it; the cluster keeps it in its map."},

	{key: "cert", section: "Security", field: func(c *fileConfig) any { return &c.Cert },
		usage: "TLS certificate `file` for clients (default: self-signed, created in -data-dir)",
		doc:   "TLS certificate file for clients, together with key.",
		means: fmt.Sprintf(": a self-signed certificate created in data_dir (%s) on first start; clients pin "+
			"its fingerprint (logged at start)", auth.TLSCertFile)},
	{key: "key", field: func(c *fileConfig) any { return &c.Key },
		usage: "TLS key `file`, with -cert",
		doc:   "TLS key file of cert: both or neither.",
		means: fmt.Sprintf(": the self-signed certificate's, in data_dir (%s)", auth.TLSKeyFile)},
	{key: "token_secret_file", field: func(c *fileConfig) any { return &c.TokenSecretFile },
		usage: "`file` holding the token-signing secret, shared by the cluster (default: token.key in -data-dir, created on first start)",
		doc: "File holding the secret that signs device tokens (hex, the format of token.key in a data " +
			"directory). Every node of a cluster needs the same secret: copy token.key from the first node.",
		means: fmt.Sprintf(": data_dir/%s, created on first start", auth.TokenKeyFile)},
	{key: "token_keys", field: func(c *fileConfig) any { return &c.TokenKeys },
		usage: "comma-separated `files` of more token secrets whose tokens are accepted (rotating the token key)",
		doc: "Files of more token secrets (same format as token_secret_file) whose tokens are accepted too; " +
			"token_secret_file's key still signs. Tokens name their key (\"kid\"), so this is how the key is " +
			"rotated without logging devices out: roll the new key out here on every node, make it " +
			"token_secret_file (the old one moving here), and drop the old one once max_token_lifetime has " +
			"passed (docs/OPERATIONS.md).\n" +
			`Example: token_keys = ["/etc/syncd/token-2025.key"]`,
		means: " (none)"},
	{key: "max_token_lifetime", field: func(c *fileConfig) any { return &c.MaxTokenLifetime },
		usage: "longest `duration` a device token may be valid (expiry minus issue time); longer ones are refused",
		doc: "Longest a device token may be valid (its expiry minus its issue time): longer tokens are refused " +
			"at hello and in refresh. Also how long device revocations are kept. Give every node the same value."},
	{key: "node_ca", field: func(c *fileConfig) any { return &c.NodeCA },
		usage: "cluster CA certificate `file` of the node plane (mutual TLS on -raft-addr), with -node-cert and -node-key",
		doc: "The node plane (Raft, forwarded proposals and calls, on raft_addr) runs mutual TLS 1.3 under one " +
			"cluster CA: node_ca is the CA's certificate file (syncctl cert create-ca), node_cert and node_key this " +
			"node's certificate, issued by that CA for node_id (syncctl cert create-node), and its key. All three or none.",
		means: fmt.Sprintf(": data_dir/%s; a node with no other peer and no join creates a CA and its certificate "+
			"in data_dir on first start, a node of a cluster must be given its cluster's", nodecert.CAFile)},
	{key: "node_cert", field: func(c *fileConfig) any { return &c.NodeCert },
		usage: "this node's certificate `file`, issued by -node-ca for -node-id (syncctl cert create-node)",
		doc:   "This node's node-plane certificate file, with node_ca.",
		means: fmt.Sprintf(": data_dir/%s", nodecert.CertFile)},
	{key: "node_key", field: func(c *fileConfig) any { return &c.NodeKey },
		usage: "the key `file` of -node-cert",
		doc:   "The key file of node_cert.",
		means: fmt.Sprintf(": data_dir/%s", nodecert.KeyFile)},
	{key: "insecure_node_plane", field: func(c *fileConfig) any { return &c.InsecureNodePlane },
		usage: "turn the node plane's TLS off: anyone who reaches -raft-addr can propose commands and read every log",
		doc: "Turns the node plane's TLS off: anyone who can reach raft_addr can then propose any command and read " +
			"every log. For experiments only; logged as a warning at start."},

	{key: "max_frame", section: "Protocol limits, announced to clients", field: func(c *fileConfig) any { return &c.MaxFrame },
		usage: fmt.Sprintf("largest protocol frame in `bytes`, %d to %d", proto.MinFrameLimit, proto.MaxFrameLimit),
		doc: fmt.Sprintf("Largest frame either side may send on a connection, in bytes, %d to %d.",
			proto.MinFrameLimit, proto.MaxFrameLimit)},
	{key: "max_body", field: func(c *fileConfig) any { return &c.MaxBody },
		usage: fmt.Sprintf("largest message body in `bytes`, at most %d", proto.MaxBody),
		doc:   fmt.Sprintf("Largest message body in bytes, at most %d.", proto.MaxBody)},
	{key: "max_batch", field: func(c *fileConfig) any { return &c.MaxBatch },
		usage: fmt.Sprintf("most entries per sync batch or history page, at most %d", proto.MaxPage),
		doc:   fmt.Sprintf("Most entries per sync batch and per page of history or conversation lists, 1 to %d.", proto.MaxPage)},
	{key: "heartbeat_interval", field: func(c *fileConfig) any { return &c.HeartbeatInterval },
		usage: "`interval` of heartbeats on idle sync streams",
		doc:   "Interval of heartbeat frames on an idle sync stream, in whole milliseconds."},

	{key: "dedup_window", section: "Messages", field: func(c *fileConfig) any { return &c.DedupWindow },
		usage: "`duration` a client_msg_id is remembered, at least 1m",
		doc: "How long a client_msg_id is remembered, so that an app's retries do not duplicate a " +
			`message; at least "1m".`},
	{key: "recall_window", field: func(c *fileConfig) any { return &c.RecallWindow },
		usage: "`duration` after sending a message during which its sender may recall it",
		doc:   "How long after sending a message its sender may recall it."},

	{key: "retention_max_count", section: "Retention", field: func(c *fileConfig) any { return &c.RetentionMaxCount },
		usage: "keep at most this many newest entries per user log (0: no bound by count)",
		doc: "Bounds on every user log; devices asking for trimmed positions are told \"too old\" and " +
			"rebase. retention_max_count keeps at most that many newest entries (0: no bound by count); " +
			"retention_max_age drops entries older than that (\"0s\": no bound by age). They cannot both be 0."},
	{key: "retention_max_age", field: func(c *fileConfig) any { return &c.RetentionMaxAge },
		usage: "drop user log entries older than this `age` (0: no bound by age)",
		doc:   "Age bound of every user log, with retention_max_count above."},
	{key: "retention_min_age", field: func(c *fileConfig) any { return &c.RetentionMinAge },
		usage: "keep user log entries every active device has acked this `age` (0: device cursors hold nothing)",
		doc: "Retention tied to device cursors: an entry some active device of the user has not acked " +
			"is kept until retention_max_count or retention_max_age drops it; an entry every active device " +
			"has acked is kept this long, so that a device added later still finds recent history in the " +
			"log. \"0s\" turns it off: the bounds alone decide, and devices hold nothing."},
	{key: "device_inactive_after", field: func(c *fileConfig) any { return &c.DeviceInactiveAfter },
		usage: "`time` without a cursor store after which a device stops holding user log entries (0: never)",
		doc: "A device that has stored no new cursor for this long stops holding entries under " +
			"retention_min_age (when it comes back behind the first retained entry it is told \"too old\" " +
			"and rebases). \"0s\": devices never stop holding (the bounds still apply)."},
	{key: "conv_retention_max_count", field: func(c *fileConfig) any { return &c.ConvRetentionMaxCount },
		usage: "keep at most this many newest entries per conversation log (0: no bound by count)",
		doc: "Bounds on every conversation log: the history History pages, and what a large group's " +
			"members follow (a device behind them is told \"too old\" for that group and rebases it). " +
			"Both 0, the default: conversation logs are kept whole, as chat history is."},
	{key: "conv_retention_max_age", field: func(c *fileConfig) any { return &c.ConvRetentionMaxAge },
		usage: "drop conversation log entries older than this `age` (0: no bound by age)",
		doc:   "Age bound of every conversation log, with conv_retention_max_count above."},
	{key: "retention_interval", field: func(c *fileConfig) any { return &c.RetentionInterval },
		usage: "`interval` at which each shard leader applies the retention bounds",
		doc:   "How often each shard leader applies the retention bounds."},

	{key: "max_connections", section: "Load", field: func(c *fileConfig) any { return &c.MaxConnections },
		usage: "most concurrent client connections",
		doc:   "Most concurrent client connections; more get TooManyConnections with a retry-after."},
	{key: "max_streams_per_conn", field: func(c *fileConfig) any { return &c.MaxStreamsPerConn },
		usage: "most open streams per connection, the control stream included, at least 2",
		doc: "Most (bidirectional) streams one connection may have open at once, the control stream " +
			"included, at least 2; announced to clients as max_streams. Clients may open no unidirectional stream."},
	{key: "request_idle", field: func(c *fileConfig) any { return &c.RequestIdle },
		usage: "`time` a request stream may stay without a frame from the client before it is closed",
		doc: "How long a request stream may go without a frame from the client before the server " +
			"closes it (after answering what it received); announced to clients as request_idle_ms."},
	{key: "request_timeout", field: func(c *fileConfig) any { return &c.RequestTimeout },
		usage: "`timeout` of one request's replication",
		doc:   "Bound on one request's replication."},
	{key: "send_rate", field: func(c *fileConfig) any { return &c.SendRate },
		usage: "mutations per second each device may sustain",
		doc: "Mutations per second each device may send sustained (and send_burst at once); excess " +
			"gets RateLimited with a retry-after."},
	{key: "send_burst", field: func(c *fileConfig) any { return &c.SendBurst },
		usage: "mutations each device may send at once",
		doc:   "Mutations each device may send at once, with send_rate above."},
	{key: "max_in_flight", field: func(c *fileConfig) any { return &c.MaxInFlight },
		usage: "most requests being served at once; beyond it requests get Overloaded",
		doc: "Most requests being served at once on this node (mutations while replicated, queries while " +
			"they read); beyond it a request is refused at once with Overloaded and a retry-after, rather " +
			"than queueing into timeouts."},
	{key: "max_answer_bytes_per_conn", field: func(c *fileConfig) any { return &c.MaxAnswerBytesPerConn },
		usage: "most `bytes` of answers held for one connection",
		doc: "Most bytes of answers this node holds for one connection, from reading a request to writing " +
			"its answer (a page being built counts max_frame); a request beyond it, or beyond the device's " +
			"or the user's below, gets Overloaded with a retry-after. At least max_frame + 16 KiB."},
	{key: "max_answer_bytes_per_device", field: func(c *fileConfig) any { return &c.MaxAnswerBytesPerDev },
		usage: "most `bytes` of answers held for one device, all its connections",
		doc:   "Most bytes of answers held for one device, all its connections together; at least max_answer_bytes_per_conn."},
	{key: "max_answer_bytes_per_user", field: func(c *fileConfig) any { return &c.MaxAnswerBytesPerUser },
		usage: "most `bytes` of answers held for one user, all its devices",
		doc:   "Most bytes of answers held for one user, all its devices together; at least max_answer_bytes_per_device."},
	{key: "write_timeout", field: func(c *fileConfig) any { return &c.WriteTimeout },
		usage: "`duration` a write to a client's stream may make no progress",
		doc: "How long a write to a client's request or sync stream may make no progress (the client does " +
			"not read) before the stream is reset with Timeout and what it held is released."},
	{key: "max_handshakes", field: func(c *fileConfig) any { return &c.MaxHandshakes },
		usage: "most connections being authenticated at once",
		doc: "Most connections being authenticated at once; beyond it new connections are closed with " +
			"Overloaded and a retry-after (reconnect storms). From half of it on, new connections must first " +
			"prove their source address (a QUIC Retry)."},
	{key: "max_handshakes_per_source", field: func(c *fileConfig) any { return &c.MaxHandshakesPerSource },
		usage: "most connections being authenticated at once from one address (IPv4, or IPv6 /64)",
		doc: "Most connections being authenticated at once from one source address (an IPv4 address, or an " +
			"IPv6 /64), so that one machine opening connections that never say hello cannot take " +
			"max_handshakes from everyone; more get Overloaded with a retry-after."},
	{key: "hello_timeout", field: func(c *fileConfig) any { return &c.HelloTimeout },
		usage: "`duration` a new connection has to send its hello",
		doc:   "How long a new connection has to send its hello after the QUIC handshake, 100ms to 1m; then it is closed with Timeout."},
	{key: "query_rate", field: func(c *fileConfig) any { return &c.QueryRate },
		usage: "queries per second each device may sustain",
		doc: "Queries (ConvList, ConvState, History, Members, HeadCheck) per second each device may send " +
			"sustained (and query_burst at once), across all its connections; excess gets RateLimited."},
	{key: "query_burst", field: func(c *fileConfig) any { return &c.QueryBurst },
		usage: "queries each device may send at once",
		doc:   "Queries each device may send at once, with query_rate above."},
	{key: "max_connections_per_user", field: func(c *fileConfig) any { return &c.MaxConnsPerUser },
		usage: "most connections one user may have open on this node, all devices together",
		doc: "Most connections one user may have open on this node, all its devices together; more get " +
			"TooManyConnections with a retry-after."},

	{key: "max_group_size", section: "Groups", field: func(c *fileConfig) any { return &c.MaxGroupSize },
		usage: "most members of a group",
		doc:   "Most members a group may have; a creation or addition beyond it gets GroupFull."},
	{key: "large_group_threshold", field: func(c *fileConfig) any { return &c.LargeGroupThreshold },
		usage: "most members of a group copied into every member's log; larger groups are read from their own log",
		doc: "Most members a group may have and still be copied into every member's log (a write per member per " +
			"message). A creation or addition past it makes the group large for good: its members' devices follow " +
			"its conversation log as a source of their sync streams (protocol revision 6; an older client of such a " +
			"member is told needs_upgrade). Lower it to spare writes, raise it to spare clients a follower per group."},
	{key: "delivery_reports", field: func(c *fileConfig) any { return &c.DeliveryReports },
		usage: "tell senders when a device of the recipient stored their message (the delivered step)",
		doc: "Tell senders when a device of the recipient stored their message: the delivered step, as entries of " +
			"kind delivered in their logs, and the delivered counts of groups. A cluster upgrading from a version " +
			"without it runs with it off until every node runs one that has it (the nodes must all apply its appends).",
	},
	{key: "dead_letter_process", field: func(c *fileConfig) any { return &c.DeadLetterProcess },
		usage: "classify dead letters, replay the retryable ones automatically and archive old ones",
		doc: "Run dead letters as a process: keep each refusal's class, let each shard's leader replay the retryable " +
			"ones with backoff and archive the old ones it does not retry. It starts by itself once every node of the " +
			"cluster runs a build that applies its commands (during a rolling upgrade, when the last node is upgraded).",
	},
	{key: "dead_letter_retry_base", field: func(c *fileConfig) any { return &c.DeadLetterRetryBase },
		usage: "wait before the first automatic replay of a retryable dead letter; each refused replay doubles it",
		doc: "How long after its refusal a retryable dead letter (refused for a state that passes, such as a move's " +
			"fence) is first replayed by its shard's leader; each refused replay doubles the wait, up to a day."},
	{key: "dead_letter_retry_max_attempts", field: func(c *fileConfig) any { return &c.DeadLetterRetryMax },
		usage: "automatic replays of one dead letter before it waits for an operator (0: none)",
		doc: "Automatic replays of one dead letter; after the last refused one it waits for an operator " +
			"(syncctl dlq list shows it as gave up). 0 turns automatic replays off."},
	{key: "dead_letter_archive_after", field: func(c *fileConfig) any { return &c.DeadLetterArchiveAfter },
		usage: "age after which a dead letter not being retried moves to the archive (0: never)",
		doc: "Age after which a dead letter that is not being retried moves to its shard's archive, out of the " +
			"held count and its alerts; archived ones are listed with syncctl dlq list -archived and replayed or " +
			"dropped like the others, never lost without an operator. 0 never archives."},
	{key: "status_fanout_limit", field: func(c *fileConfig) any { return &c.StatusFanoutLimit },
		usage: "largest group whose delivered steps reach the senders' logs as entries",
		doc: "Largest group whose delivered steps reach the senders as entries of their logs (kind delivered); in " +
			"larger groups the marks and counts still move, and the Receipts query shows them, so one message " +
			"does not bring its sender an entry per member."},
	{key: "delivery_report_interval", field: func(c *fileConfig) any { return &c.DeliveryReportInterval },
		usage: "how often a shard's leader reports its users' acked deliveries (the delay of the delivered tick)",
		doc: "How often the leader of a shard reports what its users' devices acked to the conversations " +
			"concerned: the delay of a sender's delivered step, and how much one report coalesces."},
	{key: "members_per_minute", field: func(c *fileConfig) any { return &c.MembersPerMinute },
		usage: "users one user may name in group creations and additions per minute (at least 1000)",
		doc: "Users one user may name in group creations and additions per minute, so nobody fills others' " +
			"logs with groups; excess gets RateLimited with a retry-after. At least 1000 (one full request)."},
	{key: "max_groups_per_user", field: func(c *fileConfig) any { return &c.MaxGroupsPerUser },
		usage: "most groups one user may be a member of",
		doc: "Most groups one user may be a member of; a creation or addition naming a user already in that many " +
			"gets TooManyGroups, so nobody can bury another user's conversation list in groups."},

	{key: "trace_otlp_endpoint", section: "Tracing", field: func(c *fileConfig) any { return &c.TraceOTLPEndpoint },
		usage: "OTLP/HTTP collector `URL` to send message traces to (http:// or https://; \"\": off)",
		doc: "Turns tracing on: each message's send, Raft commit, fan-out, delivery, push and device ack become " +
			"OpenTelemetry spans posted to this OTLP/HTTP collector (http:// or https://; with no path, /v1/traces " +
			"is used). Spans carry ids, shards, positions and sizes, never bodies, user ids or tokens " +
			"(docs/OPERATIONS.md, \"Tracing\"). OTEL_EXPORTER_OTLP_ENDPOINT does not turn it on; once on, the " +
			"exporter reads OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _CERTIFICATE and the OTEL_BSP_* batch settings.\n" +
			`Example: trace_otlp_endpoint = "http://127.0.0.1:4318"`,
		means: ": off, no exporter"},
	{key: "trace_sample_ratio", field: func(c *fileConfig) any { return &c.TraceSampleRatio },
		usage: "share of sends traced, in (0, 1], with -trace-otlp-endpoint",
		doc: "Share of sends traced when trace_otlp_endpoint is set, more than 0 and at most 1; every later step " +
			"of a message follows its send's decision, so a message is traced whole or not at all."},

	{key: "memory_limit", section: "Memory", field: func(c *fileConfig) any { return &c.MemoryLimit },
		usage: "soft memory limit of the Go runtime: auto, off, or a `size` such as 900MiB or 4GiB (GOMEMLIMIT overrides it)",
		doc: "Soft limit of the Go runtime's memory (heap, stacks, runtime): near it the collector runs " +
			"sooner, so the headroom of GOGC 200 (the heap may grow to three times what is live) does not " +
			"become resident memory when many connections are held. \"auto\": 75% of the memory the process " +
			"may use (its cgroup's limit, else the machine's) less the store's block cache and memtables " +
			"(256 MiB, outside the Go heap); \"off\": none; or a size, at least 256MiB, such as \"900MiB\" or " +
			"\"4GiB\". The store's cache and memtables and the kernel's page cache come on top of it. " +
			"GOMEMLIMIT in the environment overrides it. Logged at start.",
		means: ": derived from the cgroup's or the machine's memory"},

	{key: "log_level", section: "Logs (to stderr)", field: func(c *fileConfig) any { return &c.LogLevel },
		usage: "debug, info, warn or error",
		doc:   "debug, info, warn or error. At info a node logs its start, its stop and what goes wrong; debug adds each shard's Raft events."},
	{key: "log_format", field: func(c *fileConfig) any { return &c.LogFormat },
		usage: "text, or json for log shippers",
		doc:   "text, or json for log shippers."},
}

// flagName is the flag of a file key.
func flagName(key string) string { return strings.ReplaceAll(key, "_", "-") }

// bindFlags defines a flag for every setting of c, each defaulting to its current value in c, so
// that parsing sets only the fields named on the command line.
func bindFlags(fs *flag.FlagSet, c *fileConfig) {
	for _, s := range settings {
		name := flagName(s.key)
		switch p := s.field(c).(type) {
		case *string:
			fs.StringVar(p, name, *p, s.usage)
		case *bool:
			fs.BoolVar(p, name, *p, s.usage)
		case *int:
			fs.IntVar(p, name, *p, s.usage)
		case *uint64:
			fs.Uint64Var(p, name, *p, s.usage)
		case *float64:
			fs.Float64Var(p, name, *p, s.usage)
		case *duration:
			fs.Var(p, name, s.usage)
		case *byteSize:
			fs.Var(p, name, s.usage)
		case *[]string:
			fs.Var((*list)(p), name, s.usage)
		default:
			panic(fmt.Sprintf("setting %s: no flag for %T", s.key, p)) // TestSettingsTable catches it
		}
	}
}

const printHead = `# syncd configuration: syncd -config syncd.toml
#
# Written by syncd -print-config, which prints the settings a node would run with: with no flags
# and no file, every value is the default, and that output is docs/syncd.example.toml. Every key
# is optional; the comment above each names its default. Each key has a flag of the same name in
# kebab-case (data_dir, -data-dir) and an environment variable in upper case (SYNCD_DATA_DIR);
# the environment overrides the file, and flags given on the command line override both. An
# unknown key is an error. Durations are Go durations: "90s", "10m", "720h".
`

// commentWidth is where writeTOML wraps comments.
const commentWidth = 98

// writeTOML writes c as a commented config file: each key with its documentation and default,
// then its value in c.
func writeTOML(w io.Writer, c fileConfig) error {
	var b bytes.Buffer
	b.WriteString(printHead)
	def := defaults()
	for _, s := range settings {
		if s.section != "" {
			fmt.Fprintf(&b, "\n# --- %s ---\n", s.section)
		}
		defVal, err := tomlValue(s.field(&def))
		if err != nil {
			return err
		}
		b.WriteString("\n")
		lines := strings.Split(s.doc, "\n")
		lines[0] += " Default " + defVal + s.means + "."
		for _, l := range lines {
			writeComment(&b, l)
		}
		val, err := tomlValue(s.field(&c))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s = %s\n", s.key, val)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// tomlValue spells the value *p points to as TOML does on the right of "key =".
func tomlValue(p any) (string, error) {
	var b strings.Builder
	if err := toml.NewEncoder(&b).Encode(map[string]any{"k": p}); err != nil {
		return "", err
	}
	return strings.TrimSuffix(strings.TrimPrefix(b.String(), "k = "), "\n"), nil
}

// writeComment writes text as "# " lines of at most commentWidth columns.
func writeComment(b *bytes.Buffer, text string) { wrap(b, "#", text) }

// wrap writes text as lines of at most commentWidth columns, each starting with prefix and
// breaking at spaces; the first line of an empty prefix carries no leading space.
func wrap(b *bytes.Buffer, prefix, text string) {
	line := prefix
	for word := range strings.FieldsSeq(text) {
		if len(line)+1+len(word) > commentWidth && line != prefix {
			b.WriteString(line + "\n")
			line = prefix
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	b.WriteString(line + "\n")
}
