// Command syncd runs a syncd server node.
//
// With no flags it runs a single node on embedded defaults (syncd.DefaultConfig; -print-config
// lists them): clients over QUIC, admin HTTP and Raft on loopback, single-voter shards, and a data
// directory under the working directory, where a token secret and a self-signed certificate are
// created on first start. With -peers it starts a static cluster (every node gets the same list);
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
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/syncd-dev/syncd/syncd"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole command; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	opts, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		printErr(stderr, err)
		return 2
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
	if err := serve(cfg); err != nil {
		printErr(stderr, err)
		return 1
	}
	return 0
}

// serve runs the server until SIGINT or SIGTERM.
func serve(cfg syncd.Config) error {
	srv, err := syncd.NewServer(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg.Logger.Info("syncd serving; stop with Ctrl-C or SIGTERM", "clients", srv.Addr().String(),
		"admin", srv.AdminAddr().String(), "raft", srv.Node().Addr(), "data", cfg.Dir, "cert_sha256", srv.Fingerprint())
	err = srv.Run(ctx)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	cfg.Logger.Info("stopped")
	return err
}

// printErr writes err to w, one "syncd: " line per joined error.
func printErr(w io.Writer, err error) {
	for line := range strings.SplitSeq(err.Error(), "\n") {
		fmt.Fprintln(w, "syncd:", strings.TrimPrefix(line, "syncd: ")) // the package's errors carry the prefix already
	}
}
