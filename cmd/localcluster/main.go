// Command localcluster starts a static syncd cluster of a few nodes on this machine, for trying
// the cluster out: a device connecting to any node, leaders, replica lag, failover after kill -9.
// It is a development convenience, not a way to run syncd in production (every node shares one
// machine, one certificate and a secret kept next to the data).
//
//	go run ./cmd/localcluster                    # 3 nodes, data in ./localcluster
//	go run ./cmd/localcluster -dir /tmp/lc -nodes 5
//	go run ./cmd/localcluster -- -log-level debug  # flags after -- go to every syncd
//
// It builds cmd/syncd and cmd/syncctl into <dir>/bin (unless -syncd names a binary), creates on
// first start one token secret (<dir>/token.key), one admin token (<dir>/admin.token) and one
// self-signed certificate (<dir>/tls.crt) that every node uses, so one device token, one admin
// token and one fingerprint work on every node, plus a cluster CA (<dir>/ca.crt, ca.key) and a
// node certificate for each node (<dir>/certs/n<i>), so that the nodes talk in mutual TLS. It
// starts node i (1-based) on 127.0.0.i: clients (QUIC) on port -base-port, admin HTTP on
// -base-port+80, Raft on -base-port+100, data in <dir>/n<i>, its output in <dir>/n<i>/syncd.log.
// Once every node's /readyz answers 200 it prints the nodes and syncctl commands to paste, then
// runs until Ctrl-C or SIGTERM and stops the nodes (SIGTERM, then SIGKILL after 10s). A node
// that exits on its own is reported and the others keep running. A later start with the same
// -dir reuses the secrets, the certificates and the nodes' data.
//
// Linux routes all of 127.0.0.0/8 to loopback; macOS needs an alias per extra address
// (sudo ifconfig lo0 alias 127.0.0.2 up), which localcluster tells when it cannot bind.
//
// Exit status: 0 after a clean stop, 2 for a usage error, 1 for anything else.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/syncd-dev/syncd/test/proccluster"
)

// main runs the command and exits with its status.
func main() {
	os.Exit(mainStatus(os.Args[1:], os.Stdout, os.Stderr))
}

// mainStatus is the whole command: it parses args, runs the cluster until SIGINT or SIGTERM and
// returns the exit status.
func mainStatus(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "localcluster:", err)
		return 2
	}
	cfg.Stdout, cfg.Stderr = stdout, stderr
	// The context stays subscribed until run returns, so a second Ctrl-C during the shutdown does
	// not kill localcluster before its nodes (they get SIGKILL after the grace period anyway).
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(stderr, "localcluster:", err)
		return 1
	}
	return 0
}

const usageHead = `Usage: localcluster [flags] [-- syncd flags]

Starts a static syncd cluster on this machine for trying it out (not for production): node i
on 127.0.0.i, clients on -base-port, admin HTTP on -base-port+80, Raft on -base-port+100, all
sharing one token secret, one admin token and one certificate kept in -dir. Prints the nodes and
syncctl commands to try, then runs until Ctrl-C. A later start with the same -dir keeps the cluster's data.
Arguments after -- are passed to every syncd (e.g. -- -log-level debug).

Flags:
`

// parseArgs turns the command line into a config (without its writers). For -h it writes the
// usage to usage and returns flag.ErrHelp.
func parseArgs(args []string, usage io.Writer) (config, error) {
	fs := flag.NewFlagSet("localcluster", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c config
	fs.StringVar(&c.Dir, "dir", "./localcluster", "`directory` for the binaries, the shared secret and certificate, and each node's data and log")
	fs.IntVar(&c.Nodes, "nodes", 0, fmt.Sprintf("number of nodes, 1 to %d (default: what -dir was created with, else %d)", maxNodes, defaultNodes))
	fs.IntVar(&c.BasePort, "base-port", 0, fmt.Sprintf("client (QUIC) `port` of every node; admin is port+%d, Raft port+%d (default: what -dir was created with, else %d)",
		adminOffset, raftOffset, defaultBasePort))
	fs.IntVar(&c.Shards, "shards", 0, fmt.Sprintf("number of shards (default: what -dir was created with, else %d)", defaultShards))
	fs.StringVar(&c.Syncd, "syncd", "", "syncd `binary` to run instead of building ./cmd/syncd (and ./cmd/syncctl) from the repository")
	fs.DurationVar(&c.ReadyTimeout, "ready-timeout", defaultReadyTimeout, "how long to wait for every node's /readyz")
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(usage, usageHead)
			fs.SetOutput(usage)
			fs.PrintDefaults()
			return config{}, err
		}
		return config{}, fmt.Errorf("%w (localcluster -h lists the flags)", err)
	}
	c.SyncdArgs = fs.Args()
	if c.Dir == "" {
		return config{}, errors.New("-dir must not be empty")
	}
	if c.Nodes < 0 || c.Nodes > maxNodes {
		return config{}, fmt.Errorf("-nodes %d: must be between 1 and %d", c.Nodes, maxNodes)
	}
	if c.BasePort < 0 || c.BasePort+raftOffset > 65535 {
		return config{}, fmt.Errorf("-base-port %d: must be between 1 and %d", c.BasePort, 65535-raftOffset)
	}
	if c.Shards < 0 {
		return config{}, fmt.Errorf("-shards %d: must be positive", c.Shards)
	}
	if c.ReadyTimeout <= 0 {
		return config{}, fmt.Errorf("-ready-timeout %v: must be positive", c.ReadyTimeout)
	}
	return c, nil
}

// Defaults and limits of the flags.
const (
	defaultNodes        = 3
	maxNodes            = 9
	defaultBasePort     = 7300
	adminOffset         = proccluster.AdminPortOffset // admin HTTP port = base port + adminOffset
	raftOffset          = proccluster.RaftPortOffset  // Raft port = base port + raftOffset
	defaultShards       = 4                           // syncd's default (TestDefaultsFollowSyncd)
	defaultReadyTimeout = 60 * time.Second
)
