package syncd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd/admin"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/auth"
	"github.com/syncd-dev/syncd/syncd/buildinfo"
	"github.com/syncd-dev/syncd/syncd/fanout"
	"github.com/syncd-dev/syncd/syncd/peer"
	"github.com/syncd-dev/syncd/syncd/tracing"
	"github.com/syncd-dev/syncd/syncd/transport"
)

// Server is a syncd node serving clients over QUIC: it owns the node's shards (raftstore), the
// fan-out, the call plane, the admin HTTP server and the client connections. Create it with
// NewServer, then call Run.
type Server struct {
	cfg         Config
	logger      *slog.Logger
	cluster     *cluster.Cluster // the node's part of the cluster: the map, moves, revocations
	node        *raftstore.Node  // the cluster's node: the shards
	slots       *cluster.Routing
	formats     formatGate // whether every node reads this build's newest formats (formats.go)
	fan         *fanout.Fanout
	mover       *cluster.Driver
	peer        *peer.Peer
	notes       *notifier
	srcMarks    sourceMarks   // acks of large groups' logs, for their delivered marks (sourcemarks.go)
	keys        *auth.Keyring // token keys: TokenSecret (current) and TokenKeys
	adminToken  string
	fingerprint string
	udp         *quic.Transport // the client listener's UDP socket (admission.go)
	ln          *quic.Listener
	web         *transport.WebListener // browsers' listeners (web.go); nil with WebAddr "off"
	webCerts    *auth.BrowserCerts     // the certificates browsers pin (web.go); nil with CertFile
	metrics     *metrics
	admin       *admin.Server
	app         *nodeApp // what the node calls up to: applies, calls, attributes
	// tracer records messages' paths as spans (Config.TraceEndpoint); nil when tracing is off.
	// Started and stopped by Run, which starts everything that uses it.
	tracer *tracing.Tracer

	// removed is cancelled once this node has been removed from the cluster: its client
	// connections are closed, and new ones refused, so devices move to another node.
	removed     context.Context
	markRemoved context.CancelFunc
	conns       atomic.Int64 // open client connections
	inflight    gate         // requests being served (Config.MaxInFlight)
	handshakes  gate         // connections being authenticated (Config.MaxHandshakes)
	sources     counts       // connections being authenticated per source (Config.MaxHandshakesPerSource)
	userConns   counts       // open connections per user (Config.MaxConnectionsPerUser)
	sessions    sessions     // authenticated connections by device, for revocations (control.go)
	// Rates per device and per user, shared by all of their connections (limits.go).
	sends, queries *buckets    // per device: Config.SendRate/SendBurst, QueryRate/QueryBurst
	reports        *buckets    // per device: the Reports counted and logged (digest.go)
	memberAdds     *buckets    // per user: users named in group creations and adds, Config.MembersPerMinute
	groupSeats     groupSeats  // places held in users' group counts by changes in flight (groupquota.go)
	syncs          syncStreams // the live sync stream of each device (a new one supersedes it)

	answers *answerBudgets // bytes of answers held per device and user (answers.go)
}

