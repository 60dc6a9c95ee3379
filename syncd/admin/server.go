package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/fanout"
	"github.com/syncd-dev/syncd/syncd/peer"
	"github.com/syncd-dev/syncd/syncd/routing"
)

// Config is what the admin server serves. Every field but MetricsAuth and Logger is required.
type Config struct {
	// Addr is the TCP address to listen on (adminapi.DefaultAddr by default in syncd.Config).
	Addr string
	// Token is the admin token (adminapi.ParseToken) every request but /healthz, /readyz and,
	// without MetricsAuth, /metrics must present as "Authorization: Bearer <token>".
	Token string
	// TokenFile is where operators find Token, named in the hint of a refusal.
	TokenFile string
	// MetricsAuth makes /metrics need Token too. Default false: Prometheus scrapes without it.
	MetricsAuth bool
	// Node is this node's raftstore node: cluster views, membership, proposals.
	Node *raftstore.Node
	// Routing routes users and conversations to shards.
	Routing *routing.Table
	// Fanout replays and drops dead letters.
	Fanout *fanout.Fanout
	// Peer runs the operator views' per-shard parts on a replica wherever one is. Start registers
	// the inspection handlers on it, so it must be called before the node serves calls.
	Peer *peer.Peer
	// Registry is served at /metrics.
	Registry *prometheus.Registry
	// Ready is /readyz's condition: nil when the node can serve.
	Ready func() error
	// MaxTokenLifetime is the longest a device token may be valid (syncd.Config), which bounds
	// how long a device revocation must be kept. Required by the revoke endpoint.
	MaxTokenLifetime time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Server is a running admin HTTP server. Create it with Start; stop it with Close.
type Server struct {
	node   *raftstore.Node
	slots  *routing.Table
	fan    *fanout.Fanout
	peer   *peer.Peer
	logger *slog.Logger

	maxTokenLifetime time.Duration

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
	s := &Server{node: cfg.Node, slots: cfg.Routing, fan: cfg.Fanout, peer: cfg.Peer, logger: logger,
		maxTokenLifetime: cfg.MaxTokenLifetime, done: make(chan struct{})}
	s.handleInspections(cfg.Peer)
	mux := newHandler(cfg.Registry, cfg.Ready)
	s.routes(mux)
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("syncd: listen for admin HTTP on %s (is another syncd running? pick another -admin): %w", cfg.Addr, err)
	}
	s.ln = ln
	s.srv = &http.Server{
		Handler:           newGuard(mux, cfg.Token, cfg.TokenFile, cfg.MetricsAuth),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// No WriteTimeout: /debug/pprof/profile and /trace stream for ?seconds=N.
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("admin HTTP server stopped", "err", err)
		}
	}()
	logger.Debug("admin HTTP listening", "addr", ln.Addr().String())
	return s, nil
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
