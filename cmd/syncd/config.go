package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/auth"
	"github.com/syncd-dev/syncd/syncd/tracing"
)

// fileConfig is everything an operator sets, as the config file spells it; the table settings
// documents each key and gives it a flag. It stays in cmd/syncd so that package syncd does not
// depend on TOML; toConfig turns it into a syncd.Config, fromConfig back.
type fileConfig struct {
	DataDir                string   `toml:"data_dir"`
	MinFreeDisk            byteSize `toml:"min_free_disk"`
	Listen                 string   `toml:"listen"`
	WebListen              string   `toml:"web_listen"`
	WebTransport           bool     `toml:"webtransport"`
	WebSocket              bool     `toml:"websocket"`
	AllowedOrigins         []string `toml:"allowed_origins"`
	Admin                  string   `toml:"admin"`
	AdminTokenFile         string   `toml:"admin_token_file"`
	AdminMetricsAuth       bool     `toml:"admin_metrics_auth"`
	NodeID                 string   `toml:"node_id"`
	RaftAddr               string   `toml:"raft_addr"`
	Shards                 int      `toml:"shards"`
	Peers                  []string `toml:"peers"`     // id=host:port
	PeerDial               []string `toml:"peer_dial"` // id=host:port
	Join                   string   `toml:"join"`
	ReplicationFactor      int      `toml:"replication_factor"`
	Cert                   string   `toml:"cert"`
	Key                    string   `toml:"key"`
	TokenSecretFile        string   `toml:"token_secret_file"`
	TokenKeys              []string `toml:"token_keys"` // files
	MaxTokenLifetime       duration `toml:"max_token_lifetime"`
	NodeCA                 string   `toml:"node_ca"`
	NodeCert               string   `toml:"node_cert"`
	NodeKey                string   `toml:"node_key"`
	InsecureNodePlane      bool     `toml:"insecure_node_plane"`
	MaxFrame               int      `toml:"max_frame"`
	MaxBody                int      `toml:"max_body"`
	MaxBatch               int      `toml:"max_batch"`
	HeartbeatInterval      duration `toml:"heartbeat_interval"`
	DedupWindow            duration `toml:"dedup_window"`
	RecallWindow           duration `toml:"recall_window"`
	MaxConnections         int      `toml:"max_connections"`
	MaxStreamsPerConn      int      `toml:"max_streams_per_conn"`
	RequestIdle            duration `toml:"request_idle"`
	RetentionMaxCount      uint64   `toml:"retention_max_count"`
	RetentionMaxAge        duration `toml:"retention_max_age"`
	RetentionMinAge        duration `toml:"retention_min_age"`
	DeviceInactiveAfter    duration `toml:"device_inactive_after"`
	ConvRetentionMaxCount  uint64   `toml:"conv_retention_max_count"`
	ConvRetentionMaxAge    duration `toml:"conv_retention_max_age"`
	RetentionInterval      duration `toml:"retention_interval"`
	RequestTimeout         duration `toml:"request_timeout"`
	SendRate               float64  `toml:"send_rate"`
	SendBurst              int      `toml:"send_burst"`
	MaxInFlight            int      `toml:"max_in_flight"`
	MaxAnswerBytesPerConn  int      `toml:"max_answer_bytes_per_conn"`
	MaxAnswerBytesPerDev   int      `toml:"max_answer_bytes_per_device"`
	MaxAnswerBytesPerUser  int      `toml:"max_answer_bytes_per_user"`
	WriteTimeout           duration `toml:"write_timeout"`
	MaxHandshakes          int      `toml:"max_handshakes"`
	MaxHandshakesPerSource int      `toml:"max_handshakes_per_source"`
	HelloTimeout           duration `toml:"hello_timeout"`
	QueryRate              float64  `toml:"query_rate"`
	QueryBurst             int      `toml:"query_burst"`
	MaxConnsPerUser        int      `toml:"max_connections_per_user"`
	MaxGroupSize           int      `toml:"max_group_size"`
	LargeGroupThreshold    int      `toml:"large_group_threshold"`
	DeliveryReports        bool     `toml:"delivery_reports"`
	DeadLetterProcess      bool     `toml:"dead_letter_process"`
	DeadLetterRetryBase    duration `toml:"dead_letter_retry_base"`
	DeadLetterRetryMax     int      `toml:"dead_letter_retry_max_attempts"`
	DeadLetterArchiveAfter duration `toml:"dead_letter_archive_after"`
	StatusFanoutLimit      int      `toml:"status_fanout_limit"`
	DeliveryReportInterval duration `toml:"delivery_report_interval"`
	MembersPerMinute       int      `toml:"members_per_minute"`
	MaxGroupsPerUser       int      `toml:"max_groups_per_user"`
	TraceOTLPEndpoint      string   `toml:"trace_otlp_endpoint"`
	TraceSampleRatio       float64  `toml:"trace_sample_ratio"`
	MemoryLimit            string   `toml:"memory_limit"`
	LogLevel               string   `toml:"log_level"`
	LogFormat              string   `toml:"log_format"`
}

