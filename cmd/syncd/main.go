// Command syncd runs a syncd server node.
//
// With no flags it runs a single node on embedded defaults (syncd.DefaultConfig; -print-config
// lists them): clients over QUIC, admin HTTP and Raft on loopback, single-voter shards, and a data
// directory under the working directory, where a token secret, a self-signed certificate and the
// admin token are created on first start. With -peers it starts a static cluster (every node gets the same list);
// with -join it joins one.
//
// Settings come from the defaults, then an optional TOML file (-config), then the flags given on
// the command line; each file key has a flag of the same name in kebab-case. -print-config
// prints the result as a commented TOML file and exits; for no flags and no file that output is
// docs/syncd.example.toml, which lists every key with its default.
//
// Exit status: 0 after a clean stop, 2 for a usage or configuration error, 1 when the server
// fails to start or stops with an error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"github.com/syncd-dev/syncd/raftstore/nodecert"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/auth"
	"github.com/syncd-dev/syncd/syncd/buildinfo"
	"github.com/syncd-dev/syncd/syncd/transport"
)

func main() {
	// SIGINT (Ctrl-C) and SIGTERM stop the server gracefully; a second one kills the process,
	// as NotifyContext restores the default handling once ctx is done.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	rc := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(rc)
}

// defaultGCPercent is the GOGC syncd runs with unless the environment sets one. Nearly all of a
// server's heap is garbage within a request or an apply batch; at Go's default of 100 the
// collector took about a sixth of the CPU of a send, at 200 it takes half as much (docs/BENCHMARKS.md,
// "The write path"), for a heap that may grow to three times the live data between collections
// rather than two.
const defaultGCPercent = 200

// run is the whole command, serving until ctx ends; it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "conformance" {
		return runConformance(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "restore" {
		return runRestore(args[1:], stdout, stderr)
	}
	opts, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		printErr(stderr, err)
		return 2
	}
	if opts.version {
		fmt.Fprintln(stdout, "syncd", buildinfo.Get())
		return 0
	}
	cfg, err := opts.toConfig(stderr)
	if err != nil {
		printErr(stderr, err)
		return 2
	}
	if opts.printConfig {
		if err := writeTOML(stdout, opts.settings); err != nil {
			printErr(stderr, err)
			return 1
		}
		return 0
	}
	if err := serve(ctx, cfg, opts.settings); err != nil {
		printErr(stderr, err)
		return 1
	}
	return 0
}

// serve runs the server until ctx ends. At the default level what it logs on a quiet start is
// the few lines of startup, then "stopped".
func serve(ctx context.Context, cfg syncd.Config, s fileConfig) error {
	// Where the files operators copy elsewhere are, and which of them NewServer is about to
	// create: on a first start a newcomer learns that they exist.
	files := []struct{ name, path, def string }{{"token_secret", s.TokenSecretFile, auth.TokenKeyFile},
		{"cert", s.Cert, auth.TLSCertFile}, {"admin_token", s.AdminTokenFile, adminapi.TokenFile}}
	if !s.InsecureNodePlane {
		files = append(files, struct{ name, path, def string }{"node_ca", s.NodeCA, nodecert.CAFile},
			struct{ name, path, def string }{"node_cert", s.NodeCert, nodecert.CertFile})
	}
	var created []string
	for i, f := range files {
		if f.path != "" {
			continue // the operator's own file, which must exist
		}
		files[i].path = filepath.Join(cfg.Dir, f.def)
		if _, err := os.Stat(files[i].path); errors.Is(err, fs.ErrNotExist) {
			created = append(created, f.def)
		}
	}
	ml, err := parseMemoryLimit(s.MemoryLimit)
	if err != nil {
		return err // toConfig refused it already
	}
	limit, limitFrom := applyMemoryLimit(ml, "/")
	srv, err := syncd.NewServer(cfg)
	if err != nil {
		return err
	}
	l := cfg.Logger
	// One line per concern. The attribute names are stable: syncctl's help points at cert_sha256.
	l.Info("clients: QUIC", "addr", srv.Addr().String(), "cert_sha256", srv.Fingerprint())
	if wt, ws := srv.WebAddrs(); wt != "" || ws != "" {
		attrs := []any{}
		if wt != "" {
			attrs = append(attrs, "webtransport", "https://"+wt+transport.Path)
			for _, c := range srv.BrowserCerts() {
				attrs = append(attrs, "webtransport_cert_sha256", c.SHA256)
			}
		}
		if ws != "" {
			scheme := "wss://"
			if srv.WebSocketPlain() {
				scheme = "ws://"
			}
			attrs = append(attrs, "websocket", scheme+ws+transport.Path)
		}
		l.Info("clients: browsers; pages pin the webtransport certificates (GET /v1/webtransport/certs)", attrs...)
	}
	open := "/healthz, /readyz, /metrics"
	if cfg.AdminMetricsAuth {
		open = "/healthz, /readyz"
	}
	l.Info("admin: HTTP; /v1 (syncctl) and /debug/pprof need the admin token, "+open+" are open",
		"addr", srv.AdminAddr().String())
	nodePlane := "mutual TLS 1.3 under the cluster CA"
	if cfg.InsecureNodePlane {
		nodePlane = "plain TCP, INSECURE"
	}
	l.Info("raft: TCP, shared by all shards", "addr", srv.Node().Addr(), "node", srv.Node().ID(), "security", nodePlane)
	attrs := []any{"dir", cfg.Dir}
	for _, f := range files {
		attrs = append(attrs, f.name, f.path)
	}
	if len(created) > 0 {
		attrs = append(attrs, "created", strings.Join(created, ","))
	}
	l.Info("data directory", attrs...)
	mib := "none"
	if limit != math.MaxInt64 {
		mib = strconv.FormatInt(limit>>20, 10)
	}
	l.Info("syncd serving; stop with Ctrl-C or SIGTERM", "version", buildinfo.Get().String(), "memory_limit_mib", mib, "memory_limit_from", limitFrom)
	err = srv.Run(ctx)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	l.Info("stopped")
	return err
}

// printErr writes err to w, one "syncd: " line per joined error.
func printErr(w io.Writer, err error) {
	for line := range strings.SplitSeq(err.Error(), "\n") {
		fmt.Fprintln(w, "syncd:", strings.TrimPrefix(line, "syncd: ")) // the package's errors carry the prefix already
	}
}
