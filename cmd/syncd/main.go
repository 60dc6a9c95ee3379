// Command syncd runs a syncd node.
//
// With no flags it runs a single node on embedded defaults: data in ./syncd-data, the Raft
// listener on 127.0.0.1:7400, eight shards, each a single-voter Raft group. With -peers it joins
// a static cluster (every node gets the same list).
//
// At this stage syncd is the replicated storage core: it keeps user and conversation logs in
// Pebble, replicated by Raft. The client protocol (QUIC) is served by a later release.
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
	"time"

	"github.com/syncd-dev/syncd/raftstore"
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
		dataDir  = fs.String("data-dir", "./syncd-data", "directory for the node's store and snapshots")
		nodeID   = fs.String("node-id", "n1", "this node's id, unique in the cluster")
		raftAddr = fs.String("raft-addr", "127.0.0.1:7400", "address of the node's Raft listener (shared by all shards)")
		shards   = fs.Int("shards", 8, "number of shards (Raft groups); must be the same on every node")
		peers    = fs.String("peers", "", "static cluster: comma-separated id=host:port of every node, this one included")
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

	cfg := raftstore.Config{NodeID: *nodeID, Dir: *dataDir, RaftAddr: *raftAddr, Logger: logger}
	if *shards < 1 {
		return errors.New("-shards must be at least 1")
	}
	for i := 1; i <= *shards; i++ {
		cfg.Shards = append(cfg.Shards, raftstore.ShardID(i))
	}
	if *peers != "" {
		for _, p := range strings.Split(*peers, ",") {
			id, addr, ok := strings.Cut(strings.TrimSpace(p), "=")
			if !ok {
				return fmt.Errorf("-peers: %q is not id=host:port", p)
			}
			cfg.Peers = append(cfg.Peers, raftstore.Peer{ID: id, Addr: addr})
		}
	}

	node, err := raftstore.New(cfg)
	if err != nil {
		return err
	}
	defer node.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	for _, id := range node.Shards() {
		if _, _, err := node.WaitLeader(wait, id); err != nil {
			logger.Warn("shard has no leader yet", "shard", id, "err", err)
		}
	}
	cancel()
	for _, st := range node.Status() {
		logger.Info("shard ready", "shard", st.Shard, "state", st.State, "leader", st.LeaderID,
			"applied", st.AppliedIndex)
	}
	logger.Info("syncd node running; stop with Ctrl-C or SIGTERM", "node", cfg.NodeID, "raft", node.Addr(), "data", *dataDir)
	<-ctx.Done()
	logger.Info("shutting down")
	return node.Close()
}
