package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/bench"
	"github.com/syncd-dev/syncd/bench/procstat"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/syncd"
)

// -scenario groups (issue #24): large groups served by read diffusion against write diffusion,
// on one node, in the same run. Each measurement gets a fresh syncd node (a child process, so
// that its disk writes are its own: write_bytes of /proc/<pid>/io, as bench/sends-cost.sh
// reads them), with large_group_threshold above every group size (write diffusion: an entry in
// every member's log per message) or below the smallest (read diffusion: the group is large from
// its creation, its members' devices follow its conversation log as a source). On each, for each
// -group-sizes size: the group is built (a CreateGroup and AddMembers of proto.MaxMembers members
// each), -group-messages messages are sent to it (-group-window in flight), and -group-joins
// single members are added, one at a time; each step's time to its acks, to the end of its
// fan-out (every shard's outbox delivered: syncd_fanout_lag_entries 0) and the disk bytes it
// cost (counted until the node's writes have stopped, so its flushes and compactions are in).
// Then, on the read-diffusion node of the largest group, the push: -live members' devices sync
// while the group's owner sends -group-rate messages a second for -duration, against a direct
// conversation's push measured the same way on the same node; and the same on the
// write-diffusion node of the smallest group, for reference.

// groupFlags are -scenario groups' own options.
type groupFlags struct {
	sizes        string // -group-sizes
	modes        string // -group-modes
	messages     int    // -group-messages
	writeEntries int    // -group-write-entries
	window       int    // -group-window
	joins        int    // -group-joins
	live         int    // -live
	rate         int    // -group-rate
	// quiet is how long a node's disk writes must stand still before a step's bytes are read
	// (quietFor; 0 in the scenario's test: the bytes are then only what was written by then).
	quiet time.Duration
}

// readThreshold is the read-diffusion node's large_group_threshold: below every group measured.
const readThreshold = 100

// groupMode is one side of the comparison.
type groupMode struct {
	name      string // "write" or "read"
	threshold int    // the node's large_group_threshold
}

// groupNode is a node the groups scenario measures: its target, its disk writes so far and its
// fan-out lag (outbox records not yet delivered everywhere, over its shards).
type groupNode interface {
	target() bench.Target
	written() int64
	lag(ctx context.Context) (uint64, error)
	profile(ctx context.Context, d time.Duration, dir, prefix string) ([]string, error)
	cpu() time.Duration // the node's CPU time so far (0 in process: syncbench's own counts it)
	close()
}

// procGroupNode is a groupNode in a child process.
type procGroupNode struct{ c *procCluster }

func (n procGroupNode) target() bench.Target { return n.c.NodeTarget(0) }
func (n procGroupNode) written() int64       { return procstat.WriteBytes(n.c.pc.Node(0).PID()) }
func (n procGroupNode) lag(ctx context.Context) (uint64, error) {
	stats, err := n.c.pc.Node(0).Metrics(ctx)
	var lag uint64
	for _, st := range stats {
		lag += st.Lag
	}
	return lag, err
}
func (n procGroupNode) profile(ctx context.Context, d time.Duration, dir, prefix string) ([]string, error) {
	return n.c.Profile(ctx, d, dir, prefix)
}
func (n procGroupNode) cpu() time.Duration { return n.c.CPUTime() }
func (n procGroupNode) close()             { closeCluster("node", n.c) }

// inProcGroupNode is a groupNode in this process (the scenario's test): its disk writes are this
// process's.
type inProcGroupNode struct {
	t       bench.Target
	srv     *syncd.Server
	cleanup func()
}

func (n inProcGroupNode) target() bench.Target { return n.t }
func (n inProcGroupNode) written() int64       { return procstat.WriteBytes(os.Getpid()) }
func (n inProcGroupNode) lag(context.Context) (uint64, error) {
	var lag uint64
	for _, id := range n.srv.Node().Shards() {
		st, err := n.srv.Node().State(id)
		if err != nil {
			return 0, err
		}
		info, err := st.Outbox()
		if err != nil {
			return 0, err
		}
		if info.Head >= info.First {
			lag += info.Head - info.First + 1
		}
	}
	return lag, nil
}
func (n inProcGroupNode) profile(context.Context, time.Duration, string, string) ([]string, error) {
	return nil, nil
}
func (n inProcGroupNode) cpu() time.Duration { return 0 }
func (n inProcGroupNode) close()             { n.cleanup() }