// options is what a command line asks for.
type options struct {
	settings    fileConfig // defaults < config file < flags on the command line
	printConfig bool
	version     bool // -version: print the build and exit
	// source names where each setting came from, for error messages.
	source func(flagName string) string
}

// usageHead is the start of -h, before the flags.
func usageHead() string {
	d := defaults()
	var b bytes.Buffer
	b.WriteString("Usage: syncd [-config file] [flags]\n       syncd conformance [flags]   (the conformance kit for client authors: syncd conformance -h)\n\n")
	wrap(&b, "", fmt.Sprintf("Runs a syncd server node. With no flags: a single node on embedded defaults, data in %s, "+
		"clients over QUIC on %s, admin HTTP on %s, Raft on %s. Settings come from the defaults, then the "+
		"-config file (TOML, see docs/syncd.example.toml; syncd -print-config prints one; SYNCD_CONFIG names it when -config is not given), "+
		"then the environment (SYNCD_ and the key in upper case: SYNCD_DATA_DIR for data_dir), then the flags given here.",
		d.DataDir, d.Listen, d.Admin, d.RaftAddr))
	b.WriteString("\nFlags:\n")
	return b.String()
}

// parseArgs parses the command line and the config file it names. For -h it writes the usage to
// usage and returns flag.ErrHelp; every other error is a usage or configuration error.
func parseArgs(args []string, usage io.Writer) (options, error) {
	// First pass: find -config and -print-config, and reject bad flags before reading anything.
	fs := flag.NewFlagSet("syncd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	first := defaults()
	bindFlags(fs, &first)
	configFile := fs.String("config", "", "TOML `file` with settings (default $SYNCD_CONFIG); SYNCD_* variables and flags given on the command line override it")
	printConfig := fs.Bool("print-config", false, "print the effective configuration as a commented TOML file and exit")
	version := fs.Bool("version", false, "print the build (version, commit, Go release) and exit")
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(usage, usageHead())
			fs.SetOutput(usage)
			fs.PrintDefaults()
			return options{}, err
		}
		return options{}, fmt.Errorf("%w (syncd -h lists the flags)", err)
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected argument %q: syncd takes only flags (syncd -h lists them)", fs.Arg(0))
	}

	if *version {
		return options{version: true}, nil // nothing else is read: it works with any other flags
	}
	o := options{settings: defaults(), printConfig: *printConfig}
	if *configFile == "" {
		*configFile = os.Getenv(envConfig)
	}
	var md toml.MetaData
	if *configFile != "" {
		var err error
		if md, err = decodeFile(*configFile, &o.settings); err != nil {
			return options{}, err
		}
	}
	fromEnv, err := applyEnv(&o.settings)
	if err != nil {
		return options{}, err
	}
	// Second pass onto the merged settings: only the flags on the command line are set again,
	// so they override the file and nothing else does. Visit tells which those were.
	fs2 := flag.NewFlagSet("syncd", flag.ContinueOnError)
	fs2.SetOutput(io.Discard)
	bindFlags(fs2, &o.settings)
	fs2.String("config", "", "")
	fs2.Bool("print-config", false, "")
	if err := fs2.Parse(args); err != nil {
		return options{}, err // cannot happen: the first pass accepted the same arguments
	}
	set := map[string]bool{}
	fs2.Visit(func(f *flag.Flag) { set[f.Name] = true })
	o.source = func(name string) string {
		key := strings.ReplaceAll(name, "-", "_")
		switch {
		case set[name]:
		case fromEnv[key]:
			return envName(key)
		case md.IsDefined(key):
			return fmt.Sprintf("%s: %s", *configFile, key)
		}
		return "-" + name
	}
	return o, nil
}

// envConfig names the config file when -config is not given.
const envConfig = "SYNCD_CONFIG"

// envName is the environment variable of a file key: SYNCD_ and the key in upper case
// (data_dir, SYNCD_DATA_DIR).
func envName(key string) string { return "SYNCD_" + strings.ToUpper(key) }

