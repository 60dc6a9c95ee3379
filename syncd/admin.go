package syncd

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
)

// DefaultAdminAddr is the default address of the admin HTTP server (DESIGN §7). It is loopback
// so that metrics, readiness and pprof are exposed only when an operator chooses to.
const DefaultAdminAddr = "127.0.0.1:7380"

// newAdminHandler serves the admin endpoints:
//
//	/metrics        Prometheus exposition of reg
//	/healthz        200 "ok" while the process serves HTTP (liveness)
//	/readyz         200 "ok" when ready returns nil, else 503 with its error (readiness)
//	/debug/pprof/   the net/http/pprof handlers
//
// Everything is registered on a mux of its own; http.DefaultServeMux is never served (importing
// net/http/pprof still registers its handlers there, which nothing here exposes). The server adds
// its operator endpoints (see ops routes) to the returned mux.
func newAdminHandler(reg *prometheus.Registry, ready func() error) *http.ServeMux {
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

// leadersReady reports whether every shard node hosts has a known leader (on this node or
// another), the readiness condition of /readyz. Its error names the shards without one.
func leadersReady(node *raftstore.Node) error {
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

// adminServer is the running admin HTTP server.
type adminServer struct {
	srv    *http.Server
	ln     net.Listener
	logger *slog.Logger
	done   chan struct{} // closed when the serving goroutine returns
}

// startAdmin listens on addr (TCP) and serves h there in a goroutine until close. A nil logger
// means slog.Default().
func startAdmin(addr string, h http.Handler, logger *slog.Logger) (*adminServer, error) {
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", "admin")
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("syncd: listen for admin HTTP on %s (is another syncd running? pick another admin address): %w", addr, err)
	}
	a := &adminServer{
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       2 * time.Minute,
			// No WriteTimeout: /debug/pprof/profile and /trace stream for ?seconds=N.
			ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		},
		ln:     ln,
		logger: logger,
		done:   make(chan struct{}),
	}
	go func() {
		defer close(a.done)
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("admin HTTP server stopped", "err", err)
		}
	}()
	logger.Info("admin HTTP listening", "addr", ln.Addr().String())
	return a, nil
}

// Addr returns the address the admin server listens on.
func (a *adminServer) Addr() net.Addr { return a.ln.Addr() }

// close stops the admin server: it stops accepting, lets requests in progress finish until ctx
// ends (then cuts their connections), and waits for the serving goroutine. Close it before the
// node whose state /metrics reads.
func (a *adminServer) close(ctx context.Context) error {
	err := a.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, a.srv.Close()) // ctx ended: drop the connections still busy
	}
	<-a.done
	return err
}
