package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/fanout"
	"github.com/syncd-dev/syncd/syncd/peer"
)

// Config is what the admin server serves. Every field but MetricsAuth and Logger is required.
type Config struct {
	// Addr is the TCP address to listen on (adminapi.DefaultAddr by default in syncd.Config).
	Addr string
	// Token is the admin token (adminapi.ParseToken) every request but /healthz, /readyz and,
	// without MetricsAuth, /metrics must present as "Authorization: Bearer <token>".
	Token string
	// MetricsAuth makes /metrics need Token too. Default false: Prometheus scrapes without it.
	MetricsAuth bool
	// Node is this node's raftstore node: shard status, proposals, replica checks.
	Node *raftstore.Node
	// Cluster is this node's part of the cluster: the map, nodes, shards, moves, revocations.
	Cluster *cluster.Cluster
	// Routing routes users and conversations to shards.
	Routing *cluster.Routing
	// Fanout replays and drops dead letters.
	Fanout *fanout.Fanout
	// Peer runs the operator views' per-shard parts on a replica wherever one is. Start registers
	// the inspection handlers on it, so it must be called before the node serves calls.
	Peer *peer.Peer
	// Registry is served at /metrics.
	Registry *prometheus.Registry
	// Ready is /readyz's condition: nil when the node can serve.
	Ready func() error
	// BrowserCerts returns the certificates pages pin to reach the node over WebTransport
	// (GET /v1/webtransport/certs). May be nil: none.
	BrowserCerts func() []adminapi.BrowserCert
	// MaxTokenLifetime is the longest a device token may be valid (syncd.Config), which bounds
	// how long a device revocation must be kept. Required by the revoke endpoint.
	MaxTokenLifetime time.Duration
	// MaxConns caps the connections open at once, idle ones included; one beyond it is answered
	// 503 and closed at once. Default DefaultMaxConns.
	MaxConns int
	// MaxConnsPerSource caps them per source (an IPv4 address, or an IPv6 /64), so that one
	// machine cannot take them all. Default DefaultMaxConnsPerSource.
	MaxConnsPerSource int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Bounds of the admin HTTP server. Every connection costs a file descriptor from the one
// per-process limit the store's files also come from, so what a caller who holds no token can
// make the server keep is bounded: in number (the caps), in time (the timeouts) and in bytes.
// docs/OPERATIONS.md ("File descriptors") has the arithmetic.
const (
	// DefaultMaxConns is Config.MaxConns's default: operators, syncctl and a few Prometheus
	// servers need a handful.
	DefaultMaxConns = 128
	// DefaultMaxConnsPerSource is Config.MaxConnsPerSource's default.
	DefaultMaxConnsPerSource = 32
	// ReadHeaderTimeout bounds the wait for a request's headers.
	ReadHeaderTimeout = 5 * time.Second
	// ReadTimeout bounds the reading of a whole request, body included: a request body trickled a
	// byte at a time holds its connection no longer.
	ReadTimeout = 30 * time.Second
	// WriteTimeout bounds the writing of a response, from when its handler starts; pprof's
	// profile and trace, which run for ?seconds=N, get N more (guard.go).
	WriteTimeout = time.Minute
	// IdleTimeout closes a kept-alive connection without a request for that long.
	IdleTimeout = time.Minute
	// MaxHeaderBytes bounds a request's headers (the token is at most 512 bytes).
	MaxHeaderBytes = 64 << 10
	// MaxBody bounds a request's body: no endpoint reads one (every argument is in the URL), so a
	// larger one is refused (413) before anything reads it.
	MaxBody = 64 << 10
)

// Server is a running admin HTTP server. Create it with Start; stop it with Close.
type Server struct {
	node    *raftstore.Node
	cluster *cluster.Cluster
	slots   *cluster.Routing
	fan     *fanout.Fanout
	peer    *peer.Peer
	logger  *slog.Logger

	maxTokenLifetime time.Duration
	browserCerts     func() []adminapi.BrowserCert

	srv  *http.Server
	ln   net.Listener
	done chan struct{} // closed when the serving goroutine returns
}

// Start registers the inspection handlers on cfg.Peer, listens on cfg.Addr (TCP) and serves the
// admin endpoints there in a goroutine until Close, every request passing the guard (guard.go)
// first. It fails if cfg.Token is not a valid admin token.
func Start(cfg Config) (*Server, error) {
	if _, err := adminapi.ParseToken(cfg.Token); err != nil {
		return nil, fmt.Errorf("syncd: admin token: %w", err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", "admin")
	s := &Server{node: cfg.Node, cluster: cfg.Cluster, slots: cfg.Routing, fan: cfg.Fanout, peer: cfg.Peer, logger: logger, browserCerts: cfg.BrowserCerts,
		maxTokenLifetime: cfg.MaxTokenLifetime, done: make(chan struct{})}
	s.handleInspections(cfg.Peer)
	mux := newHandler(cfg.Registry, cfg.Ready)
	s.routes(mux)
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("syncd: listen for admin HTTP on %s (is another syncd running? pick another -admin): %w", cfg.Addr, err)
	}
	s.ln = ln
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "syncd_admin_connections_refused_total",
		Help: "Admin HTTP connections closed at accept: reason total (MaxConns open) or source (MaxConnsPerSource from its address)."},
		[]string{"reason"})
	cfg.Registry.MustRegister(refused)
	limited := raftstore.LimitListener(ln, cmp.Or(cfg.MaxConns, DefaultMaxConns), cmp.Or(cfg.MaxConnsPerSource, DefaultMaxConnsPerSource),
		func(c net.Conn, reason string) {
			refused.WithLabelValues(reason).Inc()
			// A last word for an operator's curl; not logged: anyone who reaches the port could fill the log.
			io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"+
				"Retry-After: 1\r\nConnection: close\r\nContent-Length: "+strconv.Itoa(len(refusedBody[reason]))+"\r\n\r\n"+refusedBody[reason])
		})
	s.srv = &http.Server{
		Handler:           newGuard(mux, cfg.Token, cfg.MetricsAuth),
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		// No server-wide WriteTimeout: pprof would refuse profiles longer than it. The guard sets
		// each request's write deadline instead (WriteTimeout, more for a profile).
		IdleTimeout:    IdleTimeout,
		MaxHeaderBytes: MaxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(limited); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("admin HTTP server stopped", "err", err)
		}
	}()
	logger.Debug("admin HTTP listening", "addr", ln.Addr().String())
	return s, nil
}