// applyEnv sets every setting whose environment variable is set (envName), parsed as its flag
// is, over c, and reports which keys it set. Containers and systemd units configure a node this
// way; a value that does not parse is an error naming the variable. Other SYNCD_ variables
// (syncctl's SYNCD_TOKEN, say) are not syncd's and are left alone.
func applyEnv(c *fileConfig) (map[string]bool, error) {
	fs := flag.NewFlagSet("env", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	bindFlags(fs, c)
	set := map[string]bool{}
	var errs []error
	for _, st := range settings {
		v, ok := os.LookupEnv(envName(st.key))
		if !ok {
			continue
		}
		if err := fs.Set(flagName(st.key), v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %v", envName(st.key), v, err))
			continue
		}
		set[st.key] = true
	}
	return set, errors.Join(errs...)
}

// decodeFile reads the TOML file at path over c: keys it has replace fields of c, keys it lacks
// leave them. A key fileConfig does not know is an error.
func decodeFile(path string, c *fileConfig) (toml.MetaData, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return toml.MetaData{}, fmt.Errorf("-config: %w; check the path and its permissions", err)
	}
	md, err := toml.Decode(string(data), c)
	if err != nil {
		return md, fmt.Errorf("%s: %w", path, err)
	}
	var errs []error
	undecoded := map[string]bool{}
	for _, k := range md.Undecoded() {
		undecoded[k.String()] = true
		if len(k) > 1 && undecoded[k[:len(k)-1].String()] {
			continue // inside a table already reported
		}
		errs = append(errs, fmt.Errorf("%s: unknown key %q; docs/syncd.example.toml lists the keys", path, k.String()))
	}
	return md, errors.Join(errs...)
}

