package conformance

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// The control API, for drivers in any language (docs/CONFORMANCE.md):
//
//	GET  /v1/scenarios              the scenarios: name, section, what the kit does, what a correct client does
//	POST /v1/runs                   {"scenario": name} → RunInfo: start a run
//	POST /v1/runs/{run}/token       → {"token": …}: a fresh token for the run's device
//	POST /v1/runs/{run}/report      a Report → the Verdict so far ("pending" until the run is judged)
//	GET  /v1/runs/{run}             → the Verdict so far, without a new report
//	GET  /v1/results                → every run's Verdict, in the order they started
//
// Errors are {"error": message} with a 4xx status.

// maxReportBytes bounds a report: a run's conversation holds about a hundred messages.
const maxReportBytes = 1 << 20

// ScenarioInfo describes a scenario (GET /v1/scenarios).
type ScenarioInfo struct {
	Name    string `json:"name"`
	Section string `json:"section"`
	Summary string `json:"summary"`
	Correct string `json:"correct"`
}

// Scenarios lists the kit's scenarios in the order a full pass runs them.
func Scenarios() []ScenarioInfo {
	out := make([]ScenarioInfo, len(scenarios))
	for i, sc := range scenarios {
		out[i] = ScenarioInfo{Name: sc.name, Section: sc.section, Summary: sc.summary, Correct: sc.correct}
	}
	return out
}

func (k *Kit) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/scenarios", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, Scenarios())
	})
	mux.HandleFunc("POST /v1/runs", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Scenario string `json:"scenario"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
			writeErr(w, http.StatusBadRequest, "the body must be {\"scenario\": name}: "+err.Error())
			return
		}
		sc := scenarioByName(req.Scenario)
		if sc == nil {
			writeErr(w, http.StatusNotFound, fmt.Sprintf("no scenario %q; the scenarios are %s", req.Scenario, scenarioNames()))
			return
		}
		run, err := k.newRun(sc)
		if err != nil {
			writeErr(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, k.info(run))
	})
	mux.HandleFunc("POST /v1/runs/{run}/token", func(w http.ResponseWriter, r *http.Request) {
		run := k.run(w, r)
		if run == nil {
			return
		}
		tok, err := k.issue(run, time.Hour)
		if err != nil {
			writeErr(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"token": tok})
	})
	mux.HandleFunc("POST /v1/runs/{run}/report", func(w http.ResponseWriter, r *http.Request) {
		run := k.run(w, r)
		if run == nil {
			return
		}
		var rep Report
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxReportBytes)).Decode(&rep); err != nil {
			writeErr(w, http.StatusBadRequest, "the body must be a report (docs/CONFORMANCE.md): "+err.Error())
			return
		}
		writeJSON(w, http.StatusOK, k.judged(run, &rep))
	})
	mux.HandleFunc("GET /v1/runs/{run}", func(w http.ResponseWriter, r *http.Request) {
		if run := k.run(w, r); run != nil {
			writeJSON(w, http.StatusOK, k.judged(run, nil))
		}
	})
	mux.HandleFunc("GET /v1/results", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, k.Results())
	})
	return mux
}

// judged judges a run and, the first time its verdict is final, prints it.
func (k *Kit) judged(r *run, rep *Report) *Verdict {
	v := r.judge(rep)
	if v.Status != Pending && r.printed.CompareAndSwap(false, true) {
		fmt.Fprintln(k.cfg.Out, v.summary())
		k.cfg.Logger.Info("conformance run judged", "run", v.Run, "scenario", v.Scenario, "status", v.Status, "reasons", v.Reasons)
		r.later(func(*Kit) error { r.retire(); return nil }) // a restored server of the run's own is done
	}
	return v
}

// Results returns every run's verdict so far, in the order the runs started.
func (k *Kit) Results() []*Verdict {
	k.mu.Lock()
	runs := make([]*run, 0, len(k.runs))
	for _, r := range k.runs {
		runs = append(runs, r)
	}
	k.mu.Unlock()
	slices.SortFunc(runs, func(a, b *run) int { return a.created.Compare(b.created) })
	out := make([]*Verdict, len(runs))
	for i, r := range runs {
		out[i] = k.judged(r, nil)
	}
	return out
}

func (k *Kit) run(w http.ResponseWriter, r *http.Request) *run {
	k.mu.Lock()
	run := k.runs[r.PathValue("run")]
	k.mu.Unlock()
	if run == nil {
		writeErr(w, http.StatusNotFound, fmt.Sprintf("no run %q: start one with POST /v1/runs", r.PathValue("run")))
	}
	return run
}

func (k *Kit) info(r *run) RunInfo {
	base := k.ControlURL() + "/v1/runs/" + r.id
	var web string
	var hashes []string
	if k.web != nil {
		web = k.web.UDPAddr().String()
		for _, c := range k.webCert.Published() {
			hashes = append(hashes, c.SHA256)
		}
	}
	return RunInfo{Web: web, CertHashes: hashes,
		Run: r.id, Scenario: r.sc.name, Section: r.sc.section, Summary: r.sc.summary, Correct: r.sc.correct,
		Addr: k.Addr(), Fingerprint: k.Fingerprint(), User: r.user, Device: r.device, Token: r.firstToken,
		TokenURL: base + "/token", ReportURL: base + "/report", Conv: r.conv, Peer: r.other, Sends: r.sends,
		TimeoutMs: k.cfg.RunTimeout.Milliseconds(),
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