// NewServer opens the node's store and shards and binds the QUIC listener. On first start with
// default settings it creates the token secret, a self-signed certificate and the admin token in
// Config.Dir, and, for a node of no cluster, the node plane's CA and certificate (see
// Config.NodeCAFile).
func NewServer(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	checkFDLimit(cfg.Logger)
	s := &Server{cfg: cfg, logger: cfg.Logger, notes: newNotifier(),
		inflight: make(gate, cfg.MaxInFlight), handshakes: make(gate, cfg.MaxHandshakes), answers: newAnswerBudgets(cfg),
		sends: newBuckets(cfg.SendRate, cfg.SendBurst), queries: newBuckets(cfg.QueryRate, cfg.QueryBurst),
		reports:    newBuckets(float64(reportsPerMinute)/60, reportBurst),
		memberAdds: newBuckets(float64(cfg.MembersPerMinute)/60, cfg.MembersPerMinute)}
	s.removed, s.markRemoved = context.WithCancel(context.Background())
	var err error
	secret := cfg.TokenSecret
	if secret == nil {
		if secret, err = auth.LoadOrCreateSecret(cfg.Dir); err != nil {
			return nil, err
		}
	}
	if s.keys, err = auth.NewKeyring(secret, cfg.TokenKeys...); err != nil {
		return nil, err
	}
	adminTokenFile := cfg.AdminTokenFile
	if adminTokenFile == "" {
		s.adminToken, err = auth.LoadOrCreateAdminToken(cfg.Dir)
	} else if s.adminToken, err = adminapi.ReadToken(adminTokenFile); errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("syncd: %w; create it (openssl rand -hex 32 > %s; chmod 600 %[2]s), or name the file the "+
			"cluster's nodes share", err, adminTokenFile)
	} else if err != nil {
		err = fmt.Errorf("syncd: %w", err)
	}
	if err != nil {
		return nil, err
	}
	var cert tls.Certificate
	if cfg.CertFile != "" {
		cert, s.fingerprint, err = auth.LoadCert(cfg.CertFile, cfg.KeyFile)
	} else {
		cert, s.fingerprint, err = auth.SelfSignedCert(cfg.Dir, nil)
	}
	if err != nil {
		return nil, err
	}
	if cfg.CertFile == "" && cfg.servesWebTransport() {
		if s.webCerts, err = auth.NewBrowserCerts(cfg.Dir, s.logger); err != nil {
			return nil, err
		}
	}
	nodeTLS, err := nodeTLS(cfg)
	if err != nil {
		return nil, err
	}
	s.app = &nodeApp{notes: s.notes}
	s.cluster, err = cluster.Start(cluster.Config{
		Node: raftstore.Config{
			NodeID: cfg.NodeID, Dir: cfg.Dir, RaftAddr: cfg.RaftAddr, Peers: cfg.Peers,
			PeerAddr: cfg.peerAddr(), Logger: cfg.Logger, TLS: nodeTLS, Insecure: nodeTLS == nil,
			MinFreeDisk: cfg.MinFreeDisk, App: s.app,
		},
		Join: cfg.Join, ShardCount: cfg.Shards, ReplicationFactor: cfg.ReplicationFactor,
		DeviceRevoked: s.deviceRevoked,
	})
	if err != nil {
		return nil, err
	}
	s.node = s.cluster.Node()
	s.slots = s.cluster.Routing()
	s.formats.cluster = s.cluster
	// The conversation references in spans are keyed by the token secret, which every node of
	// the cluster shares, so a conversation has one reference cluster-wide.
	s.tracer = tracing.New(tracing.Config{Endpoint: cfg.TraceEndpoint, SampleRatio: cfg.TraceSampleRatio,
		NodeID: cfg.NodeID, Version: buildinfo.Get().Version, ConvKey: secret, Logger: cfg.Logger})
	// s.metrics is set below, before the fan-out runs.
	s.fan = fanout.New(s.node, s.slots, fanout.Config{Logger: cfg.Logger, Observe: func(d time.Duration) { s.metrics.observeFanout(d) },
		Tracer: s.tracer, DeadLetters: deadLetterPolicy(cfg, &s.formats)})
	s.app.fan.Store(s.fan)
	s.mover = s.cluster.Driver(cluster.DriverConfig{
		Logger: cfg.Logger, Drained: s.fan.Drained,
		Observe: func(pause time.Duration, copied int64) { s.metrics.observeMove(pause, copied) },
	})
	s.peer = peer.New(s.node)
	s.handleReads(s.peer)
	reg := prometheus.NewRegistry()
	s.metrics = newMetrics(reg, s.node, s.cluster, s.conns.Load, s.fan)
	registerDiskMetrics(reg, s.node.DiskSpace)
	registerAnswerMetrics(reg, s.answers.held.Load)
	registerSourceCacheMetrics(reg, s.notes.cache)
	s.admin, err = admin.Start(admin.Config{Addr: cfg.AdminAddr, Token: s.adminToken,
		MaxTokenLifetime: cfg.MaxTokenLifetime,
		MetricsAuth:      cfg.AdminMetricsAuth, Node: s.node, Cluster: s.cluster, Routing: s.slots, Fanout: s.fan,
		Peer: s.peer, Registry: reg, Ready: s.Ready, BrowserCerts: s.BrowserCerts, Logger: s.logger})
	if err != nil {
		s.cluster.Close()
		return nil, err
	}
	s.app.peer.Store(s.peer)
	if err := s.listen(auth.ServerTLSConfig(cert, proto.ALPN)); err != nil {
		s.admin.Close(context.Background())
		s.cluster.Close()
		return nil, fmt.Errorf("syncd: listen for clients on %s (is another syncd running? pick another -listen): %w", cfg.ListenAddr, err)
	}
	if err := s.listenWeb(cert); err != nil {
		s.closeListener()
		s.admin.Close(context.Background())
		s.cluster.Close()
		return nil, err
	}
	s.app.attrs.Store(&map[string]string{adminapi.AttrClient: s.ln.Addr().String(), adminapi.AttrAdmin: s.admin.Addr().String(),
		adminapi.AttrFormat: strconv.Itoa(formatLevel)})
	return s, nil
}

