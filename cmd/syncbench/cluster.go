package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/bench"
	"github.com/syncd-dev/syncd/bench/procstat"
	"github.com/syncd-dev/syncd/test/proccluster"
)

// failoverSteady is how long the failover sender runs before the kill and after the first ack
// that follows it.
const failoverSteady = 2 * time.Second

// clusterScenario is -scenario cluster (issue #4): a 1-node reference, then an o.nodes-node
// cluster, both syncd child processes of the same binary. Each side runs alone on the machine
// (the reference is stopped before the cluster starts: an idle 3-node cluster alone costs about
// a quarter of a core here, which would tax the reference). Each side runs sends and delivery
// o.repeat times; then the cluster runs catch-up through a follower's node against the leader's
// node, and o.failovers leader kills. Rows hold medians and ratios to the same invocation's
// reference.
func clusterScenario(ctx context.Context, o options) ([]row, error) {
	dir, err := os.MkdirTemp("", "syncbench-cluster-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin, err := syncdBinary(ctx, o, dir)
	if err != nil {
		return nil, err
	}
	if o.scenario == "cluster-catchup" { // the catch-up part alone: no reference, no failovers
		progress("starting the %d-node cluster (%d shards, syncd child processes); waiting until settled", o.nodes, o.shards)
		cl, err := startProcCluster(ctx, bin, filepath.Join(dir, "cluster"), o.nodes, o.shards)
		if err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		defer closeCluster("cluster", cl)
		return clusterCatchUp(ctx, o, cl), nil
	}
	progress("starting the 1-node reference (%d shards, a syncd child process)", o.shards)
	ref, err := startProcCluster(ctx, bin, filepath.Join(dir, "ref"), 1, o.shards)
	if err != nil {
		return nil, fmt.Errorf("reference node: %w", err)
	}
	refSends := measureSends(ctx, o, "1 node", ref, 0)
	refDelivery := measureDelivery(ctx, o, "1 node", ref)
	closeCluster("reference", ref)

	progress("starting the %d-node cluster (%d shards, syncd child processes); waiting until settled", o.nodes, o.shards)
	cl, err := startProcCluster(ctx, bin, filepath.Join(dir, "cluster"), o.nodes, o.shards)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	defer closeCluster("cluster", cl)
	progress("settled; cluster clients on %s", strings.Join(cl.Target().Addrs, ", "))
	name := fmt.Sprintf("%d nodes", cl.Size())
	clSends := measureSends(ctx, o, name, cl, 0)
	clDelivery := measureDelivery(ctx, o, name, cl)

	var rows []row
	rows = append(rows, sendsRows(o, cl.Size(), refSends, clSends)...)
	rows = append(rows, deliveryRows(o, cl.Size(), refDelivery, clDelivery)...)
	rows = append(rows, clusterCatchUp(ctx, o, cl)...)
	rows = append(rows, clusterFailovers(ctx, o, cl)...)
	return rows, nil
}

// syncdBinary returns the syncd binary the nodes run: -syncd, or ./cmd/syncd built into dir.
// processScenario prepares a scenario of syncd child processes: a temporary directory (the
// caller removes it), the syncd binary (-syncd, or built there) and the -cpuprofile directory.
func processScenario(ctx context.Context, o options, name string) (dir, bin string, err error) {
	if dir, err = os.MkdirTemp("", "syncbench-"+name+"-"); err != nil {
		return "", "", err
	}
	if bin, err = syncdBinary(ctx, o, dir); err == nil && o.cpuprofile != "" {
		err = os.MkdirAll(o.cpuprofile, 0o755)
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", "", err
	}
	return dir, bin, nil
}

func syncdBinary(ctx context.Context, o options, dir string) (string, error) {
	if o.syncd != "" {
		return o.syncd, nil
	}
	progress("building ./cmd/syncd into %s", dir)
	bins, err := proccluster.Build(ctx, proccluster.BuildConfig{Dir: dir})
	if err != nil {
		return "", fmt.Errorf("%w (run inside the syncd repository, or give a binary with -syncd)", err)
	}
	return bins.Syncd, nil
}

func closeCluster(name string, c *procCluster) {
	if err := c.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "syncbench: stopping the %s: %v\n", name, err)
	}
}

