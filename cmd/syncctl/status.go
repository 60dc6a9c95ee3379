package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

func runStatus(ctx context.Context, e *env, args []string) int {
	const cmd = "status"
	f := newFlagSet(e, cmd, "[-admin host:port]", `
Asks a node's admin HTTP server for its readiness (/readyz) and metrics (/metrics) and prints
whether it is ready and, per shard, this node's Raft view: whether it leads the shard, term,
commit/applied/last index, fan-out lag and snapshot restores. Exits 1 if the node is not ready or
cannot be reached. Both endpoints are open unless the node runs with admin_metrics_auth; the
admin token is sent if syncctl finds one (see -admin-token-file).`, `
syncctl status -admin 127.0.0.1:7380`)
	var admin adminFlags
	admin.register(f)
	if code, ok := parse(e, f, args); !ok {
		return code
	}
	readyCode, readyBody, err := admin.send(ctx, http.MethodGet, "/readyz")
	if err != nil {
		e.reportAdmin(cmd, err)
		return exitFail
	}
	metricsCode, metricsBody, err := admin.send(ctx, http.MethodGet, "/metrics")
	if err == nil && metricsCode != http.StatusOK {
		err = admin.answerError(metricsCode, metricsBody)
	}
	if err != nil {
		e.reportAdmin(cmd, err)
		return exitFail
	}
	samples := parseMetrics(string(metricsBody))

	ready := readyCode == http.StatusOK
	if ready {
		fmt.Fprintf(e.stdout, "node %s: ready\n", *admin.addr)
	} else {
		fmt.Fprintf(e.stdout, "node %s: NOT READY (HTTP %d): %s\n", *admin.addr, readyCode, strings.TrimSpace(string(readyBody)))
	}
	global := func(name string) string {
		for _, s := range samples {
			if s.name == name && len(s.labels) == 0 {
				return s.value
			}
		}
		return "-"
	}
	fmt.Fprintf(e.stdout, "connections %s, sync streams %s, fan-out delivered %s, fan-out failures %s\n\n",
		global("syncd_connections"), global("syncd_sync_streams"),
		global("syncd_fanout_delivered_total"), global("syncd_fanout_failures_total"))

	columns := []struct{ title, metric string }{
		{"LEADER", "syncd_raft_is_leader"},
		{"TERM", "syncd_raft_term"},
		{"COMMIT", "syncd_raft_commit_index"},
		{"APPLIED", "syncd_raft_applied_index"},
		{"LAST", "syncd_raft_last_index"},
		{"FANOUT_LAG", "syncd_fanout_lag_entries"},
		{"RESTORES", "syncd_raft_snapshot_restores_total"},
	}
	shards := map[string]map[string]string{}
	for _, s := range samples {
		shard, ok := s.labels["shard"]
		if !ok || !strings.HasPrefix(s.name, "syncd_") {
			continue
		}
		if shards[shard] == nil {
			shards[shard] = map[string]string{}
		}
		shards[shard][s.name] = s.value
	}
	ids := make([]string, 0, len(shards))
	for id := range shards {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int {
		x, _ := strconv.ParseUint(a, 10, 64)
		y, _ := strconv.ParseUint(b, 10, 64)
		if x != y {
			return cmp.Compare(x, y)
		}
		return strings.Compare(a, b)
	})
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "SHARD")
	for _, c := range columns {
		fmt.Fprint(tw, "\t"+c.title)
	}
	fmt.Fprintln(tw)
	for _, id := range ids {
		fmt.Fprint(tw, id)
		for _, c := range columns {
			v, ok := shards[id][c.metric]
			switch {
			case !ok:
				v = "-"
			case c.metric == "syncd_raft_is_leader" && v == "1":
				v = "yes"
			case c.metric == "syncd_raft_is_leader":
				v = "no"
			}
			fmt.Fprint(tw, "\t"+v)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	if len(ids) == 0 {
		fmt.Fprintln(e.stdout, "(no per-shard metrics: is this a syncd admin address?)")
	}
	if !ready {
		return exitFail
	}
	return exitOK
}

// sample is one line of the Prometheus text exposition format.
type sample struct {
	name   string
	labels map[string]string
	value  string // as a plain decimal when it is a whole number
}

// parseMetrics reads the samples of a Prometheus text exposition, skipping comments and lines it
// cannot read.
func parseMetrics(text string) []sample {
	var out []sample
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, ok := parseSample(line)
		if ok {
			out = append(out, s)
		}
	}
	return out
}

func parseSample(line string) (sample, bool) {
	s := sample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, false
	}
	s.name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for {
			line = strings.TrimLeft(line, " ,")
			if strings.HasPrefix(line, "}") {
				line = line[1:]
				break
			}
			eq := strings.Index(line, `="`)
			if eq <= 0 {
				return s, false
			}
			key := line[:eq]
			line = line[eq+2:]
			var val strings.Builder
			j := 0
			for ; j < len(line) && line[j] != '"'; j++ {
				if line[j] == '\\' && j+1 < len(line) {
					j++
					if line[j] == 'n' {
						val.WriteByte('\n')
						continue
					}
				}
				val.WriteByte(line[j])
			}
			if j == len(line) {
				return s, false
			}
			s.labels[key] = val.String()
			line = line[j+1:]
		}
	}
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return s, false
	}
	s.value = fields[0]
	if v, err := strconv.ParseFloat(s.value, 64); err == nil && v == float64(int64(v)) {
		s.value = strconv.FormatInt(int64(v), 10)
	}
	return s, true
}
