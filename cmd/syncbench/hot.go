package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/bench"
	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// runHot is -scenario hot (issue #12, point 6): on a cluster of -nodes child processes, one hot
// user receives from -devices senders (-senders of them in flight at once, closed loop) while its
// device syncs — or, with -hot-group, -devices members write to one group while a member's
// device syncs; measured before, during and after an operator moves the user (the group) to a
// shard of its own (`POST /v1/moves?new_shard=1`): acked sends/s, send → ack and push latency,
// the longest gap on the watching stream, and the nodes' CPU per ack. Then a fresh user's log of
// -move-entries entries is moved the same way, idle, and the time and bytes the move took are
// reported.
func runHot(ctx context.Context, o options) error {
	dir, bin, err := processScenario(ctx, o, "hot")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Printf("# syncbench: scenario hot, %d nodes, %d shards, %d senders (%d in flight), %v per phase, a %d-entry log moved\n",
		o.nodes, o.shards, o.devices, o.senders, o.duration, o.moveEntries)
	cl, err := startProcCluster(ctx, bin, dir, o.nodes, o.shards)
	if err != nil {
		return err
	}
	defer closeCluster("the cluster", cl)
	cfg := bench.HotConfig{User: "hot-bot", Senders: o.devices, Workers: o.senders}
	what, kind, key, slot := "hot user", "user", cfg.User, log.UserSlot
	if o.hotGroup {
		cfg.Group = "g:hot-room"
		what, kind, key, slot = "hot group", "conv", cfg.Group, log.ConvSlot
	}
	after, during := "after, on a shard of its own", "during the move"
	if o.splitUser != 0 {
		if o.hotGroup || o.split || o.splitUser < 2 || o.splitUser > log.MaxSubLogs {
			return fmt.Errorf("syncbench: -split-user is 2 to %d sub-logs of a hot user, without -hot-group or -split", log.MaxSubLogs)
		}
		after, during = fmt.Sprintf("after its stream split into %d sub-logs", o.splitUser), "during the split of its stream"
	}
	var splitShard raftstore.ShardID
	var subShards []uint32
	if o.split {
		// A name whose slot is in the upper half of its shard's range, which the split moves.
		for i := 0; ; i++ {
			name := fmt.Sprint(key, "-", i)
			for _, r := range cluster.EvenSlots(o.shards) {
				if s := slot(name); s >= r.First+(r.Last-r.First+1)/2 && s <= r.Last {
					key, splitShard = name, r.Shard
				}
			}
			if splitShard != 0 {
				break
			}
		}
		if o.hotGroup {
			cfg.Group = key
		} else {
			cfg.User = key
		}
		after, during = "after its shard split", "during the split"
	}
	var pause, splitTook time.Duration
	var splitCopied int64
	// With -cpuprofile, the nodes are profiled over the phases before and after the move.
	profile := func(prefix string) func(context.Context) error {
		return func(ctx context.Context) error { startProfile(ctx, o, 0, cl, prefix)(); return nil }
	}
	steps := []bench.HotStep{
		{Name: "before the move", D: o.duration, Action: profile("hot-before-")},
		{Name: during, D: o.duration / 2, Action: func(ctx context.Context) error {
			var err error
			if o.splitUser != 0 {
				start := time.Now()
				subShards, err = splitUser(ctx, cl, key, o.splitUser)
				splitTook = time.Since(start)
				return err
			}
			if o.split {
				start := time.Now()
				pause, splitCopied, err = split(ctx, cl, splitShard)
				splitTook = time.Since(start)
				return err
			}
			pause, _, err = moveKey(ctx, cl, kind, key)
			return err
		}},
		{Name: after, D: o.duration, Action: profile("hot-after-")},
	}
	progress("%s %s: %d senders, %d in flight", what, key, o.devices, o.senders)
	phases, err := bench.Hot(ctx, cl.Target(), cfg, steps, cl.CPUTime)
	if err != nil {
		return err
	}
	var rows []row
	for _, p := range phases {
		note := fmt.Sprintf("%d acked in %v, %d failed; push p50 %v p99 %v; longest gap on the hot stream %v; nodes' CPU %v per ack",
			p.Acked, p.Took.Round(time.Millisecond), p.Errors, dur(p.PushP50), dur(p.PushP99), p.MaxGap.Round(time.Millisecond),
			(p.CPU / time.Duration(max(p.Acked, 1))).Round(time.Microsecond))
		if p.FirstErr != "" {
			note += "; the first failure: " + p.FirstErr
		}
		if p.Name == during && o.splitUser != 0 {
			note += fmt.Sprintf("; the split took %v, its sub-logs on shards %v (nothing pauses)", splitTook.Round(time.Millisecond), subShards)
		} else if p.Name == during {
			note += fmt.Sprintf("; the move paused the %s's writes %v", kind, pause.Round(time.Millisecond))
			if o.split {
				note += fmt.Sprintf("; the split of shard %d took %v and copied %d bytes", splitShard, splitTook.Round(time.Millisecond), splitCopied)
			}
		}
		rows = append(rows, row{name: what + ": " + p.Name, value: fmt.Sprintf("%.0f acked/s", p.PerSec), p50: p.AckP50, p99: p.AckP99, note: note})
	}
	if o.moveEntries > 0 {
		progress("filling a %d-entry log", o.moveEntries)
		b, err := bench.FillBacklog(ctx, cl.Target(), o.moveEntries)
		if err != nil {
			return err
		}
		progress("moving %s (%d entries) to a shard of its own", b.User, o.moveEntries)
		start := time.Now()
		pause, copied, err := moveKey(ctx, cl, "user", b.User)
		if err != nil {
			return err
		}
		rows = append(rows, row{name: fmt.Sprintf("move of a %d-entry log", o.moveEntries), value: time.Since(start).Round(time.Millisecond).String(),
			note: fmt.Sprintf("%d bytes copied (%.0f per entry), writes paused %v", copied, float64(copied)/float64(o.moveEntries), pause.Round(time.Millisecond))})
	}
	return printRows(rows, "-")
}

