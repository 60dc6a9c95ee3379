package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/test/testkit"
)

// alertRules is the alert rules file the project ships (docs/OPERATIONS.md, "Alerts").
const alertRules = "../cmd/syncd/deploy/alerts.yml"

// TestPrometheusAlerts: a real Prometheus (Debian's) scrapes a real three-node cluster with the
// shipped alert rules; every query of the shipped Grafana dashboard evaluates there, naming only
// metrics the nodes export; nothing fires while the cluster is healthy; then a node's disk goes
// below min_free_disk (a tmpfs filled up) and SyncdDiskLow fires for that node; then two nodes
// are killed and SyncdNodeDown fires for each, and SyncdShardWithoutLeader for every shard the
// survivor hosts (it lost its quorum). The rules run with their "for" durations set to 0s, so
// that the test does not wait minutes (promtool test rules alerts_test.yml checks each "for").
// The rules on dead letters and a stalled fan-out are checked by promtool only: making either
// condition true on real nodes takes a refused delivery or an outbox stuck for five minutes.
func TestPrometheusAlerts(t *testing.T) {
	skipShort(t)
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("no prometheus on PATH (apt-get install prometheus)")
	}
	tl := newTimeline(t)
	c := startClusterWithSpares(t, 3, 0, tl)
	c.waitLeaders(60 * time.Second)
	low := c.nodes[2]
	filler := moveOntoSmallDisk(t, c, low)
	// Leaders balanced again after the restart: no transfer is under way while the test asks a
	// healthy cluster to fire nothing (the rules run with "for: 0s").
	if err := c.pc.WaitSettled(context.Background(), 60*time.Second); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	rules, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	rules = regexp.MustCompile(`(?m)^(\s+)for: .*$`).ReplaceAll(rules, []byte("${1}for: 0s"))
	if err := os.WriteFile(filepath.Join(dir, "alerts.yml"), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, n := range c.nodes {
		targets = append(targets, fmt.Sprintf("      - targets: [%q]\n        labels: {instance: %s}\n", n.AdminAddr, n.ID))
	}
	config := "global: {scrape_interval: 1s, evaluation_interval: 1s, scrape_timeout: 900ms}\n" +
		"rule_files: [alerts.yml]\nscrape_configs:\n  - job_name: syncd\n    static_configs:\n" + strings.Join(targets, "")
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := testkit.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, prom, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("prometheus's log:\n%s", b)
		}
	})

	firing := func() []string {
		resp, err := http.Get("http://" + addr + "/api/v1/alerts")
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var body struct {
			Data struct {
				Alerts []struct {
					Labels map[string]string `json:"labels"`
					State  string            `json:"state"`
				} `json:"alerts"`
			} `json:"data"`
		}
		if json.NewDecoder(resp.Body).Decode(&body) != nil {
			return nil
		}
		var out []string
		for _, a := range body.Data.Alerts {
			if a.State == "firing" {
				out = append(out, a.Labels["alertname"]+" "+a.Labels["instance"]+a.Labels["shard"])
			}
		}
		slices.Sort(out)
		return out
	}
	scraped := func() bool {
		resp, err := http.Get("http://" + addr + "/api/v1/query?query=count(up%3D%3D1)")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var body struct {
			Data struct {
				Result []struct {
					Value []any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		return json.NewDecoder(resp.Body).Decode(&body) == nil && len(body.Data.Result) == 1 &&
			len(body.Data.Result[0].Value) == 2 && body.Data.Result[0].Value[1] == "3"
	}
	testkit.WaitTrue(t, 60*time.Second, "prometheus scraping the three nodes", scraped)
	checkDashboard(t, addr, c.nodes[0].AdminAddr)
	time.Sleep(5 * time.Second) // five evaluations of every rule on a healthy cluster
	if got := firing(); len(got) > 0 {
		t.Fatalf("alerts firing on a healthy cluster: %v", got)
	}
	tl.add("prometheus scrapes the three nodes; no alert fires")

	testkit.Fill(t, filler, lowDiskWatermark/2)
	tl.add("%s's disk filled below min_free_disk", low.ID)
	want := "SyncdDiskLow " + low.ID
	testkit.Wait(t, 60*time.Second, want, func() (bool, string) {
		got := firing()
		return slices.Contains(got, want), fmt.Sprint(got)
	})
	tl.add("%s fires", want)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}

	for _, n := range c.nodes[:2] {
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	tl.add("n1 and n2 killed")
	testkit.Wait(t, 60*time.Second, "node-down and no-leader alerts", func() (bool, string) {
		got := firing()
		down := slices.Contains(got, "SyncdNodeDown n1") && slices.Contains(got, "SyncdNodeDown n2")
		leaderless := slices.ContainsFunc(got, func(a string) bool { return strings.HasPrefix(a, "SyncdShardWithoutLeader ") })
		return down && leaderless && !slices.Contains(got, want), fmt.Sprint(got)
	})
	tl.add("firing: %v", firing())
}

// dashboardFile is the Grafana dashboard the project ships.
const dashboardFile = "../cmd/syncd/deploy/dashboard.json"

// checkDashboard checks every query of the shipped dashboard against a real Prometheus at prom
// (it parses and evaluates: no syntax or type error) and every metric it names against a real
// node's /metrics at admin (the node exports the family, so no panel stays empty for a typo).
func checkDashboard(t *testing.T, prom, admin string) {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	families := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) `).FindAllSubmatch(metrics, -1) {
		families[string(m[1])] = true
	}
	name := regexp.MustCompile(`syncd_[a-z_]+`)
	queries := 0
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			queries++
			for _, m := range name.FindAllString(target.Expr, -1) {
				family := m
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					if f := strings.TrimSuffix(m, suffix); f != m && families[f] {
						family = f
					}
				}
				if !families[family] {
					t.Errorf("panel %q queries %s, which the node does not export", p.Title, m)
				}
			}
			q := strings.ReplaceAll(target.Expr, "$instance", ".*")
			resp, err := http.Get("http://" + prom + "/api/v1/query?query=" + url.QueryEscape(q))
			if err != nil {
				t.Fatal(err)
			}
			var body struct {
				Status string `json:"status"`
				Error  string `json:"error"`
			}
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if err != nil || body.Status != "success" {
				t.Errorf("panel %q: query %q: %v %s", p.Title, q, err, body.Error)
			}
		}
	}
	if queries == 0 {
		t.Fatalf("%s has no queries", dashboardFile)
	}
}

// TestAlertRulesUnit runs promtool on the shipped alert rules: they parse, and every test of
// alerts_test.yml (each alert fires on its condition after its "for", none on a healthy cluster)
// passes.
func TestAlertRulesUnit(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("no promtool on PATH (apt-get install prometheus)")
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = filepath.Dir(alertRules)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// moveOntoSmallDisk moves n onto a small disk (moveDataOntoTmpfs) with min_free_disk
// lowDiskWatermark, restarts it and waits for the cluster to be ready; it returns the path of a
// file to fill that disk with.
func moveOntoSmallDisk(t *testing.T, c *testCluster, n *clusterNode) string {
	t.Helper()
	moveDataOntoTmpfs(t, n, "-min-free-disk", fmt.Sprint(lowDiskWatermark))
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	c.waitReady(60 * time.Second)
	return filepath.Join(n.Dir, "filler")
}