// cpuUse is the CPU used during a run, in cores (CPU seconds per second): by the nodes (server),
// by this process (self, the load generator) and by everything else on the machine (other:
// whatever else runs there, a sign of a noisy run). serverPerAck is the nodes' CPU per acked
// send; entriesPerAck the Raft entries the cluster's shards committed per acked send (each
// replicated and fsynced on every member); diskPerAck the bytes the nodes wrote to disk per
// acked send (/proc/<pid>/io write_bytes: WAL, memtable flushes, compactions, Raft snapshots).
// The run includes connecting its devices (TLS handshakes), not only the timed window.
type cpuUse struct {
	server, self, other float64
	serverPerAck        time.Duration
	entriesPerAck       float64
	diskPerAck          int64
}

func (u cpuUse) String() string {
	return fmt.Sprintf("CPU cores: nodes %.2f (%v per ack), syncbench %.2f, other %.2f; %.2f Raft entries and %d disk bytes per ack",
		u.server, u.serverPerAck, u.self, u.other, u.entriesPerAck, u.diskPerAck)
}

// sendsRun is one sends run and the CPU it used.
type sendsRun struct {
	res bench.SendResult
	cpuUse
}

// measureSends runs the sends scenario o.repeat times on c: the fixed-peer shape (spread 0,
// bench.Sends) or the peers' spread over spread recipients (bench.SendsSpread); with
// -cpuprofile, the first run is profiled.
func measureSends(ctx context.Context, o options, name string, c *procCluster, spread int) []sendsRun {
	var runs []sendsRun
	for k := range o.repeat {
		shape := fmt.Sprintf("fixed peer, %d devices", o.devices)
		if spread > 0 {
			shape = fmt.Sprintf("peers' spread, to a random one of %d users", spread)
		}
		progress("sends on %s (run %d of %d): %s, %d senders, %v", name, k+1, o.repeat, shape, o.senders, o.duration)
		prof := startProfile(ctx, o, k, c, strings.ReplaceAll(name, " ", "")+"-")
		before := takeCPU(ctx, c)
		var r bench.SendResult
		var err error
		if spread > 0 {
			r, err = bench.SendsSpread(ctx, c.Target(), o.senders, spread, o.duration, o.body)
		} else {
			r, err = bench.Sends(ctx, c.Target(), o.devices, o.senders, o.duration, o.body)
		}
		run := sendsRun{res: r, cpuUse: before.since(takeCPU(ctx, c), r.Acked)}
		prof()
		if err != nil {
			progress("sends on %s: %v", name, err)
			continue
		}
		progress("sends on %s: %.0f acked/s, p50 %v, p99 %v, shed %d, errors %d; %v", name, r.PerSec, r.P50, r.P99, r.Shed, r.Errors, run.cpuUse)
		runs = append(runs, run)
	}
	return runs
}

// sendsRows compares the sends runs of the reference and of the cluster.
func sendsRows(o options, nodes int, ref, cl []sendsRun) []row {
	if len(ref) == 0 || len(cl) == 0 {
		return []row{{name: "sends", value: "FAILED", note: "see the progress lines above"}}
	}
	rm, cm := medianSends(ref), medianSends(cl)
	cpuNote := func(m sendsRun) string {
		return fmt.Sprintf("server CPU %v per ack (%.2f cores), syncbench %.2f cores, other load %.2f cores", m.serverPerAck, m.server, m.self, m.other)
	}
	return []row{
		{name: fmt.Sprintf("sends, 1 node (%d senders)", o.senders), value: fmt.Sprintf("%.0f acked/s", rm.res.PerSec), p50: rm.res.P50, p99: rm.res.P99,
			ratio: "100%", note: fmt.Sprintf("median of %d: %s acked/s; %s", len(ref), perSecList(ref), cpuNote(rm))},
		{name: fmt.Sprintf("sends, %d nodes (%d senders)", nodes, o.senders), value: fmt.Sprintf("%.0f acked/s", cm.res.PerSec), p50: cm.res.P50, p99: cm.res.P99,
			ratio: pct(cm.res.PerSec / rm.res.PerSec), note: fmt.Sprintf("median of %d: %s acked/s; devices spread over the nodes; %s",
				len(cl), perSecList(cl), cpuNote(cm))},
	}
}

// cpuSample is the CPU used so far by c's nodes, by this process and by the whole machine, and
// the nodes' disk writes and Raft entries so far.
type cpuSample struct {
	at               time.Time
	nodes, self, all time.Duration
	written          int64
	entries          uint64
}

func takeCPU(ctx context.Context, c *procCluster) cpuSample {
	return cpuSample{at: time.Now(), nodes: c.CPUTime(), self: procstat.CPU(os.Getpid()), all: machineBusy(),
		written: c.WriteBytes(), entries: c.RaftEntries(ctx)}
}