// refusedBody is the 503's text for a connection refused at accept, by LimitListener's reason.
var refusedBody = map[string]string{
	"total":  "too many admin connections open on this node; retry in a second\n",
	"source": "too many admin connections open from your address; close some, or retry in a second\n",
}

// newHandler serves the admin endpoints:
//
//	/metrics        Prometheus exposition of reg (needs the admin token with Config.MetricsAuth)
//	/healthz        200 "ok" while the process serves HTTP (liveness), open
//	/readyz         200 "ok" when ready returns nil, else 503 with its error (readiness), open
//	/debug/pprof/   the net/http/pprof handlers (read only; needs the admin token)
//
// Everything is registered on a mux of its own; http.DefaultServeMux is never served (importing
// net/http/pprof still registers its handlers there, which nothing here exposes). The server adds
// its operator endpoints (routes.go) to the returned mux.
func newHandler(reg *prometheus.Registry, ready func() error) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry:            reg, // counts its own errors as promhttp_metric_handler_errors_total
		MaxRequestsInFlight: 4,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			writeText(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		writeText(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index) // also serves the named profiles: heap, goroutine…
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

func writeText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}

// LeadersReady reports whether every shard node hosts has a known leader (on this node or
// another), part of the readiness condition of /readyz. Its error names the shards without one.
func LeadersReady(node *raftstore.Node) error {
	var missing []raftstore.ShardID
	for _, st := range node.Status() {
		if st.LeaderID == "" {
			missing = append(missing, st.Shard)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("not ready: no known leader for shards %v", missing)
	}
	return nil
}

// Addr returns the address the admin server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops the admin server: it stops accepting, lets requests in progress finish until ctx
// ends (then cuts their connections), and waits for the serving goroutine. Close it before the
// node whose state /metrics reads.
func (s *Server) Close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, s.srv.Close()) // ctx ended: drop the connections still busy
	}
	<-s.done
	return err
}
