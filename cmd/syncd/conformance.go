package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/syncd-dev/syncd/syncd/conformance"
)

// conformanceUsage heads `syncd conformance -h`.
const conformanceUsage = `Usage: syncd conformance [flags]

Runs the conformance kit (docs/CONFORMANCE.md): a syncd server on a temporary store behind a relay
that injects, per run, the fault a driver asks for by name, and judges the client from what it
does next. A driver in any language starts runs through the control API (GET /v1/scenarios,
POST /v1/runs), connects its client to the address each run names, and reports what the client
stored until the kit says passed or failed. One line per judged run goes to stdout. Not a server
for users: its control API has no authentication; keep it on loopback.

Flags:
`

// runConformance is `syncd conformance`: the kit, until ctx ends.
func runConformance(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("syncd conformance", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	listen := fs.String("listen", "127.0.0.1:7600", "UDP `address` clients connect to over QUIC (ALPN syncd/1)")
	control := fs.String("control", "127.0.0.1:7601", "TCP `address` of the control API drivers use (HTTP, no authentication: keep it on loopback)")
	web := fs.String("web", "127.0.0.1:7602", "`host:port` browsers connect to (WebTransport on UDP, WebSocket on TCP, path /syncd/1), or \"off\"")
	dir := fs.String("data-dir", "", "`directory` for the kit's server data (default: a temporary directory, removed on exit)")
	timeout := fs.Duration("run-timeout", time.Minute, "how long one run may take before it fails")
	level := fs.String("log-level", "warn", "log level: debug (every frame the relay sees that matters to a verdict), info, warn or error")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, conformanceUsage)
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return 0
		}
		printErr(stderr, fmt.Errorf("%w (syncd conformance -h lists the flags)", err))
		return 2
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil || fs.NArg() > 0 {
		printErr(stderr, fmt.Errorf("-log-level %q must be debug, info, warn or error, and no argument may follow the flags", *level))
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv}))
	k, err := conformance.Start(conformance.Config{Listen: *listen, Control: *control, Web: *web, Dir: *dir, RunTimeout: *timeout,
		Logger: logger, Out: stdout})
	if err != nil {
		printErr(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "conformance kit: clients connect to %s (pin certificate %s); drivers use %s/v1/scenarios and /v1/runs; stop with Ctrl-C\n",
		k.Addr(), k.Fingerprint(), k.ControlURL())
	<-ctx.Done()
	if err := k.Close(); err != nil {
		printErr(stderr, err)
		return 1
	}
	return 0
}