// since returns the CPU used from s (before) to e (after), acked sends having been acked.
func (s cpuSample) since(e cpuSample, acked int) cpuUse {
	wall := e.at.Sub(s.at).Seconds()
	u := cpuUse{server: (e.nodes - s.nodes).Seconds() / wall, self: (e.self - s.self).Seconds() / wall,
		other: max(0, ((e.all-s.all)-(e.nodes-s.nodes)-(e.self-s.self)).Seconds()/wall)}
	if acked > 0 {
		u.serverPerAck = ((e.nodes - s.nodes) / time.Duration(acked)).Round(time.Microsecond)
		u.entriesPerAck = float64(e.entries-s.entries) / float64(acked)
		u.diskPerAck = (e.written - s.written) / int64(acked)
	}
	return u
}

// machineBusy returns the CPU time every CPU of the machine has spent busy (not idle or waiting
// for I/O), from /proc/stat; zero where it cannot be read.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:9] { // user nice system idle iowait irq softirq steal
		if i == 3 || i == 4 {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return time.Duration(busy) * 10 * time.Millisecond
}

// startProfile starts CPU profiles of c's nodes for o.duration when -cpuprofile is set and this
// is the first run; the returned function waits for them.
func startProfile(ctx context.Context, o options, run int, c *procCluster, prefix string) func() {
	if o.cpuprofile == "" || run != 0 {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		files, err := c.Profile(ctx, o.duration, o.cpuprofile, prefix)
		if err != nil {
			progress("cpu profile: %v", err)
		}
		if len(files) > 0 {
			progress("cpu profiles: %s", strings.Join(files, " "))
		}
	}()
	return func() { <-done }
}

// deliveryRun is one delivery run and the load on the rest of the machine meanwhile.
type deliveryRun struct {
	res   bench.DeliveryResult
	other float64
}

// measureDelivery runs the delivery scenario o.repeat times on c. On a cluster the sender and
// the receiver are on different nodes.
func measureDelivery(ctx context.Context, o options, name string, c *procCluster) []deliveryRun {
	var runs []deliveryRun
	for k := range o.repeat {
		progress("delivery on %s (run %d of %d): %d sends/s for %v to %d receivers", name, k+1, o.repeat, o.rate, o.duration, o.receivers)
		before := takeCPU(ctx, c)
		r, err := bench.Delivery(ctx, c.Target(), o.rate, o.receivers, o.duration)
		use := before.since(takeCPU(ctx, c), r.Sent)
		if err != nil {
			progress("delivery on %s: %v", name, err)
			continue
		}
		progress("delivery on %s: %d entries, p50 %v, p99 %v; %v", name, r.Count, r.P50, r.P99, use)
		runs = append(runs, deliveryRun{res: r, other: use.other})
	}
	return runs
}

// deliveryRows compares the delivery runs of the reference and of the cluster.
func deliveryRows(o options, nodes int, ref, cl []deliveryRun) []row {
	if len(ref) == 0 || len(cl) == 0 {
		return []row{{name: "delivery", value: "FAILED", note: "see the progress lines above"}}
	}
	list := func(rs []deliveryRun) string {
		var s []string
		for _, r := range rs {
			s = append(s, dur(r.res.P99))
		}
		return strings.Join(s, " ")
	}
	med := func(rs []deliveryRun) (p50, p99 time.Duration, other float64) {
		var a, b []time.Duration
		var c []float64
		for _, r := range rs {
			a, b, c = append(a, r.res.P50), append(b, r.res.P99), append(c, r.other)
		}
		return median(a), median(b), median(c)
	}
	r50, r99, ro := med(ref)
	c50, c99, co := med(cl)
	return []row{
		{name: fmt.Sprintf("delivery, 1 node (%d/s)", o.rate), value: fmt.Sprintf("%d entries", ref[0].res.Count), p50: r50, p99: r99,
			ratio: "-", note: fmt.Sprintf("append→delivery; p99 of each run %s; other load %.2f cores", list(ref), ro)},
		{name: fmt.Sprintf("delivery, %d nodes (%d/s)", nodes, o.rate), value: fmt.Sprintf("%d entries", cl[0].res.Count), p50: c50, p99: c99,
			ratio: fmt.Sprintf("p99 ×%.2f", c99.Seconds()/r99.Seconds()),
			note:  fmt.Sprintf("sender and receiver on different nodes; p99 of each run %s; other load %.2f cores", list(cl), co)},
	}
}

