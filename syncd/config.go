package syncd

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/routing"
)

// Config configures a Server. Zero fields take the documented defaults, which together make a
// single node that needs no setup; Validate reports every problem at once.
type Config struct {
	// Dir is the data directory: the store, Raft snapshots, the token secret and the
	// self-signed certificate. Default "./syncd-data".
	Dir string
	// ListenAddr is the UDP address of the QUIC listener for clients. Default "127.0.0.1:7300".
	ListenAddr string
	// AdminAddr is the TCP address of the admin HTTP server (/metrics, /healthz, /readyz,
	// /debug/pprof). Default adminapi.DefaultAddr, on loopback: expose it deliberately.
	AdminAddr string
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
	// map's count and slot table instead. Default 8.
	Shards int
	// TokenSecret signs device tokens. Default: Dir/token.key, created on first start.
	TokenSecret []byte
	// CertFile and KeyFile are the TLS certificate for clients. Default: a self-signed
	// certificate in Dir, created on first start; clients pin its fingerprint.
	CertFile, KeyFile string
	// Limits announced to clients; zero fields take the protocol defaults of
	// proto.Limits.WithDefaults (MaxFrame 1 MiB, MaxBody 64 KiB, MaxBatch 256, HeartbeatMs
	// 15000). SendRatePerS is always set from SendRate.
	Limits proto.Limits
	// DedupWindow is how long a client_msg_id is remembered. Default 24h.
	DedupWindow time.Duration
	// RecallWindow is how long after sending a message its sender may recall it. Default 2m.
	RecallWindow time.Duration
	// MaxConnections caps concurrent client connections; more get TooManyConnections with a
	// retry-after. Default 20000.
	MaxConnections int
	// MaxStreamsPerConn caps the streams a connection may have open. Default 16.
	MaxStreamsPerConn int
	// Retention bounds every user log; trimmed positions are answered "too old" and devices
	// rebase. Zero fields mean no bound; the default keeps 30 days.
	Retention log.Retention
	// RetentionInterval is how often each shard leader applies Retention. Default 10m.
	RetentionInterval time.Duration
	// RequestTimeout bounds one request's replication. Default 10s.
	RequestTimeout time.Duration
	// SendRate and SendBurst bound each device's mutations: SendRate per second sustained,
	// SendBurst at once. Excess gets RateLimited with a retry-after. Defaults 20/s and 100.
	SendRate  float64
	SendBurst int
	// MaxInFlight caps the requests being replicated at once on this server. Beyond it a request
	// is refused at once with Overloaded and a retry-after, rather than queueing into timeouts.
	// Default 1024.
	MaxInFlight int
	// MaxHandshakes caps connections being authenticated at once; beyond it new connections are
	// closed with Overloaded and a retry-after (reconnect storms). Default 256.
	MaxHandshakes int
	// MinFreeDisk is the free-space watermark, in bytes, of the disk holding Dir: below it the
	// node refuses sends and group changes with Unavailable and a retry-after, and /readyz says
	// why, while reads, syncs, deliveries and trims go on; below half of it the node does not
	// start. Default 512 MiB; negative turns the watermark off. See raftstore.Config.MinFreeDisk.
	MinFreeDisk int64
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns what the zero fields of a Config stand for: a single node that needs no
// setup, each field's comment naming its default. It is the one place those defaults are
// written: cmd/syncd derives its flags, config file keys and -print-config output from it, and
// a Config field left zero and the same field copied from DefaultConfig give the same Server.
// Peers, Join, PeerDial, TokenSecret, CertFile and KeyFile have no default (the zero value is
// the documented behaviour); Logger stays nil, meaning slog.Default() as of NewServer.
// Limits.SendRatePerS stays 0: the server always announces SendRate.
func DefaultConfig() Config {
	return Config{
		Dir:               "./syncd-data",
		ListenAddr:        "127.0.0.1:7300",
		AdminAddr:         adminapi.DefaultAddr,
		NodeID:            "n1",
		RaftAddr:          "127.0.0.1:7400",
		Shards:            8,
		ReplicationFactor: raftstore.DefaultConfig().ReplicationFactor,
		Limits:            proto.Limits{}.WithDefaults(),
		DedupWindow:       time.Duration(log.DefaultDedupWindow),
		RecallWindow:      time.Duration(log.DefaultRecallWindow),
		MaxConnections:    20000,
		MaxStreamsPerConn: 16,
		Retention:         log.Retention{MaxAge: int64(30 * 24 * time.Hour)},
		RetentionInterval: 10 * time.Minute,
		RequestTimeout:    10 * time.Second,
		SendRate:          20,
		SendBurst:         100,
		MaxInFlight:       1024,
		MaxHandshakes:     256,
		MinFreeDisk:       raftstore.DefaultConfig().MinFreeDisk,
	}
}

// withDefaults returns a copy of c with every zero field set from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.Dir = cmp.Or(c.Dir, d.Dir)
	c.ListenAddr = cmp.Or(c.ListenAddr, d.ListenAddr)
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
	c.Retention = cmp.Or(c.Retention, d.Retention) // only as a whole: one bound set means the other is off
	c.RetentionInterval = cmp.Or(c.RetentionInterval, d.RetentionInterval)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, d.RequestTimeout)
	c.SendRate = cmp.Or(c.SendRate, d.SendRate)
	c.SendBurst = cmp.Or(c.SendBurst, d.SendBurst)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, d.MaxInFlight)
	c.MaxHandshakes = cmp.Or(c.MaxHandshakes, d.MaxHandshakes)
	c.MinFreeDisk = cmp.Or(c.MinFreeDisk, d.MinFreeDisk)
	c.Limits.SendRatePerS = uint32(c.SendRate)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports every problem with the configuration (after defaults), joined.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Shards < 1 || c.Shards > routing.NumSlots {
		errs = append(errs, fmt.Errorf("syncd: Shards %d must be between 1 and %d", c.Shards, routing.NumSlots))
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
	if (c.CertFile == "") != (c.KeyFile == "") {
		errs = append(errs, errors.New("syncd: CertFile and KeyFile go together: set both or neither"))
	}
	if c.TokenSecret != nil && len(c.TokenSecret) < 16 {
		errs = append(errs, errors.New("syncd: TokenSecret must be at least 16 bytes"))
	}
	if c.DedupWindow < time.Minute {
		errs = append(errs, errors.New("syncd: DedupWindow below a minute would let app retries duplicate messages"))
	}
	if c.MaxConnections < 1 || c.MaxStreamsPerConn < 2 {
		errs = append(errs, errors.New("syncd: MaxConnections must be ≥ 1 and MaxStreamsPerConn ≥ 2"))
	}
	if c.SendRate < 0 || c.SendBurst < 1 || c.MaxInFlight < 1 || c.MaxHandshakes < 1 {
		errs = append(errs, errors.New("syncd: SendRate must be ≥ 0 and SendBurst, MaxInFlight, MaxHandshakes ≥ 1"))
	}
	return errors.Join(errs...)
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
