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
	"github.com/syncd-dev/syncd/bench/proccluster"
)

// failoverSteady is how long the failover sender runs before the kill and after the first ack
// that follows it.
const failoverSteady = 2 * time.Second

// clusterScenario is -scenario cluster (issue #4): a 1-node reference and an o.nodes-node cluster,
// both syncd child processes of the same binary, both running for the whole invocation (the idle
// one costs little). It measures, o.repeat times each and alternating reference and cluster,
// sends and delivery; then catch-up through a follower's node against the leader's node, and
// o.failovers leader kills. Rows hold medians and ratios to the same run's reference.
func clusterScenario(ctx context.Context, o options) ([]row, error) {
	dir, err := os.MkdirTemp("", "syncbench-cluster-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := o.syncd
	if bin == "" {
		progress("building ./cmd/syncd into %s", dir)
		if bin, err = proccluster.Build(ctx, dir); err != nil {
			return nil, err
		}
	}
	progress("starting a 1-node reference and a %d-node cluster (%d shards each, syncd child processes); waiting until settled", o.nodes, o.shards)
	ref, err := proccluster.Start(ctx, proccluster.Config{Syncd: bin, Dir: filepath.Join(dir, "ref"), Nodes: 1, Shards: o.shards})
	if err != nil {
		return nil, fmt.Errorf("reference node: %w", err)
	}
	defer closeCluster("reference", ref)
	cl, err := proccluster.Start(ctx, proccluster.Config{Syncd: bin, Dir: filepath.Join(dir, "cluster"), Nodes: o.nodes, Shards: o.shards})
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	defer closeCluster("cluster", cl)
	progress("settled; cluster clients on %s", strings.Join(cl.Target().Addrs, ", "))

	var rows []row
	rows = append(rows, clusterSends(ctx, o, ref, cl)...)
	rows = append(rows, clusterDelivery(ctx, o, ref, cl)...)
	rows = append(rows, clusterCatchUp(ctx, o, cl)...)
	rows = append(rows, clusterFailovers(ctx, o, cl)...)
	return rows, nil
}

func closeCluster(name string, c *proccluster.Cluster) {
	if err := c.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "syncbench: stopping the %s: %v\n", name, err)
	}
}

// cpuUse is the CPU used during a run, in cores (CPU seconds per second): by the nodes measured
// (server), by the other side's idle nodes (idle), by this process (self, the load generator)
// and by everything else on the machine (other: whatever else runs there). serverPerAck is the
// measured nodes' CPU per acked send. The run includes connecting its devices (TLS handshakes),
// not only the timed window.
type cpuUse struct {
	server, idle, self, other float64
	serverPerAck              time.Duration
}

func (u cpuUse) String() string {
	return fmt.Sprintf("CPU cores: nodes %.2f (%v per ack), idle side %.2f, syncbench %.2f, other %.2f",
		u.server, u.serverPerAck, u.idle, u.self, u.other)
}

// sendsRun is one sends run and the CPU it used.
type sendsRun struct {
	res bench.SendResult
	cpuUse
}

// clusterSends runs the sends scenario o.repeat times on the reference and on the cluster,
// alternately; with -cpuprofile, the first run of each is profiled.
func clusterSends(ctx context.Context, o options, ref, cl *proccluster.Cluster) []row {
	var refRuns, clRuns []sendsRun
	var ratios []string
	for k := range o.repeat {
		for _, side := range []struct {
			name string
			c    *proccluster.Cluster
			runs *[]sendsRun
		}{{"1 node", ref, &refRuns}, {fmt.Sprintf("%d nodes", cl.Size()), cl, &clRuns}} {
			progress("sends on %s (run %d of %d): %d devices, %d senders, %v", side.name, k+1, o.repeat, o.devices, o.senders, o.duration)
			prof := startProfile(ctx, o, k, side.c, strings.ReplaceAll(side.name, " ", "")+"-")
			before := takeCPU(side.c, ref, cl)
			r, err := bench.Sends(ctx, side.c.Target(), o.devices, o.senders, o.duration, o.body)
			run := sendsRun{res: r, cpuUse: before.since(takeCPU(side.c, ref, cl), r.Acked)}
			prof()
			if err != nil {
				progress("sends on %s: %v", side.name, err)
				continue
			}
			progress("sends on %s: %.0f acked/s, p50 %v, p99 %v, shed %d, errors %d; %v",
				side.name, r.PerSec, r.P50, r.P99, r.Shed, r.Errors, run.cpuUse)
			*side.runs = append(*side.runs, run)
		}
		if len(refRuns) == k+1 && len(clRuns) == k+1 {
			ratios = append(ratios, pct(clRuns[k].res.PerSec/refRuns[k].res.PerSec))
		}
	}
	if len(refRuns) == 0 || len(clRuns) == 0 {
		return []row{{name: "sends", value: "FAILED", note: "see the progress lines above"}}
	}
	rm, cm := medianSends(refRuns), medianSends(clRuns)
	cpuNote := func(m sendsRun) string {
		return fmt.Sprintf("server CPU %v per ack (%.2f cores), syncbench %.2f cores, other load %.2f cores", m.serverPerAck, m.server, m.self, m.other)
	}
	return []row{
		{name: fmt.Sprintf("sends, 1 node (%d senders)", o.senders), value: fmt.Sprintf("%.0f acked/s", rm.res.PerSec), p50: rm.res.P50, p99: rm.res.P99,
			ratio: "100%", note: fmt.Sprintf("median of %d: %s acked/s; %s", len(refRuns), perSecList(refRuns), cpuNote(rm))},
		{name: fmt.Sprintf("sends, %d nodes (%d senders)", cl.Size(), o.senders), value: fmt.Sprintf("%.0f acked/s", cm.res.PerSec), p50: cm.res.P50, p99: cm.res.P99,
			ratio: pct(cm.res.PerSec / rm.res.PerSec), note: fmt.Sprintf("median of %d: %s acked/s; per-run ratios %s; devices spread over the nodes; %s",
				len(clRuns), perSecList(clRuns), strings.Join(ratios, " "), cpuNote(cm))},
	}
}

