// Command syncd runs a syncd server node.
//
// With no flags it runs a single node on embedded defaults: data in ./syncd-data, clients over
// QUIC on 127.0.0.1:7300, Raft on 127.0.0.1:7400, eight single-voter shards, a token secret and a
// self-signed certificate created in the data directory on first start. With -peers it joins a
// static cluster (every node gets the same list).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "syncd:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("syncd", flag.ContinueOnError)
	var (
		dataDir  = fs.String("data-dir", "./syncd-data", "directory for the store, snapshots, token secret and certificate")
		listen   = fs.String("listen", "127.0.0.1:7300", "UDP address of the QUIC listener for clients")
		admin    = fs.String("admin", syncd.DefaultAdminAddr, "TCP address of the admin HTTP server: /metrics, /healthz, /readyz, /debug/pprof")
		nodeID   = fs.String("node-id", "n1", "this node's id, unique in the cluster")
		raftAddr = fs.String("raft-addr", "127.0.0.1:7400", "address of the node's Raft listener (shared by all shards)")
		shards   = fs.Int("shards", 8, "number of shards (Raft groups); must be the same on every node")
		peers    = fs.String("peers", "", "static cluster: comma-separated id=host:port (Raft addresses) of every node, this one included")
		certFile = fs.String("cert", "", "TLS certificate file for clients (default: self-signed, created in -data-dir)")
		keyFile  = fs.String("key", "", "TLS key file, with -cert")
		logLevel = fs.String("log-level", "info", "debug, info, warn or error")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	cfg := syncd.Config{Dir: *dataDir, ListenAddr: *listen, AdminAddr: *admin, NodeID: *nodeID, RaftAddr: *raftAddr,
		Shards: *shards, CertFile: *certFile, KeyFile: *keyFile, Logger: logger}
	if *peers != "" {
		for _, p := range strings.Split(*peers, ",") {
			id, addr, ok := strings.Cut(strings.TrimSpace(p), "=")
			if !ok {
				return fmt.Errorf("-peers: %q is not id=host:port", p)
			}
			cfg.Peers = append(cfg.Peers, raftstore.Peer{ID: id, Addr: addr})
		}
	}
	srv, err := syncd.NewServer(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger.Info("syncd serving; stop with Ctrl-C or SIGTERM", "clients", srv.Addr().String(),
		"admin", srv.AdminAddr().String(), "raft", srv.Node().Addr(), "data", *dataDir, "cert_sha256", srv.Fingerprint())
	err = srv.Run(ctx)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	logger.Info("stopped")
	return err
}