// Ready reports whether the node can serve (what /readyz answers): it has the cluster map, knows
// a leader for every shard it hosts, was not removed from the cluster, and has the free disk
// space Config.MinFreeDisk asks for (it refuses new writes otherwise).
func (s *Server) Ready() error {
	if s.cluster.Removed() {
		return errors.New("not ready: this node was removed from the cluster; stop it")
	}
	if d := s.node.DiskSpace(); d.Low {
		return fmt.Errorf("not ready: disk space low: %v; reads and syncs go on. Free space on that disk "+
			"(see docs/OPERATIONS.md, \"Disk space\")", d)
	}
	if s.cluster.SlotTable() == nil {
		return errors.New("not ready: waiting for the cluster map (joining, or the cluster's first election)")
	}
	return admin.LeadersReady(s.node)
}

// Addr returns the client listener's address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Fingerprint returns the SHA-256 fingerprint of the server certificate, which clients pin.
func (s *Server) Fingerprint() string { return s.fingerprint }

// MintToken signs a token for device of user uid, valid for ttl, with the current token key
// (Config.TokenSecret).
func (s *Server) MintToken(uid, device string, ttl time.Duration) (string, error) {
	now := time.Now()
	return s.keys.Mint(auth.TokenClaims{User: uid, Device: device, Issued: now, Expires: now.Add(ttl)})
}

// AdminToken returns the admin token, the bearer credential the admin HTTP server requires
// (Config.AdminTokenFile).
func (s *Server) AdminToken() string { return s.adminToken }

// Node returns the server's storage node (status pages, tests).
func (s *Server) Node() *raftstore.Node { return s.node }

// Cluster returns the server's part of the cluster: the map, moves, revocations (tests, tools).
func (s *Server) Cluster() *cluster.Cluster { return s.cluster }

// Run serves clients and runs the fan-out until ctx ends, then shuts down gracefully: it stops
// accepting, closes client connections, waits for every goroutine, and closes the store.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := s.tracer.Start(); err != nil {
		s.logger.Error("tracing stays off", "err", err)
	}
	var wg sync.WaitGroup
	if s.awaitClusterMap(ctx) == nil {
		wg.Add(4)
		go func() {
			defer wg.Done()
			s.fan.Run(ctx)
		}()
		if !s.cfg.DisableDeliveryReports {
			wg.Add(2)
			go func() {
				defer wg.Done()
				s.deliveryLoop(ctx)
			}()
			go func() {
				defer wg.Done()
				s.sourceMarksLoop(ctx)
			}()
		}
		go func() {
			defer wg.Done()
			s.mover.Run(ctx)
		}()
		go func() {
			defer wg.Done()
			s.retainLoop(ctx)
		}()
		if !s.cfg.DisableDeadLetterProcess {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.deadLetterLoop(ctx)
			}()
		}
		go func() {
			defer wg.Done()
			s.watchRemoval(ctx)
		}()
		if s.web != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.acceptLoop(ctx, &wg, s.web.Accept)
			}()
		}
		s.acceptLoop(ctx, &wg, func(ctx context.Context) (transport.Conn, error) {
			c, err := s.ln.Accept(ctx)
			if err != nil {
				return nil, err
			}
			return transport.FromQUIC(c), nil
		})
	}
	s.handOver()
	cancel()
	s.ln.Close()
	wg.Wait()
	s.closeListener()
	if s.web != nil {
		s.web.Close()
	}
	s.markRemoved() // releases the context; nothing watches it any more
	closeCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	if err := s.tracer.Stop(closeCtx); err != nil { // everything that records spans has stopped
		s.logger.Warn("tracing: the last spans were not exported", "err", err)
	}
	return errors.Join(s.admin.Close(closeCtx), s.cluster.Close()) // admin first: scrapes read the store
}

