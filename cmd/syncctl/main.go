// Command syncctl talks to a syncd server as a user device, through the Go SDK (package client):
// it sends messages, receipts, recalls, edits, reactions and group changes, prints the user's log, and shows a
// node's shard status. `syncctl token` mints a device token with a server's signing secret (a
// development and operations convenience); `syncctl cert` creates the cluster CA and the node
// certificates of the node plane.
//
// Run `syncctl help` for the commands and `syncctl <command> -h` for each one's flags and an
// example.
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
	"sync"
	"syscall"

	"github.com/syncd-dev/syncd/syncd/buildinfo"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and failed (refused, not acknowledged, not ready)
	exitUsage = 2 // bad command line
	// exitIncomplete: the command found nothing wrong but could not look at everything (shard
	// check: a replica gave no checksum in time).
	exitIncomplete = 3
)

// command is one subcommand: run gets the arguments after its name.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *env, args []string) int
}

var commands = []command{
	{"token", "mint a device token with a server's signing secret (dev/ops)", runToken},
	{"cert", "create the cluster CA and node certificates of the node plane (mutual TLS)", runCert},
	{"send", "send a message", runSend},
	{"read", "mark a conversation read up to a conv_seq", runRead},
	{"recall", "recall one of this user's messages", runRecall},
	{"edit", "replace the body of one of this user's messages", runEdit},
	{"react", "put a reaction on a message, or take it off", runReact},
	{"group", "create a group, add or remove members, give roles, list members", runGroup},
	{"pull", "print the user's new log entries, then exit", runPull},
	{"tail", "print the user's new log entries until Ctrl-C", runTail},
	{"status", "show a node's readiness and per-shard Raft state (admin HTTP)", runStatus},
	{"cluster", "show every node and shard of the cluster: leaders, replicas, lag (admin HTTP)", runCluster},
	{"node", "add a node to the cluster or remove one, online (admin HTTP)", runNode},
	{"shard", "add a data shard, split one in two, or check that its replicas agree (admin HTTP)", runShard},
	{"slots", "move a range of hash slots to another shard, online (admin HTTP)", runSlots},
	{"move", "move a user's log or a conversation to another shard, online (admin HTTP)", runMove},
	{"cursor", "show a user's log and where each device's cursor stands in it (admin HTTP)", runCursor},
	{"trace", "show where a message went: its entry, fan-out, each member's log and devices (admin HTTP)", runTrace},
	{"dlq", "list, replay or drop dead letters: deliveries a shard refused (admin HTTP)", runDLQ},
	{"backup", "back up the whole cluster, online, into a directory (admin HTTP; restore with syncd restore)", runBackup},
	{"reset-user", "drop a user's log and restart it under a new epoch (admin HTTP)", runResetUser},
	{"split-user", "split a hot user's stream into sub-logs on several shards, online (admin HTTP)", runSplitUser},
	{"revoke-device", "close a device's sessions and refuse its tokens issued so far, on every node (admin HTTP)", runRevokeDevice},
}

// env is what a command writes to. stderr is safe for concurrent use (the SDK logs to it from its
// own goroutines).
type env struct {
	stdout io.Writer
	stderr io.Writer
}

// errorf prints "syncctl <cmd>: ..." on stderr.
func (e *env) errorf(cmd, format string, args ...any) {
	fmt.Fprintf(e.stderr, "syncctl %s: %s\n", cmd, fmt.Sprintf(format, args...))
}

// run executes syncctl with args (without the program name) and returns the exit code. Ctrl-C
// (SIGINT) or SIGTERM cancels the command.
func run(args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: &lockedWriter{w: stderr}}
	if len(args) == 0 {
		usage(e.stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		usage(e.stdout)
		return exitOK
	case "version", "-version", "--version":
		fmt.Fprintln(e.stdout, "syncctl", buildinfo.Get())
		return exitOK
	}
	for _, c := range commands {
		if c.name == name {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return c.run(ctx, e, args[1:])
		}
	}
	fmt.Fprintf(e.stderr, "syncctl: unknown command %q\n\n", name)
	usage(e.stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprint(w, `syncctl talks to a syncd server as a user device, through the Go SDK.

Usage: syncctl <command> [flags]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Quick start (with "go run ./cmd/syncd" running on its defaults):

  export SYNCD_TOKEN=$(syncctl token -user alice -device cli)
  syncctl send -data-dir ./syncd-data -conv d:alice:bob -peer bob -body hi
  syncctl pull -data-dir ./syncd-data -token "$(syncctl token -user bob -device cli)"

The commands marked (admin HTTP) send the node's admin token, read from ./syncd-data/admin.token
where a local syncd creates it, or from -data-dir, -admin-token-file or $SYNCD_ADMIN_TOKEN.

Run "syncctl <command> -h" for the flags of a command and an example, "syncctl -version" for
the build.
`)
}

// newFlagSet returns a flag set for cmd whose -h prints what the command does, its example and
// its flags.
func newFlagSet(e *env, cmd, synopsis, about, example string) *flag.FlagSet {
	fs := flag.NewFlagSet("syncctl "+cmd, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: syncctl %s %s\n\n%s\n\nExample:\n%s\n\nFlags:\n", cmd, synopsis,
			strings.TrimSpace(about), indent(strings.TrimSpace(example)))
		fs.PrintDefaults()
	}
	return fs
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

// parse parses args into fs. It returns ok=false with the exit code when the command should stop:
// 0 after -h (the help was printed), exitUsage after a bad flag or stray arguments.
func parse(e *env, fs *flag.FlagSet, args []string) (code int, ok bool) {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK, false
	case err != nil:
		return exitUsage, false
	case fs.NArg() > 0:
		fmt.Fprintf(e.stderr, "%s: unexpected argument %q (every option is a -flag; see -h)\n", fs.Name(), fs.Arg(0))
		return exitUsage, false
	}
	return exitOK, true
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