// groupNodeArgs are the flags of a node of mode m: the group limits raised for the benchmark.
func groupNodeArgs(m groupMode, maxSize int) []string {
	return []string{"-large-group-threshold", strconv.Itoa(m.threshold), "-max-group-size", strconv.Itoa(maxGroupSize(maxSize)),
		"-members-per-minute", "100000000", "-max-groups-per-user", "100000", "-query-rate", "100000", "-query-burst", "100000"}
}

// maxGroupSize is the nodes' max_group_size: room for the joins and the write node's threshold.
func maxGroupSize(maxSize int) int { return 10 * maxSize }

// parseSizes reads -group-sizes.
func parseSizes(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(strings.ReplaceAll(f, "_", "")))
		if err != nil || n < 2 {
			return nil, fmt.Errorf("-group-sizes: %q is not a group size (2 or more members)", f)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// groupRun is what one node of one mode measured for one group size.
type groupRun struct {
	mode string
	size int

	build         bench.GroupBuildResult
	buildDone     time.Duration // to the end of the build's fan-out
	buildBytes    int64
	messages      int // sent: fewer than -group-messages under write diffusion of a large size
	sends         bench.GroupSendResult
	sendsDone     time.Duration // from the first send to the end of the fan-out
	sendsBytes    int64
	joinAck       []time.Duration
	joinDone      []time.Duration
	joinBytes     []int64
	notQuiet      int // settles whose disk writes had not stopped within quietMax
	direct, group *bench.GroupPushResult
	directCPU     cpuUse // over the timed sends of each push: the node's, syncbench's, the rest of the machine's
	groupCPU      cpuUse
}

// quietFor and quietMax: a step's disk bytes are read once the node's write_bytes has not
// moved for quietFor (its flushes and compactions done), or after quietMax.
const (
	quietFor = time.Second
	quietMax = 2 * time.Minute
)

// settle waits until n's fan-out has delivered everything and returns the time from since to
// when it saw that; then it waits for n's disk writes to stand still for still (quiet reports
// whether they did within quietMax) and returns its write_bytes then.
func settle(ctx context.Context, n groupNode, since time.Time, still time.Duration) (delivered time.Duration, written int64, quiet bool, err error) {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		lag, err := n.lag(ctx)
		if err == nil && lag == 0 {
			delivered = time.Since(since)
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, false, fmt.Errorf("the fan-out still had %d records to deliver after 10 minutes (%v)", lag, err)
		}
		if ctx.Err() != nil {
			return 0, 0, false, ctx.Err()
		}
		sleepFor(ctx, 20*time.Millisecond)
	}
	last, stable := n.written(), time.Now()
	if still == 0 {
		return delivered, last, true, nil
	}
	for end := time.Now().Add(quietMax); time.Now().Before(end); {
		sleepFor(ctx, 100*time.Millisecond)
		if ctx.Err() != nil {
			return 0, 0, false, ctx.Err()
		}
		if w := n.written(); w != last {
			last, stable = w, time.Now()
		} else if time.Since(stable) >= still {
			return delivered, last, true, nil
		}
	}
	return delivered, last, false, nil
}

// measureGroup runs one group size's steps on n (a fresh node of mode m): build, messages,
// joins, and with push the push of the group's messages to -live devices (and a direct
// conversation's, for reference). profileDir, if set, gets CPU profiles of the node and of this
// process during the group's push.
func measureGroup(ctx context.Context, o options, g groupFlags, n groupNode, m groupMode, size int, push bool, profileDir string) (groupRun, error) {
	r := groupRun{mode: m.name, size: size}
	id := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	conv, owner := "g:big-"+id, "gown-"+id
	members := make([]string, size-1)
	for i := range members {
		members[i] = "gm" + strconv.Itoa(i) + "-" + id
	}
	t := n.target()
	step := func(what string, f func() error) (done time.Duration, bytes int64, err error) {
		if _, _, _, err := settle(ctx, n, time.Now(), g.quiet); err != nil {
			return 0, 0, fmt.Errorf("before %s: %w", what, err)
		}
		b0, start := n.written(), time.Now()
		if err := f(); err != nil {
			return 0, 0, err
		}
		done, b1, quiet, err := settle(ctx, n, start, g.quiet)
		if err != nil {
			return 0, 0, fmt.Errorf("after %s: %w", what, err)
		}
		if !quiet {
			r.notQuiet++
		}
		return done, b1 - b0, nil
	}

	progress("%s diffusion, %d members: building the group (%d requests)", m.name, size, (size-2)/proto.MaxMembers+1)
	var err error
	if r.buildDone, r.buildBytes, err = step("the build", func() (err error) {
		r.build, err = bench.BuildGroup(ctx, t, conv, owner, members)
		return err
	}); err != nil {
		return r, err
	}
	progress("%s, %d: built in %v (fan-out done after %v), %s written", m.name, size, r.build.Took.Round(time.Millisecond),
		r.buildDone.Round(time.Millisecond), mb(r.buildBytes))

	r.messages = g.messages
	if m.name == "write" && g.writeEntries > 0 {
		r.messages = max(1, min(g.messages, g.writeEntries/size))
	}
	progress("%s, %d: %d messages, %d in flight", m.name, size, r.messages, g.window)
	if r.sendsDone, r.sendsBytes, err = step("the messages", func() (err error) {
		r.sends, err = bench.GroupSends(ctx, t, conv, owner, r.messages, g.window, o.body)
		return err
	}); err != nil {
		return r, err
	}
	progress("%s, %d: %d messages acked in %v (fan-out done after %v), %.0f bytes written per message",
		m.name, size, r.sends.Acked, r.sends.Took.Round(time.Millisecond), r.sendsDone.Round(time.Millisecond), float64(r.sendsBytes)/float64(r.messages))

	for j := range g.joins {
		var ack time.Duration
		done, bytes, err := step("a join", func() (err error) {
			ack, err = bench.GroupJoin(ctx, t, conv, owner, "gj"+strconv.Itoa(j)+"-"+id)
			return err
		})
		if err != nil {
			return r, err
		}
		r.joinAck, r.joinDone, r.joinBytes = append(r.joinAck, ack), append(r.joinDone, done), append(r.joinBytes, bytes)
		progress("%s, %d: join %d acked in %v (fan-out done after %v), %s written", m.name, size, j+1,
			ack.Round(time.Microsecond), done.Round(time.Millisecond), mb(bytes))
	}

	if !push {
		return r, nil
	}
	live := min(g.live, len(members))
	// The reference: a direct conversation's push, measured the same way on the same node.
	progress("%s, %d: push of a direct conversation, %d messages/s for %v", m.name, size, g.rate, o.duration)
	snd, rcv := "gdsnd-"+id, "gdrcv-"+id
	d, err := timedPush(ctx, n, t, bench.GroupPushConfig{Conv: proto.DirectConv(snd, rcv), Peer: rcv, Sender: snd,
		Live: []string{rcv}, Rate: g.rate, D: o.duration, Body: o.body}, &r.directCPU)
	if err != nil {
		return r, fmt.Errorf("direct push: %w", err)
	}
	r.direct = &d
	progress("%s, %d: direct push p50 %v p99 %v (append → arrival p50 %v p99 %v); CPU cores: node %.2f, syncbench %.2f, other %.2f", m.name, size,
		d.SendP50, d.SendP99, d.PushP50, d.PushP99, r.directCPU.server, r.directCPU.self, r.directCPU.other)
	acks := "every batch"
	if every := sourceAckEvery(); every > 0 {
		acks = "at most every " + every.String()
	}
	progress("%s, %d: push to %d live members' devices, %d messages/s for %v, source acks %s", m.name, size, live, g.rate, o.duration, acks)
	cfg := bench.GroupPushConfig{Conv: conv, Sender: owner, Live: members[:live], Rate: g.rate, D: o.duration, Body: o.body,
		SourceAckEvery: sourceAckEvery()}
	var profiled chan struct{}
	if profileDir != "" {
		// CPU profiles over the timed sends (the devices are connected and caught up): the
		// node's, and this process's (the load generator's: the live devices' side).
		prefix := fmt.Sprintf("groups-push-%s-%d-", m.name, live)
		self := filepath.Join(profileDir, prefix+"syncbench.pprof")
		cfg.Ready = func() {
			profiled = make(chan struct{})
			f, err := os.Create(self)
			if err == nil {
				if err = pprof.StartCPUProfile(f); err != nil {
					f.Close()
				}
			}
			if err != nil {
				progress("cpu profile of syncbench: %v", err)
				f = nil
			}
			go func() {
				defer close(profiled)
				files, err := n.profile(ctx, o.duration, profileDir, prefix)
				if f != nil {
					pprof.StopCPUProfile()
					f.Close()
					files = append(files, self)
				}
				if err != nil {
					progress("cpu profile: %v", err)
				}
				if len(files) > 0 {
					progress("cpu profiles of the push: %s", strings.Join(files, " "))
				}
			}()
		}
	}
	gp, err := timedPush(ctx, n, t, cfg, &r.groupCPU)
	if profiled != nil {
		<-profiled
	}
	if err != nil {
		return r, fmt.Errorf("group push: %w", err)
	}
	r.group = &gp
	progress("%s, %d: group push to %d devices: p50 %v p99 %v (append → arrival p50 %v p99 %v; first device p50 %v, last p50 %v p99 %v; ack p50 %v), %d deliveries, %d missing, %d batches (%d of a source, catch-up included); CPU cores: node %.2f (%v per batch), syncbench %.2f, other %.2f",
		m.name, size, gp.Live, gp.SendP50, gp.SendP99, gp.PushP50, gp.PushP99, gp.FirstP50, gp.LastP50, gp.LastP99, gp.AckP50, gp.Deliveries, gp.Missing, gp.Batches, gp.SourceBatches,
		r.groupCPU.server, r.groupCPU.serverPerAck, r.groupCPU.self, r.groupCPU.other)
	return r, nil
}

// timedPush runs GroupPush and sets *use to the CPU used over its timed sends (from cfg.Ready
// to its end), with the node's CPU per batch the devices received (in serverPerAck).
func timedPush(ctx context.Context, n groupNode, t bench.Target, cfg bench.GroupPushConfig, use *cpuUse) (bench.GroupPushResult, error) {
	var before cpuSample
	ready := cfg.Ready
	cfg.Ready = func() {
		before = cpuSample{at: time.Now(), nodes: n.cpu(), self: procstat.CPU(os.Getpid()), all: machineBusy()}
		if ready != nil {
			ready()
		}
	}
	res, err := bench.GroupPush(ctx, t, cfg)
	if !before.at.IsZero() {
		// serverPerAck: the node's CPU per batch the devices received.
		*use = before.since(cpuSample{at: time.Now(), nodes: n.cpu(), self: procstat.CPU(os.Getpid()), all: machineBusy()}, res.Batches)
	}
	return res, err
}

func mb(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }

// groupsScenario runs o.repeat rounds, each measuring every mode and size on fresh nodes
// (alternating which mode goes first), with start(m) starting a node of mode m.
func groupsScenario(ctx context.Context, o options, g groupFlags, sizes []int, start func(m groupMode) (groupNode, error)) ([]groupRun, error) {
	maxSize := slices.Max(sizes)
	var modes []groupMode
	for _, m := range []groupMode{{"write", maxGroupSize(maxSize)}, {"read", min(readThreshold, sizes[0]-1)}} {
		if g.modes == "" || slices.Contains(strings.Split(g.modes, ","), m.name) {
			modes = append(modes, m)
		}
	}
	if len(modes) == 0 {
		return nil, fmt.Errorf("-group-modes %q: write, read or both", g.modes)
	}
	if min(readThreshold, sizes[0]-1) < 2 {
		return nil, errors.New("-group-sizes: the smallest group needs at least 3 members (read diffusion's threshold is at least 2)")
	}
	var runs []groupRun
	for k := range max(o.repeat, 1) {
		order := slices.Clone(modes)
		if k%2 == 1 {
			slices.Reverse(order)
		}
		for _, m := range order {
			for _, size := range sizes {
				progress("round %d of %d: %s diffusion (threshold %d), a group of %d members, on a fresh node", k+1, max(o.repeat, 1), m.name, m.threshold, size)
				n, err := start(m)
				if err != nil {
					return runs, err
				}
				// The push: under read diffusion to the largest group; under write diffusion, for
				// reference, to the smallest (its fan-out, an entry per member per message, is
				// what the node can take at the push's rate).
				push := g.live > 0 && (m.name == "read" && size == maxSize || m.name == "write" && size == sizes[0])
				prof := ""
				if k == 0 {
					prof = o.cpuprofile
				}
				r, err := measureGroup(ctx, o, g, n, m, size, push, prof)
				n.close()
				if err != nil {
					return runs, fmt.Errorf("%s diffusion, %d members: %w", m.name, size, err)
				}
				runs = append(runs, r)
			}
		}
	}
	return runs, nil
}

// runGroups is -scenario groups.
func runGroups(ctx context.Context, o options, g groupFlags) error {
	if o.addr != "" {
		return errors.New("-scenario groups starts its own nodes: -addr does not apply")
	}
	sizes, err := parseSizes(g.sizes)
	if err != nil {
		return err
	}
	g.quiet = quietFor
	if g.messages < 1 || g.window < 1 || g.joins < 0 || g.live < 0 || g.rate < 1 || o.body < 24 {
		return errors.New("-scenario groups needs -group-messages, -group-window and -group-rate ≥ 1, -group-joins and -live ≥ 0, -body ≥ 24")
	}
	dir, bin, err := processScenario(ctx, o, "groups")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Printf("# syncbench: scenario groups, 1 node, %d shards, sizes %v, %d messages (write diffusion: at most %d member-log entries), %d in flight, %d joins, push: %d live devices, %d/s for %v, %d-byte bodies, repeat %d; %d CPUs\n",
		o.shards, sizes, g.messages, g.writeEntries, g.window, g.joins, g.live, g.rate, o.duration, o.body, o.repeat, runtime.NumCPU())
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		progress("load average before: %s", strings.TrimSpace(string(b)))
	}
	nodes := 0
	runs, err := groupsScenario(ctx, o, g, sizes, func(m groupMode) (groupNode, error) {
		nodes++
		c, err := startProcCluster(ctx, bin, fmt.Sprintf("%s/node%d-%s", dir, nodes, m.name), 1, o.shards, groupNodeArgs(m, slices.Max(sizes))...)
		if err != nil {
			return nil, err
		}
		return procGroupNode{c}, nil
	})
	if b, lerr := os.ReadFile("/proc/loadavg"); lerr == nil {
		progress("load average after: %s", strings.TrimSpace(string(b)))
	}
	if err != nil {
		return err
	}
	return printRows(groupRows(runs, sizes), "read ÷ write")
}

// groupRows are the result table: for each size, the build, the messages and the joins under
// each mode (medians over the rounds, every round's figure in the notes), the read row's ratio
// to the write row; then the push rows.
func groupRows(runs []groupRun, sizes []int) []row {
	var rows []row
	of := func(mode string, size int) []groupRun {
		return slices.DeleteFunc(slices.Clone(runs), func(r groupRun) bool { return r.mode != mode || r.size != size })
	}
	ratio := func(read, write float64) string {
		if write == 0 {
			return "-"
		}
		return fmt.Sprintf("%.3g×", read/write)
	}
	for _, size := range sizes {
		w, rd := of("write", size), of("read", size)
		type figs struct{ buildBytes, msgBytes, joinBytes float64 }
		var wf figs
		for _, mode := range []struct {
			name string
			runs []groupRun
		}{{"write", w}, {"read", rd}} {
			if len(mode.runs) == 0 {
				continue
			}
			var took, done, sendDone, p50, p99, jAck, jDone []time.Duration
			var bytes, perMsg, perSec, jBytes []float64
			var tookL, perMsgL, jBytesL []string
			msgs := 0
			notQuiet := 0
			for _, r := range mode.runs {
				took, done, bytes = append(took, r.build.Took), append(done, r.buildDone), append(bytes, float64(r.buildBytes))
				tookL = append(tookL, r.build.Took.Round(time.Millisecond).String())
				pm := float64(r.sendsBytes) / float64(r.messages)
				perMsg, perMsgL = append(perMsg, pm), append(perMsgL, fmt.Sprintf("%.0f", pm))
				perSec = append(perSec, float64(r.sends.Acked)/r.sends.Took.Seconds())
				sendDone, p50, p99 = append(sendDone, r.sendsDone), append(p50, r.sends.P50), append(p99, r.sends.P99)
				msgs = r.messages
				for j := range r.joinAck {
					jAck, jDone, jBytes = append(jAck, r.joinAck[j]), append(jDone, r.joinDone[j]), append(jBytes, float64(r.joinBytes[j]))
					jBytesL = append(jBytesL, fmt.Sprintf("%.0f", float64(r.joinBytes[j])))
				}
				notQuiet += r.notQuiet
			}
			f := figs{median(bytes), median(perMsg), median(jBytes)}
			rb, rm, rj := "-", "-", "-"
			if mode.name == "read" {
				rb, rm, rj = ratio(f.buildBytes, wf.buildBytes), ratio(f.msgBytes, wf.msgBytes), ratio(f.joinBytes, wf.joinBytes)
			} else {
				wf = f
			}
			name := fmt.Sprintf("%s, %s members", mode.name, thousands(size))
			quietNote := ""
			if notQuiet > 0 {
				quietNote = fmt.Sprintf("; %d steps' disk writes had not stopped after %v", notQuiet, quietMax)
			}
			rows = append(rows,
				row{name: name + ": build", value: median(took).Round(time.Millisecond).String(), ratio: rb,
					note: fmt.Sprintf("to the last ack (runs %s); fan-out done after %v; %s written, %.0f B per member",
						strings.Join(tookL, " "), median(done).Round(time.Millisecond), mb(int64(f.buildBytes)), f.buildBytes/float64(size))},
				row{name: fmt.Sprintf("%s: %d messages", name, msgs), value: fmt.Sprintf("%.0f B/msg", f.msgBytes), p50: median(p50), p99: median(p99), ratio: rm,
					note: fmt.Sprintf("disk bytes per message (runs %s); send → ack p50/p99; acked at %.0f msgs/s, fan-out done after %v%s",
						strings.Join(perMsgL, " "), median(perSec), median(sendDone).Round(time.Millisecond), quietNote)})
			if len(jAck) > 0 {
				rows = append(rows, row{name: name + ": join of 1", value: fmt.Sprintf("%.0f B", f.joinBytes), p50: median(jAck), ratio: rj,
					note: fmt.Sprintf("disk bytes per join (each: %s); p50 = ack, fan-out done after %v (median of %d)",
						strings.Join(jBytesL, " "), median(jDone).Round(time.Millisecond), len(jAck))})
			}
		}
	}
	// The push rows: the direct conversation's (measured beside each group push), then each
	// mode's group push, with its ratios to the direct one.
	var direct []*bench.GroupPushResult
	var directCPU []cpuUse
	pushes := map[string][]*bench.GroupPushResult{}
	pushCPU := map[string][]cpuUse{}
	pushSize := map[string]int{}
	for _, r := range runs {
		if r.group != nil {
			direct, pushes[r.mode], pushSize[r.mode] = append(direct, r.direct), append(pushes[r.mode], r.group), r.size
			directCPU, pushCPU[r.mode] = append(directCPU, r.directCPU), append(pushCPU[r.mode], r.groupCPU)
		}
	}
	cores := func(us []cpuUse) string {
		var node, self, other []float64
		var perBatch []time.Duration
		for _, u := range us {
			node, self, other, perBatch = append(node, u.server), append(self, u.self), append(other, u.other), append(perBatch, u.serverPerAck)
		}
		return fmt.Sprintf("CPU cores over the sends: node %.2f (%v per batch received), syncbench %.2f, the rest of the machine %.2f",
			median(node), median(perBatch), median(self), median(other))
	}
	if len(direct) == 0 {
		return rows
	}
	med := func(rs []*bench.GroupPushResult, f func(*bench.GroupPushResult) time.Duration) time.Duration {
		var v []time.Duration
		for _, r := range rs {
			v = append(v, f(r))
		}
		return median(v)
	}
	sp50 := func(r *bench.GroupPushResult) time.Duration { return r.SendP50 }
	sp99 := func(r *bench.GroupPushResult) time.Duration { return r.SendP99 }
	pp50 := func(r *bench.GroupPushResult) time.Duration { return r.PushP50 }
	pp99 := func(r *bench.GroupPushResult) time.Duration { return r.PushP99 }
	runsOf := func(rs []*bench.GroupPushResult) string {
		var s []string
		for _, r := range rs {
			s = append(s, fmt.Sprintf("%v/%v", r.SendP50.Round(10*time.Microsecond), r.SendP99.Round(10*time.Microsecond)))
		}
		return strings.Join(s, " ")
	}
	x := func(a, b time.Duration) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", float64(a)/float64(b))
	}
	deliveries := 0
	for _, r := range direct {
		deliveries += r.Deliveries
	}
	rows = append(rows, row{name: "push: direct conversation, 1 device", value: fmt.Sprintf("%d deliveries", deliveries/len(direct)),
		p50: med(direct, sp50), p99: med(direct, sp99), ratio: "-",
		note: fmt.Sprintf("send → arrival (runs %s); append → arrival p50 %v p99 %v; %s", runsOf(direct),
			dur(med(direct, pp50)), dur(med(direct, pp99)), cores(directCPU))})
	for _, mode := range []string{"write", "read"} {
		group := pushes[mode]
		if len(group) == 0 {
			continue
		}
		var deliveries, missing, batches, srcBatches int
		for _, r := range group {
			deliveries, missing, batches, srcBatches = deliveries+r.Deliveries, missing+r.Missing, batches+r.Batches, srcBatches+r.SourceBatches
		}
		rows = append(rows, row{name: fmt.Sprintf("push: %s diffusion, %d live of %s members", mode, group[0].Live, thousands(pushSize[mode])),
			value: fmt.Sprintf("%d deliveries", deliveries/len(group)), p50: med(group, sp50), p99: med(group, sp99),
			ratio: "direct× " + x(med(group, sp50), med(direct, sp50)) + " / " + x(med(group, sp99), med(direct, sp99)),
			note: fmt.Sprintf("send → arrival (runs %s); append → arrival p50 %v p99 %v (direct× %s / %s); send → ack p50 %v p99 %v; per message, send → first device p50 %v, → last device p50 %v p99 %v; %d missing; %d batches (%d of a source); ready after %v; %s",
				runsOf(group), dur(med(group, pp50)), dur(med(group, pp99)), x(med(group, pp50), med(direct, pp50)), x(med(group, pp99), med(direct, pp99)),
				dur(med(group, func(r *bench.GroupPushResult) time.Duration { return r.AckP50 })),
				dur(med(group, func(r *bench.GroupPushResult) time.Duration { return r.AckP99 })),
				dur(med(group, func(r *bench.GroupPushResult) time.Duration { return r.FirstP50 })),
				dur(med(group, func(r *bench.GroupPushResult) time.Duration { return r.LastP50 })),
				dur(med(group, func(r *bench.GroupPushResult) time.Duration { return r.LastP99 })),
				missing, batches/len(group), srcBatches/len(group), group[0].Ready.Round(time.Millisecond), cores(pushCPU[mode]))})
	}
	return rows
}

// thousands writes n with thousands separators.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// sourceAckEvery is how the push's devices ack a source (bench.GroupPushConfig.SourceAckEvery):
// SYNCBENCH_SOURCE_ACK_EVERY, a duration ("250ms"); unset or 0, every batch, as the SDK does.
// An environment variable rather than a flag while main.go, which holds the flags, is being
// edited elsewhere; a bad value is reported and ignored.
func sourceAckEvery() time.Duration {
	v := os.Getenv("SYNCBENCH_SOURCE_ACK_EVERY")
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		progress("SYNCBENCH_SOURCE_ACK_EVERY=%q is not a duration ≥ 0: acking every batch", v)
		return 0
	}
	return d
}
