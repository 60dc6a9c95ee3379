// Command peers is syncbench's peer load generator: it runs the workload shapes of syncbench's
// own scenarios against the floor under them — raw Pebble, in this process — and against the
// systems syncd's users would run instead — etcd (one member, then three) and Redis streams with
// every write fsynced — each started here as child processes on temporary directories and
// stopped again, one system at a time, and writes every result as a
// JSON line (bench/peerresult) on its standard output; progress goes to standard error.
// `syncbench -scenario peers` builds and runs it and prints the results beside syncd's from the
// same invocation. A system whose server binary is not installed is reported as skipped.
//
// It is a Go module of its own (github.com/syncd-dev/syncd/bench/peers) so that the etcd and Redis
// clients, gRPC among them, stay out of syncd's module: `go build` in this directory.
//
// The shapes, identical for every system:
//
//   - appends: -writers closed-loop writers, each appending a -body-byte value to a random log
//     among -users and waiting for the durable ack before its next, for -duration (syncbench's
//     sends);
//   - push: -subscribers live subscribers, one per log, while appends arrive at -rate per second
//     in total, open loop, to random ones among those logs, for -duration; the latency is from
//     the append's issue to the value's arrival at its subscriber (syncbench's delivery);
//   - catchup: one log filled with -catchup entries, then read from its start in pages of -page
//     (syncbench's catchup).
//
// The data model, per system:
//
//   - raw Pebble: a user's log is the key prefix u/<user>/, one key per entry, its position
//     big-endian from a per-log counter here; an append is a one-key batch committed with
//     pebble.Sync (concurrent commits share an fsync, as in syncd). No push; the catch-up is one
//     iterator over the prefix.
//   - etcd: a user's log is the key prefix /u/<user>/, one key per entry, its suffix the entry's
//     position, zero-padded to 20 digits, taken from a per-log counter in this process: an
//     append is one put of a fresh key, etcd's cheapest durable write (a put is acked once a
//     quorum has it in its fsynced WAL and it is applied). A server-side counter (a transaction
//     comparing the log's head key) would cost a read and a retry per conflict on top, so this
//     is the upper bound of what etcd does for the shape; readers follow the log by revision
//     (Watch on the prefix, Range in key order), which etcd keeps gapless and ordered. Subscribers
//     watch from the revision after the log's last, so nothing appended once they start is
//     missed.
//   - Redis: a user's log is the stream u:<user>; an append is XADD (ID *), acked by a server run
//     with appendonly yes and appendfsync always, which writes and fsyncs the AOF before it sends
//     the replies of the commands in it. Subscribers block on XREAD from the last ID they have,
//     one connection each; the catch-up reads with XRANGE, each page from just past the last ID
//     of the one before.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/bench/peerresult"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(2)
	}
}

// shapes are the workload sizes, the same for every system.
type shapes struct {
	duration    time.Duration
	writers     int
	users       int
	body        int
	subscribers int
	rate        int
	catchup     int
	page        int
	conns       int // etcd clients (gRPC connections) the writers and subscribers are spread over
}

func run(args []string) error {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	var sh shapes
	systems := fs.String("systems", "pebble,etcd1,etcd3,redis", "systems to measure, in order: pebble (raw Pebble in this process), etcd<N> (an etcd cluster of N members, 1 to 9), redis")
	etcdBin := fs.String("etcd", "etcd", "etcd server binary (Debian: etcd-server)")
	redisBin := fs.String("redis-server", "redis-server", "Redis server binary (Debian: redis-server)")
	fs.DurationVar(&sh.duration, "duration", 10*time.Second, "duration of appends and of push")
	fs.IntVar(&sh.writers, "writers", 64, "appends: closed-loop writers")
	fs.IntVar(&sh.users, "users", 10000, "appends: logs the writers append to, at random")
	fs.IntVar(&sh.body, "body", 256, "bytes of each appended value")
	fs.IntVar(&sh.subscribers, "subscribers", 200, "push: live subscribers, one log each")
	fs.IntVar(&sh.rate, "rate", 1000, "push: appends per second, in total")
	fs.IntVar(&sh.catchup, "catchup", 100000, "catchup: entries in the backlog")
	fs.IntVar(&sh.page, "page", 1000, "catchup: entries per read")
	fs.IntVar(&sh.conns, "conns", 8, "etcd: client connections the writers and subscribers are spread over")
	check := fs.Bool("check", false, "check the flags and exit (syncbench does, before its own runs)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if sh.writers < 1 || sh.users < 1 || sh.body < 16 || sh.subscribers < 1 || sh.rate < 1 || sh.catchup < 1 || sh.page < 1 || sh.conns < 1 || sh.duration <= 0 {
		return errors.New("every size must be ≥ 1 (-body ≥ 16: a push value carries its send time) and -duration > 0")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var todo []func() error
	for _, name := range strings.Split(*systems, ",") {
		name = strings.TrimSpace(name)
		if n, err := strconv.Atoi(strings.TrimPrefix(name, "etcd")); err == nil && strings.HasPrefix(name, "etcd") && n >= 1 && n <= 9 {
			todo = append(todo, func() error { return measureEtcd(ctx, *etcdBin, n, sh) })
		} else if name == "pebble" {
			todo = append(todo, func() error { return measurePebble(ctx, sh) })
		} else if name == "redis" {
			todo = append(todo, func() error { return measureRedis(ctx, *redisBin, sh) })
		} else {
			return fmt.Errorf("unknown system %q in -systems: pebble, etcd<N> (N members, 1 to 9) or redis", name)
		}
	}
	if *check {
		return nil
	}
	progress("%d CPUs; shapes: %d writers over %d logs, %d-byte values, %v; push %d subscribers at %d/s; catch-up %d in pages of %d",
		runtime.NumCPU(), sh.writers, sh.users, sh.body, sh.duration, sh.subscribers, sh.rate, sh.catchup, sh.page)
	for _, measure := range todo {
		if err := measure(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// results receives the result lines: standard output (tests read them).
var results io.Writer = os.Stdout

// emit writes one result line to results; a failure to write ends the program (nobody is
// reading).
func emit(r peerresult.Result) {
	if err := peerresult.Write(results, r); err != nil {
		fmt.Fprintln(os.Stderr, "peers: writing a result:", err)
		os.Exit(1)
	}
}

// notInstalled reports a system as skipped when its binary is not found, and returns the path
// of the binary when it is.
func notInstalled(sys system, bin, pkg string) (string, bool) {
	path, err := exec.LookPath(bin)
	if err != nil {
		progress("%s: %s not found: skipped (apt-get install %s)", sys.name, bin, pkg)
		emit(peerresult.Result{System: sys.name, Nodes: sys.nodes, Skip: fmt.Sprintf("%s not installed (apt-get install %s)", bin, pkg)})
		return "", true
	}
	return path, false
}

// version returns the first line of `bin args...` that holds marker, from marker on; "" if none.
func version(bin, marker string, args ...string) string {
	out, _ := exec.Command(bin, args...).CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if i := strings.Index(line, marker); i >= 0 {
			return strings.Fields(line[i+len(marker):] + " ")[0]
		}
	}
	return ""
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "# %s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}