// moveKey asks node 0 to move the user or conversation (kind "user" or "conv") key to a shard of
// its own and waits until the move has ended; it returns the pause and the bytes copied, as the
// nodes' metrics count them.
func moveKey(ctx context.Context, cl *procCluster, kind, key string) (pause time.Duration, copied int64, err error) {
	return timedMove(ctx, cl, "/v1/moves?"+kind+"="+url.QueryEscape(key)+"&new_shard=1", func(v adminapi.ClusterView, to uint32) bool {
		if kind == "conv" {
			return v.ConvOverrides[key] == to
		}
		return v.Overrides[key] == to
	})
}

// split asks node 0 to split shard in two and waits until the move of its upper half has ended,
// as moveKey does.
func split(ctx context.Context, cl *procCluster, shard raftstore.ShardID) (pause time.Duration, copied int64, err error) {
	return timedMove(ctx, cl, fmt.Sprintf("/v1/shards/%d/split", shard), func(adminapi.ClusterView, uint32) bool { return true })
}

// splitUser asks node 0 to split uid's stream into subs sub-logs and waits until the split has
// ended; it returns the shards of the sub-logs, the user's own log's first.
func splitUser(ctx context.Context, cl *procCluster, uid string, subs int) ([]uint32, error) {
	path := fmt.Sprintf("/v1/users/%s/split?subs=%d", url.PathEscape(uid), subs)
	if _, _, err := timedMove(ctx, cl, path, func(v adminapi.ClusterView, _ uint32) bool { return len(v.Splits[uid]) == subs }); err != nil {
		return nil, err
	}
	v, err := cl.pc.Node(0).ClusterView(ctx)
	return v.Splits[uid], err
}

// timedMove starts the move path asks node 0 for and waits until no move is in progress and done
// holds of the cluster view (to: the move's destination); it returns the pause and the bytes
// copied, as the nodes' metrics count them.
func timedMove(ctx context.Context, cl *procCluster, path string, done func(v adminapi.ClusterView, to uint32) bool) (pause time.Duration, copied int64, err error) {
	p0, c0, err := moveMetrics(ctx, cl)
	if err != nil {
		return 0, 0, err
	}
	n := cl.pc.Node(0)
	code, body, err := n.AdminDo(ctx, http.MethodPost, path)
	if err != nil || code != http.StatusOK {
		return 0, 0, fmt.Errorf("syncbench: POST %s: HTTP %d %s %v", path, code, body, err)
	}
	var started adminapi.MoveStarted
	if err := json.Unmarshal([]byte(body), &started); err != nil {
		return 0, 0, err
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		if v, err := n.ClusterView(ctx); err == nil && len(v.Moves) == 0 && done(v, started.To) {
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, errors.New("syncbench: the move did not end within 10 minutes")
		}
		sleepFor(ctx, 20*time.Millisecond)
	}
	p1, c1, err := moveMetrics(ctx, cl)
	return time.Duration((p1 - p0) * float64(time.Second)), int64(c1 - c0), err
}

// moveMetrics sums syncd_move_pause_seconds_sum and syncd_move_copied_bytes_total over the nodes.
func moveMetrics(ctx context.Context, cl *procCluster) (pause, copied float64, err error) {
	for _, n := range cl.pc.Nodes() {
		code, body, err := n.AdminDo(ctx, http.MethodGet, "/metrics")
		if err != nil || code != http.StatusOK {
			return 0, 0, fmt.Errorf("syncbench: %s metrics: HTTP %d %v", n.ID, code, err)
		}
		sc := bufio.NewScanner(strings.NewReader(body))
		for sc.Scan() {
			name, val, ok := strings.Cut(sc.Text(), " ")
			v, perr := strconv.ParseFloat(val, 64)
			if !ok || perr != nil {
				continue
			}
			switch name {
			case "syncd_move_pause_seconds_sum":
				pause += v
			case "syncd_move_copied_bytes_total":
				copied += v
			}
		}
	}
	return pause, copied, nil
}

func sleepFor(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
