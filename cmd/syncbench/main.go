// Command syncbench is syncd's load generator. It runs the performance scenarios of issue #3
// against an in-process syncd server on a temporary data directory (or against an external one
// with -addr and -data-dir), after the bare-QUIC reference measured in the same run, and prints
// each result with its ratio to that reference.
//
//	go run ./cmd/syncbench                        # every scenario, default sizes
//	go run ./cmd/syncbench -scenario sends -duration 20s
//	go run ./cmd/syncbench -addr 127.0.0.1:7300 -data-dir ./syncd-data -scenario delivery
//
// For the idle scenario against the in-process server the idle clients run in a child process
// (this binary, re-executed), so the heap measured is the server's alone.
//
// -scenario cluster (issue #4) is separate from "all": it builds ./cmd/syncd (or takes -syncd),
// runs a 1-node reference and then a -nodes cluster as child processes, and measures sends and
// delivery on both (-repeat times each; medians and ratios to the reference), catch-up through
// a follower's node against the leader's, and -failovers SIGKILLs of a shard leader under a
// steady sender (time to the next ack, acked messages lost):
//
//	go run ./cmd/syncbench -scenario cluster
//	go run ./cmd/syncbench -scenario cluster -repeat 5 -cpuprofile /tmp/prof
//
// -scenario cluster-catchup is its catch-up part alone: a -nodes cluster, one backlog, -repeat
// replays through the leader's node and through a follower's (issue #11).
//
//	go run ./cmd/syncbench -scenario cluster-catchup -repeat 5
//
// -scenario peers (issue #11) is separate from "all" too: it measures syncd's sends (on the peers'
// spread, -senders to random ones of -users users, then the fixed-peer shape; issue #27), delivery
// and catchup on a 1-node and a -nodes syncd (child processes, as for cluster), then the same shapes
// on raw Pebble and on the systems syncd's users would pick instead, where they are installed —
// etcd with one member and with three, Redis streams with appendfsync always — run by the peer
// load generator bench/peers (a Go module of its own, built here), and reads each peer figure as a
// ratio of syncd's with as many nodes, from the same invocation:
//
//	go run ./cmd/syncbench -scenario peers
//
// -scenario hot (issue #12) is a hot user on a -nodes cluster: -devices senders writing to it
// (-senders in flight), before, during and after an operator moves it to a shard of its own, and
// then the move of an idle -move-entries log (hot.go); with -hot-group, a group of -devices
// members who all write to it, moved the same way:
//
//	go run ./cmd/syncbench -scenario hot -devices 1000 -senders 64
//	go run ./cmd/syncbench -scenario hot -hot-group -devices 1000 -senders 64 -move-entries 0
//	go run ./cmd/syncbench -scenario hot -hot-group -split -devices 1000 -senders 8 -move-entries 0
//	go run ./cmd/syncbench -scenario hot -split-user 4 -devices 1000 -senders 64 -move-entries 0
//
// -scenario groups (issue #24) compares, on one node (a syncd child process per measurement),
// write diffusion (large_group_threshold above the group) with read diffusion (below it) for
// groups of -group-sizes members: the disk bytes and time of building the group, of
// -group-messages messages to it and of single joins; then the push of a large group's messages
// to -live members' devices against a direct conversation's (groups.go):
//
//	go run ./cmd/syncbench -scenario groups -repeat 2 -duration 15s
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/syncd-dev/syncd/bench"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/auth"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "syncbench:", err)
		os.Exit(1)
	}
}

type options struct {
	scenario        string
	duration        time.Duration
	devices         int
	senders         int
	spread          int // sends: to a random one of this many users (the peers' spread), not the next device's
	overloadSenders int
	body            int
	rate            int
	receivers       int
	catchup         int
	idle            int
	addr, dataDir   string
	fingerprint     string // idle-client mode only
	shards          int
	// -scenario cluster only
	nodes, repeat, failovers int
	syncd, cpuprofile        string
	selfprofile              string // -scenario catchup only
	// -scenario peers only
	peers              string
	users, subscribers int
	moveEntries        int  // -scenario hot only
	hotGroup           bool // -scenario hot only
	split              bool // -scenario hot only
	splitUser          int  // -scenario hot only
	groups             groupFlags
}