// toConfig validates the settings and turns them into a syncd.Config whose Logger writes to
// logOut. It reads the token secret file, if one is named. Every problem is reported, each naming
// the flag or the file key it came from.
func (o options) toConfig(logOut io.Writer) (syncd.Config, error) {
	s, name := o.settings, o.source
	if name == nil {
		name = func(n string) string { return "-" + n }
	}
	var errs []error
	bad := func(flagName, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s "+format, append([]any{name(flagName)}, args...)...))
	}
	for _, a := range []struct {
		flag, value string
	}{{"listen", s.Listen}, {"admin", s.Admin}, {"raft-addr", s.RaftAddr}} {
		if _, _, err := net.SplitHostPort(a.value); err != nil {
			bad(a.flag, "%q is not host:port", a.value)
		}
	}
	if s.DataDir == "" {
		bad("data-dir", "must not be empty")
	}
	if !log.ValidID(s.NodeID) || strings.ContainsAny(s.NodeID, "=,") {
		bad("node-id", "%q must be 1-%d printable ASCII characters, no space, '=' or ','", s.NodeID, log.MaxIDLen)
	}
	if s.Shards < 1 || s.Shards > cluster.NumSlots {
		bad("shards", "must be between 1 and %d", cluster.NumSlots)
	}
	cfg := syncd.Config{
		Dir: s.DataDir, ListenAddr: s.Listen, AdminAddr: s.Admin, NodeID: s.NodeID, RaftAddr: s.RaftAddr,
		WebAddr: s.WebListen, DisableWebTransport: !s.WebTransport, DisableWebSocket: !s.WebSocket,
		AllowedOrigins: s.AllowedOrigins,
		AdminTokenFile: s.AdminTokenFile, AdminMetricsAuth: s.AdminMetricsAuth,
		Shards: s.Shards, CertFile: s.Cert, KeyFile: s.Key,
		NodeCAFile: s.NodeCA, NodeCertFile: s.NodeCert, NodeKeyFile: s.NodeKey, InsecureNodePlane: s.InsecureNodePlane,
		Limits: proto.Limits{MaxFrame: uint32(s.MaxFrame), MaxBody: uint32(s.MaxBody), MaxBatch: uint32(s.MaxBatch),
			HeartbeatMs: uint32(time.Duration(s.HeartbeatInterval) / time.Millisecond)},
		DedupWindow: time.Duration(s.DedupWindow), RecallWindow: time.Duration(s.RecallWindow),
		MaxConnections: s.MaxConnections, MaxStreamsPerConn: s.MaxStreamsPerConn, RequestIdle: time.Duration(s.RequestIdle),
		Retention: log.Retention{MaxCount: s.RetentionMaxCount, MaxAge: int64(s.RetentionMaxAge),
			MinAge: int64(s.RetentionMinAge), InactiveAfter: int64(s.DeviceInactiveAfter)},
		ConvRetention:     log.Retention{MaxCount: s.ConvRetentionMaxCount, MaxAge: int64(s.ConvRetentionMaxAge)},
		RetentionInterval: time.Duration(s.RetentionInterval), RequestTimeout: time.Duration(s.RequestTimeout),
		SendRate: s.SendRate, SendBurst: s.SendBurst, MaxInFlight: s.MaxInFlight, MaxHandshakes: s.MaxHandshakes,
		QueryRate: s.QueryRate, QueryBurst: s.QueryBurst, MaxConnectionsPerUser: s.MaxConnsPerUser,
		MaxGroupSize: s.MaxGroupSize, LargeGroupThreshold: s.LargeGroupThreshold, MembersPerMinute: s.MembersPerMinute, MaxGroupsPerUser: s.MaxGroupsPerUser,
		DisableDeliveryReports: !s.DeliveryReports, StatusFanoutLimit: s.StatusFanoutLimit, DeliveryReportInterval: time.Duration(s.DeliveryReportInterval),
		MaxTokenLifetime: time.Duration(s.MaxTokenLifetime), HelloTimeout: time.Duration(s.HelloTimeout),
		MaxHandshakesPerSource: s.MaxHandshakesPerSource,
		MinFreeDisk:            int64(s.MinFreeDisk),
		MaxAnswerBytesPerConn:  int64(s.MaxAnswerBytesPerConn), MaxAnswerBytesPerDevice: int64(s.MaxAnswerBytesPerDev),
		MaxAnswerBytesPerUser: int64(s.MaxAnswerBytesPerUser), WriteTimeout: time.Duration(s.WriteTimeout),
		TraceEndpoint: s.TraceOTLPEndpoint, TraceSampleRatio: s.TraceSampleRatio,
		DisableDeadLetterProcess: !s.DeadLetterProcess, DeadLetterRetryBase: time.Duration(s.DeadLetterRetryBase),
		DeadLetterRetryMaxAttempts: s.DeadLetterRetryMax, DeadLetterArchiveAfter: time.Duration(s.DeadLetterArchiveAfter),
	}
	if err := tracing.CheckEndpoint(s.TraceOTLPEndpoint); err != nil {
		bad("trace-otlp-endpoint", "%v", err)
	}
	if !(s.TraceSampleRatio > 0 && s.TraceSampleRatio <= 1) { // also NaN
		bad("trace-sample-ratio", "%v must be in (0, 1]: the share of sends traced", s.TraceSampleRatio)
	}
	switch {
	case s.MinFreeDisk < 0:
		bad("min-free-disk", "%d must not be negative (0 turns the watermark off)", int64(s.MinFreeDisk))
	case s.MinFreeDisk == 0:
		cfg.MinFreeDisk = -1 // off; a zero syncd.Config field would mean the default
	}
	// 0 turns automatic replays, or the archive, off; a zero syncd.Config field would mean the
	// default.
	if s.DeadLetterRetryBase <= 0 {
		bad("dead-letter-retry-base", "%v must be positive", time.Duration(s.DeadLetterRetryBase))
	}
	switch {
	case s.DeadLetterRetryMax < 0:
		bad("dead-letter-retry-max-attempts", "%d must not be negative (0 turns automatic replays off)", s.DeadLetterRetryMax)
	case s.DeadLetterRetryMax == 0:
		cfg.DeadLetterRetryMaxAttempts = -1
	}
	switch {
	case s.DeadLetterArchiveAfter < 0:
		bad("dead-letter-archive-after", "%v must not be negative (0 never archives)", time.Duration(s.DeadLetterArchiveAfter))
	case s.DeadLetterArchiveAfter == 0:
		cfg.DeadLetterArchiveAfter = -1
	}

	ids := map[string]bool{}
	for _, p := range s.Peers {
		id, addr, err := splitPeer(p)
		if err != nil {
			bad("peers", "%v", err)
			continue
		}
		if ids[id] {
			bad("peers", "names %q twice", id)
		}
		ids[id] = true
		cfg.Peers = append(cfg.Peers, raftstore.Peer{ID: id, Addr: addr})
	}
	if len(s.Peers) > 0 && !ids[s.NodeID] {
		bad("peers", "must include this node (-node-id %q)", s.NodeID)
	}
	for _, p := range s.PeerDial {
		id, addr, err := splitPeer(p)
		if err != nil {
			bad("peer-dial", "%v", err)
			continue
		}
		if _, dup := cfg.PeerDial[id]; dup {
			bad("peer-dial", "names %q twice", id)
		}
		if cfg.PeerDial == nil {
			cfg.PeerDial = map[string]string{}
		}
		cfg.PeerDial[id] = addr
	}
	cfg.Join, cfg.ReplicationFactor = s.Join, s.ReplicationFactor
	if s.Join != "" && len(s.Peers) > 0 {
		errs = append(errs, fmt.Errorf("%s and %s exclude each other: join an existing cluster, or start a new one", name("join"), name("peers")))
	}
	if s.ReplicationFactor < 1 {
		bad("replication-factor", "must be at least 1")
	}
	if (s.Cert == "") != (s.Key == "") {
		errs = append(errs, fmt.Errorf("%s and %s go together: set both or neither", name("cert"), name("key")))
	}
	if nodeFiles := []string{s.NodeCA, s.NodeCert, s.NodeKey}; slices.Contains(nodeFiles, "") && slices.ContainsFunc(nodeFiles, func(f string) bool { return f != "" }) {
		errs = append(errs, fmt.Errorf("%s, %s and %s go together: set all three or none", name("node-ca"), name("node-cert"), name("node-key")))
	}
	if s.InsecureNodePlane && s.NodeCA+s.NodeCert+s.NodeKey != "" {
		errs = append(errs, fmt.Errorf("%s turns the node plane's TLS off: drop it, or drop %s, %s and %s",
			name("insecure-node-plane"), name("node-ca"), name("node-cert"), name("node-key")))
	}
	if s.TokenSecretFile != "" {
		secret, err := readSecretFile(s.TokenSecretFile)
		if err != nil {
			bad("token-secret-file", "%v", err)
		}
		cfg.TokenSecret = secret
	}
	for _, f := range s.TokenKeys {
		key, err := readSecretFile(f)
		if err != nil {
			bad("token-keys", "%v", err)
		}
		cfg.TokenKeys = append(cfg.TokenKeys, key)
	}
	if s.MaxTokenLifetime < duration(time.Second) {
		bad("max-token-lifetime", "%v must be at least 1s: tokens count whole seconds", s.MaxTokenLifetime)
	}
	if hello := time.Duration(s.HelloTimeout); hello < 100*time.Millisecond || hello > time.Minute {
		bad("hello-timeout", "%v must be between 100ms and 1m: a client says hello right after connecting", hello)
	}

	if s.MaxFrame < proto.MinFrameLimit || s.MaxFrame > proto.MaxFrameLimit {
		bad("max-frame", "must be between %d and %d", proto.MinFrameLimit, proto.MaxFrameLimit)
	}
	if s.MaxBody < 1 || s.MaxBody > proto.MaxBody {
		bad("max-body", "must be between 1 and %d", proto.MaxBody)
	}
	if s.MaxBatch < 1 || s.MaxBatch > proto.MaxPage {
		bad("max-batch", "must be between 1 and %d", proto.MaxPage)
	}
	if hb := time.Duration(s.HeartbeatInterval); hb < time.Millisecond || hb%time.Millisecond != 0 ||
		hb/time.Millisecond > 1<<32-1 {
		bad("heartbeat-interval", "%v must be a positive whole number of milliseconds", hb)
	}
	if s.DedupWindow < duration(time.Minute) {
		bad("dedup-window", "%v must be at least 1m: a shorter window lets app retries duplicate messages", s.DedupWindow)
	}
	for _, d := range []struct {
		flag  string
		value duration
	}{{"recall-window", s.RecallWindow}, {"retention-interval", s.RetentionInterval}, {"delivery-report-interval", s.DeliveryReportInterval}, {"request-timeout", s.RequestTimeout},
		{"request-idle", s.RequestIdle}, {"write-timeout", s.WriteTimeout}} {
		if d.value <= 0 {
			bad(d.flag, "%v must be positive", d.value)
		}
	}
	if s.RetentionMaxAge < 0 {
		bad("retention-max-age", "%v must not be negative", s.RetentionMaxAge)
	}
	if s.ConvRetentionMaxAge < 0 {
		bad("conv-retention-max-age", "%v must not be negative", s.ConvRetentionMaxAge)
	}
	if s.RetentionMinAge < 0 {
		bad("retention-min-age", "%v must not be negative", s.RetentionMinAge)
	}
	if s.DeviceInactiveAfter < 0 {
		bad("device-inactive-after", "%v must not be negative", s.DeviceInactiveAfter)
	}
	if s.RetentionMaxAge == 0 && s.RetentionMaxCount == 0 {
		errs = append(errs, fmt.Errorf("%s and %s are both 0, which means the default (%v), not unbounded: "+
			"set at least one bound", name("retention-max-age"), name("retention-max-count"), defaults().RetentionMaxAge))
	}
	for _, n := range []struct {
		flag         string
		value, least int
	}{{"max-connections", s.MaxConnections, 1}, {"max-streams-per-conn", s.MaxStreamsPerConn, 2},
		{"send-burst", s.SendBurst, 1}, {"max-in-flight", s.MaxInFlight, 1}, {"max-handshakes", s.MaxHandshakes, 1},
		{"max-handshakes-per-source", s.MaxHandshakesPerSource, 1},
		{"query-burst", s.QueryBurst, 1}, {"max-connections-per-user", s.MaxConnsPerUser, 1},
		{"max-group-size", s.MaxGroupSize, 2}, {"large-group-threshold", s.LargeGroupThreshold, 2}, {"status-fanout-limit", s.StatusFanoutLimit, 2}, {"members-per-minute", s.MembersPerMinute, proto.MaxMembers},
		{"max-groups-per-user", s.MaxGroupsPerUser, 1}, {"max-answer-bytes-per-conn", s.MaxAnswerBytesPerConn, 1},
		{"max-answer-bytes-per-device", s.MaxAnswerBytesPerDev, 1}, {"max-answer-bytes-per-user", s.MaxAnswerBytesPerUser, 1}} {
		if n.value < n.least {
			bad(n.flag, "must be at least %d", n.least)
		}
	}
	if !(s.SendRate > 0) { // also NaN
		bad("send-rate", "must be a positive number of mutations per second")
	}
	if !(s.QueryRate > 0) {
		bad("query-rate", "must be a positive number of queries per second")
	}

	if _, err := parseMemoryLimit(s.MemoryLimit); err != nil {
		bad("memory-limit", "%v", err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(s.LogLevel)); err != nil {
		bad("log-level", "%q must be debug, info, warn or error", s.LogLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch s.LogFormat {
	case "text":
		cfg.Logger = slog.New(slog.NewTextHandler(logOut, opts))
	case "json":
		cfg.Logger = slog.New(slog.NewJSONHandler(logOut, opts))
	default:
		bad("log-format", "%q must be text or json", s.LogFormat)
	}

	if len(errs) == 0 {
		// What is left for syncd to catch (NodeID characters, ...), in its own terms.
		errs = append(errs, cfg.Validate())
	}
	if err := errors.Join(errs...); err != nil {
		return syncd.Config{}, err
	}
	return cfg, nil
}

// splitPeer parses id=host:port.
func splitPeer(s string) (id, addr string, err error) {
	id, addr, ok := strings.Cut(s, "=")
	if !ok || !log.ValidID(id) {
		return "", "", fmt.Errorf("%q is not id=host:port", s)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", "", fmt.Errorf("%q is not id=host:port", s)
	}
	return id, addr, nil
}

// readSecretFile reads a token secret file (auth.ReadKeyFile), saying where to get one.
func readSecretFile(path string) ([]byte, error) {
	secret, err := auth.ReadKeyFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w; copy token.key from the data directory of a node of the cluster", err)
	}
	return secret, nil
}

// loadConfig turns a command line (without the program name) into the server's configuration:
// defaults, then the -config file, then the flags set on the command line.
func loadConfig(args []string) (syncd.Config, error) {
	o, err := parseArgs(args, io.Discard)
	if err != nil {
		return syncd.Config{}, err
	}
	return o.toConfig(os.Stderr)
}

// duration is a time.Duration spelled as in Go ("10m", "720h") in files and flags.
type duration time.Duration

// String formats d without trailing zero units: "10m", not "10m0s".
func (d duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// Set implements flag.Value.
func (d *duration) Set(s string) error { return d.UnmarshalText([]byte(s)) }

// MarshalText implements encoding.TextMarshaler.
func (d duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration such as \"90s\", \"10m\" or \"720h\"", b)
	}
	*d = duration(v)
	return nil
}

// list is a comma-separated flag value; each use of the flag replaces the list.
type list []string

// String implements flag.Value.
func (l *list) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ",")
}

// Set implements flag.Value.
func (l *list) Set(s string) error {
	*l = []string{}
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}