// cpuSample is the CPU used so far by the nodes measured, by both clusters, by this process and
// by the whole machine.
type cpuSample struct {
	at                         time.Time
	measured, nodes, self, all time.Duration
}

func takeCPU(measured *proccluster.Cluster, all ...*proccluster.Cluster) cpuSample {
	s := cpuSample{at: time.Now(), measured: measured.CPUTime(), self: proccluster.ProcessCPU(os.Getpid()), all: machineBusy()}
	for _, c := range all {
		s.nodes += c.CPUTime()
	}
	return s
}

// since returns the CPU used from s (before) to e (after), acked sends having been acked.
func (s cpuSample) since(e cpuSample, acked int) cpuUse {
	wall := e.at.Sub(s.at).Seconds()
	u := cpuUse{server: (e.measured - s.measured).Seconds() / wall, self: (e.self - s.self).Seconds() / wall,
		idle:  max(0, ((e.nodes-s.nodes)-(e.measured-s.measured)).Seconds()/wall),
		other: max(0, ((e.all-s.all)-(e.nodes-s.nodes)-(e.self-s.self)).Seconds()/wall)}
	if acked > 0 {
		u.serverPerAck = ((e.measured - s.measured) / time.Duration(acked)).Round(time.Microsecond)
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
func startProfile(ctx context.Context, o options, run int, c *proccluster.Cluster, prefix string) func() {
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

// clusterDelivery runs the delivery scenario o.repeat times on the reference and on the cluster,
// alternately. On the cluster the sender and the receiver are on different nodes.
func clusterDelivery(ctx context.Context, o options, ref, cl *proccluster.Cluster) []row {
	var refRuns, clRuns []bench.DeliveryResult
	var refOther, clOther []float64
	for k := range o.repeat {
		for _, side := range []struct {
			name  string
			c     *proccluster.Cluster
			runs  *[]bench.DeliveryResult
			other *[]float64
		}{{"1 node", ref, &refRuns, &refOther}, {fmt.Sprintf("%d nodes", cl.Size()), cl, &clRuns, &clOther}} {
			progress("delivery on %s (run %d of %d): %d sends/s for %v", side.name, k+1, o.repeat, o.rate, o.duration)
			before := takeCPU(side.c, ref, cl)
			r, err := bench.Delivery(ctx, side.c.Target(), o.rate, o.duration)
			use := before.since(takeCPU(side.c, ref, cl), r.Sent)
			if err != nil {
				progress("delivery on %s: %v", side.name, err)
				continue
			}
			progress("delivery on %s: %d entries, p50 %v, p99 %v; %v", side.name, r.Count, r.P50, r.P99, use)
			*side.runs = append(*side.runs, r)
			*side.other = append(*side.other, use.other)
		}
	}
	if len(refRuns) == 0 || len(clRuns) == 0 {
		return []row{{name: "delivery", value: "FAILED", note: "see the progress lines above"}}
	}
	list := func(rs []bench.DeliveryResult) string {
		var s []string
		for _, r := range rs {
			s = append(s, dur(r.P99))
		}
		return strings.Join(s, " ")
	}
	med := func(rs []bench.DeliveryResult) (p50, p99 time.Duration) {
		var a, b []time.Duration
		for _, r := range rs {
			a, b = append(a, r.P50), append(b, r.P99)
		}
		return median(a), median(b)
	}
	r50, r99 := med(refRuns)
	c50, c99 := med(clRuns)
	return []row{
		{name: fmt.Sprintf("delivery, 1 node (%d/s)", o.rate), value: fmt.Sprintf("%d entries", refRuns[0].Count), p50: r50, p99: r99,
			ratio: "-", note: fmt.Sprintf("append→delivery; p99 of each run %s; other load %.2f cores", list(refRuns), median(refOther))},
		{name: fmt.Sprintf("delivery, %d nodes (%d/s)", cl.Size(), o.rate), value: fmt.Sprintf("%d entries", clRuns[0].Count), p50: c50, p99: c99,
			ratio: fmt.Sprintf("p99 ×%.2f", c99.Seconds()/r99.Seconds()),
			note:  fmt.Sprintf("sender and receiver on different nodes; p99 of each run %s; other load %.2f cores", list(clRuns), median(clOther))},
	}
}

// clusterCatchUp replays one backlog o.repeat times through the leader's node and through a
// follower's node.
func clusterCatchUp(ctx context.Context, o options, cl *proccluster.Cluster) []row {
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
func clusterFailovers(ctx context.Context, o options, cl *proccluster.Cluster) []row {
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