func run(args []string) error {
	fs := flag.NewFlagSet("syncbench", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.scenario, "scenario", "all", "all, bare, sends, overload, delivery, catchup, idle; or cluster, cluster-catchup, peers, hot, groups (not part of all)")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "duration of each timed scenario")
	fs.IntVar(&o.devices, "devices", 1000, "connected devices in sends and overload")
	fs.IntVar(&o.senders, "senders", 64, "concurrent senders in sends")
	fs.IntVar(&o.spread, "spread", 0, "sends: each message to a random one of this many users (the peers' spread, one conversation per pair), not to the next device's user (0)")
	fs.IntVar(&o.overloadSenders, "overload-senders", 512, "concurrent senders in overload")
	fs.IntVar(&o.body, "body", 256, "message body bytes in sends and overload")
	fs.IntVar(&o.rate, "rate", 1000, "sends per second in delivery")
	fs.IntVar(&o.receivers, "receivers", 200, "live receivers in delivery, each with a sender of its own; the rate is spread over them")
	fs.IntVar(&o.catchup, "catchup", 100000, "backlog entries in catchup")
	fs.IntVar(&o.idle, "idle", 10000, "idle connections in idle")
	fs.StringVar(&o.addr, "addr", "", "client address of an external server (with -data-dir); default: run one in-process")
	fs.StringVar(&o.dataDir, "data-dir", "", "the external server's data directory (token secret, tls.crt/tls.key)")
	fs.IntVar(&o.shards, "shards", syncd.DefaultConfig().Shards, "shards of the in-process server, and of every node of -scenario cluster")
	fs.StringVar(&o.fingerprint, "fingerprint", "", "internal: certificate fingerprint for -scenario idle-client")
	fs.IntVar(&o.nodes, "nodes", 3, "cluster, peers: nodes of the cluster")
	fs.IntVar(&o.repeat, "repeat", 3, "catchup: replays of the backlog; cluster: runs of sends and delivery on each side, and catch-up replays through each node")
	fs.IntVar(&o.failovers, "failovers", 3, "cluster: leader kills")
	fs.StringVar(&o.syncd, "syncd", "", "cluster, peers: syncd binary for the nodes (default: go build ./cmd/syncd into a temp dir)")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "cluster: directory for CPU profiles of every node during the first sends run on each side; hot: before and after the move; groups: of the read-diffusion node during the first group push")
	fs.StringVar(&o.selfprofile, "selfprofile", "", "catchup: file for a CPU profile of this process (the load generator's side) during the replays")
	fs.StringVar(&o.peers, "peers", "pebble,etcd1,etcd3,redis", "peers: the references to measure: pebble (raw Pebble, in-process), etcd<N> (an etcd cluster of N members), redis")
	fs.IntVar(&o.users, "users", 10000, "peers: logs the peers' appends go to at random")
	fs.IntVar(&o.subscribers, "subscribers", 200, "peers: live subscribers in the peers' push shape")
	fs.IntVar(&o.moveEntries, "move-entries", 1000000, "hot: entries of the log moved idle after the hot user's move (0: none)")
	fs.BoolVar(&o.hotGroup, "hot-group", false, "hot: a group of -devices members who all write to it, instead of a user they write to")
	fs.BoolVar(&o.split, "split", false, "hot: split the hot key's shard in two (the key in its upper half) instead of moving the key to a shard of its own")
	fs.IntVar(&o.splitUser, "split-user", 0, "hot: split the hot user's stream into this many sub-logs (2-16) instead of moving it to a shard of its own")
	fs.StringVar(&o.groups.sizes, "group-sizes", "1000,10000,100000", "groups: the group sizes measured (members, the owner included)")
	fs.StringVar(&o.groups.modes, "group-modes", "write,read", "groups: write (write diffusion), read (read diffusion) or both")
	fs.IntVar(&o.groups.messages, "group-messages", 200, "groups: messages sent to each group")
	fs.IntVar(&o.groups.writeEntries, "group-write-entries", 2000000, "groups: under write diffusion, fewer messages to a large group, so that they write at most this many member-log entries (0: no cap)")
	fs.IntVar(&o.groups.window, "group-window", 8, "groups: messages in flight")
	fs.IntVar(&o.groups.joins, "group-joins", 3, "groups: single members added to each group, one at a time")
	fs.IntVar(&o.groups.live, "live", 1000, "groups: members whose devices sync during the push, in the largest group under read diffusion and the smallest under write diffusion (0: no push)")
	fs.IntVar(&o.groups.rate, "group-rate", 20, "groups: messages per second in the push, for -duration")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if o.scenario == "idle-client" {
		return idleClient(ctx, o)
	}
	if o.scenario == "cluster" || o.scenario == "cluster-catchup" {
		return runCluster(ctx, o)
	}
	if o.scenario == "peers" {
		return runPeers(ctx, o)
	}
	if o.scenario == "hot" {
		return runHot(ctx, o)
	}
	if o.scenario == "groups" {
		return runGroups(ctx, o, o.groups)
	}
	want := map[string]bool{}
	for _, s := range []string{"bare", "sends", "overload", "delivery", "catchup", "idle"} {
		want[s] = o.scenario == "all" || o.scenario == s
	}
	if !want["bare"] && !want["sends"] && !want["overload"] && !want["delivery"] && !want["catchup"] && !want["idle"] {
		return fmt.Errorf("unknown -scenario %q", o.scenario)
	}
	fmt.Printf("# syncbench: scenario %s, duration %v, devices %d, senders %d/%d, rate %d/s, catch-up %d, idle %d; %d CPUs, GOMAXPROCS %d\n",
		o.scenario, o.duration, o.devices, o.senders, o.overloadSenders, o.rate, o.catchup, o.idle, runtime.NumCPU(), runtime.GOMAXPROCS(0))

	var rows []row
	var bare bench.BareResult
	if want["bare"] {
		progress("bare QUIC reference: %v request/reply, then %v bulk", o.duration, o.duration/2)
		var err error
		if bare, err = bench.BareQUIC(ctx, o.duration); err != nil {
			return fmt.Errorf("bare: %w", err)
		}
		rows = append(rows,
			row{name: "bare QUIC req/reply", value: fmt.Sprintf("%.0f req/s", bare.ReqPerSec), note: "8 conns, 64 in flight, 300 B → 48 B"},
			row{name: "bare QUIC bulk", value: fmt.Sprintf("%.1f MB/s", bare.BulkMBPerSec), note: fmt.Sprintf("%.0f frames/s of 300 B, one stream", bare.BulkFramesPerSec)})
		progress("bare: %.0f req/s, bulk %.1f MB/s (%.0f frames/s)", bare.ReqPerSec, bare.BulkMBPerSec, bare.BulkFramesPerSec)
	}
	ratio := func(perSec float64) string {
		if bare.ReqPerSec == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*perSec/bare.ReqPerSec)
	}

	if want["sends"] || want["overload"] || want["delivery"] || want["catchup"] || want["idle"] {
		target, inproc, cleanup, err := setupTarget(ctx, o)
		if err != nil {
			return err
		}
		defer cleanup()
		var peak float64
		if want["sends"] {
			var r bench.SendResult
			var err error
			if o.spread > 0 {
				progress("sends: %d senders to a random one of %d users, %d-byte bodies, %v", o.senders, o.spread, o.body, o.duration)
				r, err = bench.SendsSpread(ctx, target, o.senders, o.spread, o.duration, o.body)
			} else {
				progress("sends: %d devices, %d senders, %d-byte bodies, %v", o.devices, o.senders, o.body, o.duration)
				r, err = bench.Sends(ctx, target, o.devices, o.senders, o.duration, o.body)
			}
			if err != nil {
				progress("sends: %v", err)
				rows = append(rows, row{name: "sends", value: "FAILED", note: err.Error()})
			} else {
				peak = r.PerSec
				rows = append(rows, row{name: fmt.Sprintf("sends (%d senders)", o.senders), value: fmt.Sprintf("%.0f acked/s", r.PerSec),
					p50: r.P50, p99: r.P99, ratio: ratio(r.PerSec), note: fmt.Sprintf("acked %d, shed %d, errors %d", r.Acked, r.Shed, r.Errors)})
				progress("sends: %.0f acked/s, p50 %v, p99 %v, shed %d, errors %d", r.PerSec, r.P50, r.P99, r.Shed, r.Errors)
			}
		}
		if want["overload"] {
			progress("overload: %d devices, %d senders, %v", o.devices, o.overloadSenders, o.duration)
			r, err := bench.Sends(ctx, target, o.devices, o.overloadSenders, o.duration, o.body)
			if err != nil {
				progress("overload: %v", err)
				rows = append(rows, row{name: "overload", value: "FAILED", note: err.Error()})
			} else {
				note := fmt.Sprintf("acked %d, shed %d, errors %d", r.Acked, r.Shed, r.Errors)
				if peak > 0 {
					note += fmt.Sprintf("; %.0f%% of the %d-sender peak", 100*r.PerSec/peak, o.senders)
				}
				rows = append(rows, row{name: fmt.Sprintf("overload (%d senders)", o.overloadSenders), value: fmt.Sprintf("%.0f acked/s", r.PerSec),
					p50: r.P50, p99: r.P99, ratio: ratio(r.PerSec), note: note})
				progress("overload: %.0f acked/s, p50 %v, p99 %v, shed %d, errors %d", r.PerSec, r.P50, r.P99, r.Shed, r.Errors)
			}
		}
		if want["delivery"] {
			progress("delivery: %d sends/s for %v to %d live sync streams", o.rate, o.duration, o.receivers)
			r, err := bench.Delivery(ctx, target, o.rate, o.receivers, o.duration)
			if err != nil {
				progress("delivery: %v", err)
				rows = append(rows, row{name: "delivery", value: "FAILED", note: err.Error()})
			} else {
				rows = append(rows, row{name: fmt.Sprintf("delivery (%d/s, %d receivers)", o.rate, o.receivers), value: fmt.Sprintf("%d entries", r.Count),
					p50: r.P50, p99: r.P99, ratio: "-", note: fmt.Sprintf("append→delivery; sends acked %d, failed %d", r.Sent, r.Errors)})
				progress("delivery: %d entries, p50 %v, p99 %v", r.Count, r.P50, r.P99)
			}
		}
		if want["catchup"] {
			rows = append(rows, catchUpRow(ctx, o, target, bare, ratio))
		}
		if want["idle"] {
			progress("idle: opening %d connections, each with a live sync stream", o.idle)
			r, err := idleScenario(ctx, o, target, inproc)
			if err != nil {
				progress("idle: %v", err)
				rows = append(rows, row{name: "idle", value: "FAILED", note: err.Error()})
			} else {
				rows = append(rows, r)
			}
		}
	}

	return printRows(rows, "vs bare req/s")
}