// clusterCatchUp replays one backlog o.repeat times through the leader's node and through a
// follower's node.
func clusterCatchUp(ctx context.Context, o options, cl *procCluster) []row {
	progress("catch-up: filling a %d-entry backlog from devices on every node, then %d replays through the leader's node and %d through a follower's",
		o.catchup, o.repeat, o.repeat)
	r, err := bench.CatchUpReplicas(ctx, cl, o.catchup, o.repeat)
	if err != nil {
		progress("catch-up: %v", err)
		return []row{{name: "catch-up", value: "FAILED", note: err.Error()}}
	}
	list := func(rs []bench.CatchUpResult) (float64, string) {
		var v []float64
		var s []string
		for _, x := range rs {
			v = append(v, x.PerSec)
			s = append(s, fmt.Sprintf("%.0f", x.PerSec))
		}
		return median(v), strings.Join(s, " ")
	}
	lm, ls := list(r.Leader)
	fm, fs := list(r.Follower)
	progress("catch-up: leader %s, follower %s entries/s", ls, fs)
	return []row{
		{name: "catch-up via the leader's node", value: fmt.Sprintf("%.0f entries/s", lm), ratio: "100%",
			note: fmt.Sprintf("%d entries, batches of %d; runs %s; backlog written at %.0f sends/s", r.Backlog.Head, r.Leader[0].Batch, ls, r.Backlog.FillPerSec)},
		{name: "catch-up via a follower's node", value: fmt.Sprintf("%.0f entries/s", fm), ratio: pct(fm/lm) + " of leader",
			note: "runs " + fs},
	}
}

// clusterFailovers runs o.failovers leader kills, one after the other (each restarts its node
// and waits for the cluster to settle).
func clusterFailovers(ctx context.Context, o options, cl *procCluster) []row {
	var rows []row
	var times []time.Duration
	lost, acked := 0, 0
	for k := range o.failovers {
		progress("failover %d of %d: steady sender, SIGKILL the leader of its conversation's shard", k+1, o.failovers)
		r, err := bench.Failover(ctx, cl, failoverSteady)
		if err != nil {
			progress("failover %d: %v", k+1, err)
			rows = append(rows, row{name: fmt.Sprintf("failover %d", k+1), value: "FAILED", note: err.Error()})
			continue
		}
		progress("failover %d: %v (killed n%d, sender on n%d, acked %d, resent %d, lost %d, duplicates %d, longest gap %v, restart+settle %v; first failure: %s)",
			k+1, r.Failover, r.Killed+1, r.SenderNode+1, r.Acked, r.Resent, r.Lost, r.Duplicates, r.LongestGap, r.Restart.Round(time.Millisecond), r.FirstError)
		times = append(times, r.Failover)
		lost += r.Lost
		acked += r.Acked
		rows = append(rows, row{name: fmt.Sprintf("failover %d", k+1), value: dur(r.Failover), ratio: "-",
			note: fmt.Sprintf("killed n%d, sender on n%d; acked %d, lost %d, duplicates %d; resent %d; longest ack gap %v; first failure %q",
				r.Killed+1, r.SenderNode+1, r.Acked, r.Lost, r.Duplicates, r.Resent, dur(r.LongestGap), r.FirstError)})
	}
	if len(times) > 0 {
		rows = append(rows, row{name: "failover, median", value: dur(median(times)), ratio: "-",
			note: fmt.Sprintf("of %d; acked %d in all, lost %d", len(times), acked, lost)})
	}
	return rows
}

// medianSends returns the median of each field of runs separately.
func medianSends(runs []sendsRun) sendsRun {
	var per, server, self, other []float64
	var p50, p99, perAck []time.Duration
	for _, r := range runs {
		per, p50, p99 = append(per, r.res.PerSec), append(p50, r.res.P50), append(p99, r.res.P99)
		server, self, other, perAck = append(server, r.server), append(self, r.self), append(other, r.other), append(perAck, r.serverPerAck)
	}
	return sendsRun{res: bench.SendResult{PerSec: median(per), P50: median(p50), P99: median(p99)},
		cpuUse: cpuUse{server: median(server), self: median(self), other: median(other), serverPerAck: median(perAck)}}
}

func perSecList(runs []sendsRun) string {
	var s []string
	for _, r := range runs {
		s = append(s, fmt.Sprintf("%.0f", r.res.PerSec))
	}
	return strings.Join(s, " ")
}

// median returns the median of v (the mean of the middle two for an even count).
func median[T time.Duration | float64](v []T) T {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func pct(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }
