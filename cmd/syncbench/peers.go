package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/syncd-dev/syncd/bench"
	"github.com/syncd-dev/syncd/bench/peerresult"
	"github.com/syncd-dev/syncd/test/proccluster"
)

// peersDir is the peer load generator's module, from the syncd module's root.
const peersDir = "bench/peers"

// runPeers is -scenario peers: syncd with one node and with o.nodes (child processes of one
// binary, as -scenario cluster runs them), then the peer load generator (bench/peers, built
// first so that a build failure shows before the runs) against each of -peers — every system
// alone on the machine: each is stopped before the next starts. Each system runs sends (appends),
// delivery (push) and catchup once; the peer rows carry syncd's figure with as many nodes divided
// by the peer's.
func runPeers(ctx context.Context, o options) error {
	if o.addr != "" {
		return errors.New("-scenario peers starts its own syncd nodes: -addr does not apply")
	}
	if o.nodes < 2 {
		return errors.New("-scenario peers needs -nodes ≥ 2 (its syncd cluster)")
	}
	fmt.Printf("# syncbench: scenario peers (syncd 1 and %d nodes, then %s), duration %v, devices %d, senders %d, body %d, rate %d/s, catch-up %d; peers: %d users, %d subscribers; %d CPUs\n",
		o.nodes, o.peers, o.duration, o.devices, o.senders, o.body, o.rate, o.catchup, o.users, o.subscribers, runtime.NumCPU())
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		progress("load average before: %s", strings.TrimSpace(string(b)))
	}
	dir, err := os.MkdirTemp("", "syncbench-peers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	progress("building the peer load generator (%s) into %s", peersDir, dir)
	gen, err := buildPeers(ctx, dir)
	if err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, gen, append(peerArgs(o), "-check")...).CombinedOutput(); err != nil {
		return fmt.Errorf("peer load generator: %s", bytes.TrimSpace(out))
	}
	bin, err := syncdBinary(ctx, o, dir)
	if err != nil {
		return err
	}
	var rows []row
	figs := map[int]figures{}
	for _, nodes := range []int{1, o.nodes} {
		r, f := syncdShapes(ctx, o, bin, filepath.Join(dir, "syncd"+strconv.Itoa(nodes)), nodes)
		rows, figs[nodes] = append(rows, r...), f
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	results, err := runPeerGenerator(ctx, gen, o)
	rows = append(rows, peerRows(results, figs)...)
	if perr := printRows(rows, "syncd ÷ peer"); perr != nil {
		return perr
	}
	return err
}

// figures are syncd's results with some number of nodes, which the peers' rows are read against;
// a zero result is one that failed.
type figures struct {
	sends    bench.SendResult
	delivery bench.DeliveryResult
	catchUp  bench.CatchUpResult
}

// syncdShapes starts a syncd of nodes nodes (child processes of bin, in dir), runs sends,
// delivery and catchup on it once each, stops it, and returns its rows and figures.
func syncdShapes(ctx context.Context, o options, bin, dir string, nodes int) ([]row, figures) {
	name := "syncd, 1 node"
	if nodes > 1 {
		name = fmt.Sprintf("syncd, %d nodes", nodes)
	}
	var fig figures
	progress("starting %s (%d shards, child processes); waiting until settled", name, o.shards)
	c, err := startProcCluster(ctx, bin, dir, nodes, o.shards)
	if err != nil {
		progress("%s: %v", name, err)
		return []row{{name: name, value: "FAILED", note: err.Error()}}, fig
	}
	defer closeCluster(name, c)
	once := o
	once.repeat = 1
	var rows []row
	// The peers' spread first: the shape of the peers' writers, which their rows compare with;
	// then the fixed-peer shape (one conversation per sender), named as such.
	for _, shape := range []struct {
		name   string
		spread int
	}{{fmt.Sprintf("sends, peers' spread (%d senders, each to a random one of %d users)", o.senders, o.users), o.users},
		{fmt.Sprintf("sends, fixed peer (%d senders, sender i to i+1 of %d devices)", o.senders, o.devices), 0}} {
		runs := measureSends(ctx, once, name, c, shape.spread)
		if len(runs) == 0 {
			rows = append(rows, row{name: name + ": " + shape.name, value: "FAILED", note: "see the progress lines above"})
			continue
		}
		if shape.spread > 0 {
			fig.sends = runs[0].res
		}
		r := runs[0]
		rows = append(rows, row{name: name + ": " + shape.name, value: fmt.Sprintf("%.0f acked/s", r.res.PerSec),
			p50: r.res.P50, p99: r.res.P99, note: fmt.Sprintf("server CPU %v per ack (%.2f cores), %.2f Raft entries and %s written per ack; syncbench %.2f cores, other %.2f cores",
				r.serverPerAck, r.server, r.entriesPerAck, kib(r.diskPerAck), r.self, r.other)})
	}
	if runs := measureDelivery(ctx, once, name, c); len(runs) > 0 {
		fig.delivery = runs[0].res
		rows = append(rows, row{name: fmt.Sprintf("%s: delivery (%d/s)", name, o.rate), value: fmt.Sprintf("%d entries", fig.delivery.Count),
			p50: fig.delivery.P50, p99: fig.delivery.P99,
			note: fmt.Sprintf("append→delivery, %d live receivers (the peers' push: %d subscribers)", o.receivers, o.subscribers)})
	} else {
		rows = append(rows, row{name: name + ": delivery", value: "FAILED", note: "see the progress lines above"})
	}
	progress("catch-up on %s: filling a %d-entry backlog", name, o.catchup)
	if r, err := bench.CatchUp(ctx, c.Target(), o.catchup); err != nil {
		progress("catch-up on %s: %v", name, err)
		rows = append(rows, row{name: name + ": catch-up", value: "FAILED", note: err.Error()})
	} else {
		fig.catchUp = r
		progress("catch-up on %s: %.0f entries/s", name, r.PerSec)
		rows = append(rows, row{name: name + ": catch-up", value: fmt.Sprintf("%.0f entries/s", r.PerSec),
			note: fmt.Sprintf("%d entries in %v, batches of %d; backlog written at %.0f sends/s", r.Entries, r.Duration.Round(time.Millisecond), r.Batch, r.FillPerSec)})
	}
	return rows, fig
}

// kib formats a byte count in KiB.
func kib(n int64) string { return fmt.Sprintf("%.1f KiB", float64(n)/1024) }

// buildPeers builds the peer load generator of the syncd checkout holding the working directory
// into dir, with the go command found in PATH, and returns the binary's path.
func buildPeers(ctx context.Context, dir string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	root, err := proccluster.ModuleRoot(wd)
	if err != nil {
		return "", fmt.Errorf("%w (-scenario peers builds %s: run it inside the syncd repository)", err, peersDir)
	}
	bin := filepath.Join(dir, "peers")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	cmd.Dir = filepath.Join(root, filepath.FromSlash(peersDir))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build in %s: %w\n%s", cmd.Dir, err, out)
	}
	return bin, nil
}

// runPeerGenerator runs the generator with o's shapes and returns its results. Its progress lines
// (its standard error) go to standard output, in order with this program's own. On an interrupt
// it gets SIGINT, to stop its servers and remove their directories, and is killed 30 s later.
func runPeerGenerator(ctx context.Context, bin string, o options) ([]peerresult.Result, error) {
	cmd := exec.CommandContext(ctx, bin, peerArgs(o)...)
	cmd.Stderr = os.Stdout
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = 30 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	results, rerr := peerresult.Read(out)
	io.Copy(io.Discard, out) // after a bad line: let the generator finish rather than block
	if err := cmd.Wait(); err != nil {
		return results, errors.Join(rerr, fmt.Errorf("peer load generator: %w", err))
	}
	return results, rerr
}

// peerArgs are the generator's flags for o's shapes: syncbench's own sizes where the shapes
// share them (-senders writers, -body, -rate, -catchup, -duration).
func peerArgs(o options) []string {
	return []string{"-systems", o.peers, "-duration", o.duration.String(),
		"-writers", strconv.Itoa(o.senders), "-users", strconv.Itoa(o.users), "-body", strconv.Itoa(o.body),
		"-subscribers", strconv.Itoa(o.subscribers), "-rate", strconv.Itoa(o.rate), "-catchup", strconv.Itoa(o.catchup)}
}

// peerRows turns the generator's results into table rows, each with the figure for the same
// shape of syncd with as many nodes (figs, by node count) divided by the peer's: acked appends/s
// for appends (syncd's sends), push p99 for push (syncd's delivery), entries/s for catchup. A
// ratio is "-" where either side has no figure.
func peerRows(results []peerresult.Result, figs map[int]figures) []row {
	var rows []row
	for _, r := range results {
		fig := figs[r.Nodes]
		if r.Shape == "" {
			rw := row{name: r.System, value: "skipped", note: r.Skip}
			if r.Skip == "" {
				rw.value, rw.note = "FAILED", r.Failed
			}
			rows = append(rows, rw)
			continue
		}
		rw := row{name: r.System + ": " + shapeName(r.Shape), note: r.Note}
		if r.Skip != "" {
			rw.value, rw.note = "skipped", r.Skip
			rows = append(rows, rw)
			continue
		}
		if r.Failed != "" {
			rw.value, rw.note = "FAILED", r.Failed
			rows = append(rows, rw)
			continue
		}
		rw.p50, rw.p99 = r.P50, r.P99
		switch r.Shape {
		case peerresult.Appends:
			rw.value = fmt.Sprintf("%.0f acked/s", r.PerSec)
			rw.ratio = ratioOf("rate", fig.sends.PerSec, r.PerSec)
			if r.Errors > 0 {
				rw.note += fmt.Sprintf("; %d appends failed", r.Errors)
			}
		case peerresult.Push:
			rw.value = fmt.Sprintf("%d events", r.Count)
			rw.ratio = ratioOf("p99", float64(fig.delivery.P99), float64(r.P99))
		case peerresult.CatchUp:
			rw.value = fmt.Sprintf("%.0f entries/s", r.PerSec)
			rw.ratio = ratioOf("rate", fig.catchUp.PerSec, r.PerSec)
		}
		rows = append(rows, rw)
	}
	return rows
}

// shapeName is a shape's name in the table.
func shapeName(s peerresult.Shape) string {
	if s == peerresult.CatchUp {
		return "catch-up"
	}
	return string(s)
}

// ratioOf formats syncd ÷ peer for the quantity what, or "-" if either is not positive.
func ratioOf(what string, syncd, peer float64) string {
	if syncd <= 0 || peer <= 0 {
		return "-"
	}
	return fmt.Sprintf("%s %.2f", what, syncd/peer)
}