// runCluster is -scenario cluster.
func runCluster(ctx context.Context, o options) error {
	if o.addr != "" {
		return fmt.Errorf("-scenario %s starts its own nodes: -addr does not apply", o.scenario)
	}
	if o.nodes < 3 || o.repeat < 1 || o.failovers < 0 {
		return fmt.Errorf("-scenario %s needs -nodes ≥ 3, -repeat ≥ 1 and -failovers ≥ 0", o.scenario)
	}
	if o.cpuprofile != "" {
		if err := os.MkdirAll(o.cpuprofile, 0o755); err != nil {
			return err
		}
	}
	fmt.Printf("# syncbench: scenario %s, %d nodes, %d shards, duration %v, devices %d, senders %d, rate %d/s, catch-up %d, repeat %d, failovers %d; %d CPUs, GOMAXPROCS %d\n",
		o.scenario, o.nodes, o.shards, o.duration, o.devices, o.senders, o.rate, o.catchup, o.repeat, o.failovers, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		progress("load average before: %s", strings.TrimSpace(string(b)))
	}
	rows, err := clusterScenario(ctx, o)
	if err != nil {
		return err
	}
	return printRows(rows, "vs 1 node")
}

// printRows prints the result table; ratioHead names the ratio column.
func printRows(rows []row, ratioHead string) error {
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "scenario\tresult\tp50\tp99\t%s\tnotes\n", ratioHead)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.name, r.value, dur(r.p50), dur(r.p99), orDash(r.ratio), r.note)
	}
	return tw.Flush()
}