// handOverTimeout bounds how long a stopping node waits for its groups' new leaders: a
// transfer takes a round trip or two, and one to a follower that lags a little, a few more.
const handOverTimeout = 5 * time.Second

// handOver gives the leadership of every group this node leads to another node before it stops
// (raftstore.Node.HandOver), so that a node stopped on purpose — SIGTERM, a rolling upgrade —
// stalls no write for an election timeout, as a crash does.
func (s *Server) handOver() {
	ctx, cancel := context.WithTimeout(context.Background(), handOverTimeout)
	defer cancel()
	start := time.Now()
	handed, err := s.node.HandOver(ctx)
	if handed > 0 {
		s.logger.Info("handed the leadership of this node's groups to other nodes", "groups", handed, "took", time.Since(start).Round(time.Millisecond))
	}
	if err != nil {
		s.logger.Warn("some groups were not handed over: they elect a leader after this node stops", "err", err)
	}
}

// awaitClusterMap waits until this node has the cluster map, whose slot table routes every key:
// at once on a restart, after the first election of a new cluster, once joined on a joining
// node. Until then connecting devices wait in the listener's queue.
func (s *Server) awaitClusterMap(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	slow := time.NewTimer(10 * time.Second)
	defer slow.Stop()
	for s.cluster.SlotTable() == nil {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-slow.C:
			s.logger.Warn("still waiting for the cluster map; check that this node can reach the cluster (its -join address or -peers)")
		case <-tick.C:
		}
	}
	// A restarted node replays its meta log only once it hears the commit index: until then its
	// revocations may be older than before the restart, and a revoked device would get in.
	for wait := time.Now().Add(10 * time.Second); !s.cluster.Current(); {
		if time.Now().After(wait) {
			s.logger.Warn("serving with the cluster map not yet caught up with this node's log: device revocations made while it was down may take effect late")
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	if m, _ := s.cluster.Map(); m.Shards != s.cfg.Shards {
		s.logger.Info("the cluster's shard count is fixed when it is created: following the cluster map",
			"cluster_shards", m.Shards, "configured_shards", s.cfg.Shards)
	}
	return nil
}

// acceptLoop serves the client connections accept returns until ctx ends or it fails.
func (s *Server) acceptLoop(ctx context.Context, wg *sync.WaitGroup, accept func(context.Context) (transport.Conn, error)) {
	for {
		conn, err := accept(ctx)
		if err != nil {
			return
		}
		if int(s.conns.Load()) >= s.cfg.MaxConnections {
			closeConn(conn, &proto.Error{Code: proto.CodeTooManyConnections, Message: "this node has the most connections it serves; try another node", RetryAfterMs: 5000})
			continue
		}
		s.conns.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.conns.Add(-1)
			s.serveConn(ctx, conn)
		}()
	}
}

const removedMsg = "this node was removed from the cluster; connect to another node"

// watchRemoval notices that this node was removed from the cluster (a few seconds late at most)
// and then closes its client connections and refuses new ones, so devices move to other nodes.
func (s *Server) watchRemoval(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.cluster.Removed() {
			s.logger.Warn("this node was removed from the cluster: closing client connections; it hosts nothing and can be stopped")
			s.markRemoved()
			return
		}
	}
}

// SetDeliveryFault installs a fault injector on the fan-out (fanout.Fanout.SetFault), or removes
// it when nil: for tests that need a destination to refuse deliveries. Production code never
// calls it.
func (s *Server) SetDeliveryFault(fault fanout.Fault) { s.fan.SetFault(fault) }

// AdminAddr returns the admin HTTP server's address.
func (s *Server) AdminAddr() net.Addr { return s.admin.Addr() }