type row struct {
	name, value string
	p50, p99    time.Duration
	ratio, note string
}

func dur(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.Round(10 * time.Microsecond).String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func progress(format string, args ...any) {
	fmt.Printf("# %s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// inProcess is the in-process server, when there is one.
type inProcess struct {
	srv *syncd.Server
	dir string
}

// setupTarget starts the in-process server, or describes the external one.
func setupTarget(ctx context.Context, o options) (bench.Target, *inProcess, func(), error) {
	if o.addr != "" {
		if o.dataDir == "" {
			return bench.Target{}, nil, nil, errors.New("-addr needs -data-dir (for the token secret and the certificate)")
		}
		t, err := externalTarget(o.addr, o.dataDir)
		return t, nil, func() {}, err
	}
	return startInProcess(ctx, o, nil)
}

// startInProcess starts the in-process server (o.shards shards) on a fresh temporary data
// directory, with tweak, if not nil, applied to its configuration, and returns once it is ready.
func startInProcess(ctx context.Context, o options, tweak func(*syncd.Config)) (bench.Target, *inProcess, func(), error) {
	dir, err := os.MkdirTemp("", "syncbench-")
	if err != nil {
		return bench.Target{}, nil, nil, err
	}
	progress("starting an in-process server (%d shards) in %s", o.shards, dir)
	cfg := syncd.Config{
		Dir: dir, ListenAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", Shards: o.shards,
		SendRate: 1e6, SendBurst: 1e6, // the bench measures the server, not the per-device limit
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := syncd.NewServer(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return bench.Target{}, nil, nil, err
	}
	for _, id := range srv.Node().Shards() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, _, err := srv.Node().WaitLeader(wctx, id)
		cancel()
		if err != nil {
			return bench.Target{}, nil, nil, fmt.Errorf("waiting for shard %v's leader: %w", id, err)
		}
	}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(sctx) }()
	// Load only a ready server, as an operator's load test waits for /readyz: until it has the
	// cluster map it does not accept, and QUIC refuses handshakes beyond its accept queue
	// (CONNECTION_REFUSED) — which is what the bench's first dials used to meet.
	for wait := time.Now().Add(20 * time.Second); srv.Ready() != nil; {
		if time.Now().After(wait) {
			cancel()
			<-done
			os.RemoveAll(dir)
			return bench.Target{}, nil, nil, fmt.Errorf("in-process server: %w", srv.Ready())
		}
		time.Sleep(20 * time.Millisecond)
	}
	progress("server on %s (admin/pprof on http://%s, admin token in %s)", srv.Addr(), srv.AdminAddr(),
		filepath.Join(dir, adminapi.TokenFile))
	t := bench.Target{Addr: srv.Addr().String(), Fingerprint: srv.Fingerprint(),
		Token: func(user, device string) (string, error) { return srv.MintToken(user, device, time.Hour) }}
	cleanup := func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "syncbench: server shutdown:", err)
		}
		os.RemoveAll(dir)
	}
	return t, &inProcess{srv: srv, dir: dir}, cleanup, nil
}

// externalTarget mints tokens with the data directory's secret and pins its certificate.
func externalTarget(addr, dataDir string) (bench.Target, error) {
	secret, err := auth.LoadOrCreateSecret(dataDir)
	if err != nil {
		return bench.Target{}, err
	}
	_, fp, err := auth.LoadCert(filepath.Join(dataDir, auth.TLSCertFile), filepath.Join(dataDir, auth.TLSKeyFile))
	if err != nil {
		return bench.Target{}, err
	}
	return bench.Target{Addr: addr, Fingerprint: fp, Token: func(user, device string) (string, error) {
		now := time.Now()
		return auth.MintToken(secret, auth.TokenClaims{User: user, Device: device, Issued: now, Expires: now.Add(time.Hour)})
	}}, nil
}

// idleScenario opens the idle connections and measures the server's memory. In-process, the
// clients run in a child process so that the heap measured is the server's alone.
func idleScenario(ctx context.Context, o options, t bench.Target, inproc *inProcess) (row, error) {
	if inproc == nil { // external server: its memory is measured by whoever runs it
		start := time.Now()
		r, err := bench.Idle(ctx, t, o.idle)
		if err != nil {
			return row{}, err
		}
		el := time.Since(start)
		progress("idle: %d connections open in %v; measure the server's RSS now (holding 5s)", r.Conns, el.Round(time.Millisecond))
		time.Sleep(5 * time.Second)
		r.Close()
		return row{name: fmt.Sprintf("idle (%d conns)", r.Conns), value: "opened", ratio: "-",
			note: fmt.Sprintf("opened in %v; external server: measure its memory yourself", el.Round(time.Millisecond))}, nil
	}
	before := serverMem()
	exe, err := os.Executable()
	if err != nil {
		return row{}, err
	}
	cmd := exec.CommandContext(ctx, exe, "-scenario", "idle-client", "-addr", t.Addr, "-data-dir", inproc.dir,
		"-fingerprint", t.Fingerprint, "-idle", strconv.Itoa(o.idle))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return row{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return row{}, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return row{}, err
	}
	defer func() {
		stdin.Close() // the child closes its connections and exits
		cmd.Wait()
	}()
	sc := bufio.NewScanner(stdout)
	ready := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "READY") {
			ready = true
			break
		}
		if strings.HasPrefix(line, "ERROR") {
			return row{}, errors.New(strings.TrimSpace(strings.TrimPrefix(line, "ERROR")))
		}
	}
	if !ready {
		return row{}, errors.New("the idle client process ended before opening its connections")
	}
	go io.Copy(io.Discard, stdout)
	el := time.Since(start)
	time.Sleep(time.Second) // let the server settle (handshake buffers, first heartbeats)
	after := serverMem()
	per := float64(after.heap-before.heap) / float64(o.idle)
	progress("idle: %d connections open in %v; server heap+stacks %s → %s (%.1f KiB/conn), RSS %s → %s",
		o.idle, el.Round(time.Millisecond), mib(before.heap), mib(after.heap), per/1024, mib(before.rss), mib(after.rss))
	return row{name: fmt.Sprintf("idle (%d conns)", o.idle), value: "heap+stack " + mib(after.heap), ratio: "-",
		note: fmt.Sprintf("before %s (%.1f KiB/conn); process RSS %s → %s; opened in %v; clients in a child process",
			mib(before.heap), per/1024, mib(before.rss), mib(after.rss), el.Round(time.Millisecond))}, nil
}

type mem struct{ heap, rss uint64 }

// serverMem is this process's HeapInuse+StackInuse after a GC, and its VmRSS.
func serverMem() mem {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := mem{heap: ms.HeapInuse + ms.StackInuse}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseUint(f[1], 10, 64)
				m.rss = kb << 10
			}
		}
	}
	return m
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// idleClient is the child process of the idle scenario: it opens the connections, says READY,
// and keeps them open until its stdin closes.
func idleClient(ctx context.Context, o options) error {
	secret, err := auth.LoadOrCreateSecret(o.dataDir)
	if err != nil {
		fmt.Println("ERROR", err)
		return err
	}
	t := bench.Target{Addr: o.addr, Fingerprint: o.fingerprint, Token: func(user, device string) (string, error) {
		now := time.Now()
		return auth.MintToken(secret, auth.TokenClaims{User: user, Device: device, Issued: now, Expires: now.Add(time.Hour)})
	}}
	r, err := bench.Idle(ctx, t, o.idle)
	if err != nil {
		fmt.Println("ERROR", err)
		return err
	}
	defer r.Close()
	fmt.Println("READY", r.Conns)
	io.Copy(io.Discard, os.Stdin)
	return nil
}

// catchUpRow is -scenario catchup: one backlog of o.catchup entries, replayed o.repeat times
// through new sync streams (each from position 0); the row holds the median and every run.
func catchUpRow(ctx context.Context, o options, target bench.Target, bare bench.BareResult, ratio func(float64) string) row {
	progress("catchup: filling a %d-entry backlog", o.catchup)
	b, err := bench.FillBacklog(ctx, target, o.catchup)
	if err != nil {
		progress("catchup: %v", err)
		return row{name: "catch-up", value: "FAILED", note: err.Error()}
	}
	// Named so that a browser can replay the same log beside this replay (client/js/e2e/bench.ts).
	progress("catchup: backlog in the log of user %s, head %d", b.User, b.Head)
	var rates []float64
	var runs []string
	var last bench.CatchUpResult
	if o.selfprofile != "" {
		f, err := os.Create(o.selfprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			return row{name: "catch-up", value: "FAILED", note: err.Error()}
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	for k := range max(o.repeat, 1) {
		progress("catchup: replay %d of %d", k+1, max(o.repeat, 1))
		r, err := bench.Replay(ctx, target, b)
		if err != nil {
			progress("catchup: %v", err)
			return row{name: "catch-up", value: "FAILED", note: err.Error()}
		}
		progress("catchup: %.0f entries/s (%d in %v)", r.PerSec, r.Entries, r.Duration)
		rates, runs, last = append(rates, r.PerSec), append(runs, fmt.Sprintf("%.0f", r.PerSec)), r
	}
	m := median(rates)
	note := fmt.Sprintf("%d entries, batches of %d, median of %d: %s; backlog written at %.0f sends/s",
		last.Entries, last.Batch, len(runs), strings.Join(runs, " "), b.FillPerSec)
	if bare.BulkFramesPerSec > 0 {
		note += fmt.Sprintf("; %.1f%% of bare bulk frames/s", 100*m/bare.BulkFramesPerSec)
	}
	return row{name: "catch-up", value: fmt.Sprintf("%.0f entries/s", m), ratio: ratio(m), note: note}
}
