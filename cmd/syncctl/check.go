package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// runbook names the operator's guide to a check's findings.
const runbook = `docs/OPERATIONS.md, "Replica checksums"`

// runShardCheck checks the replicas of the shards at path (POST /v1/shards/check, or
// /v1/shards/{id}/check), waiting wait for their checksums, prints the report (as JSON with
// asJSON) and, on stderr, what to do about what it found. Its exit code: exitOK when every
// replica of every shard agreed, exitFail on a mismatch, a replica that could not read its state
// or a shard the check could not start on, exitIncomplete when no replica differs but some gave
// no checksum in time.
func runShardCheck(ctx context.Context, e *env, admin *adminFlags, path string, wait time.Duration, asJSON bool) int {
	const cmd = "shard check"
	if wait <= 0 || wait > adminapi.MaxCheckWait {
		e.errorf(cmd, "-wait %v: want a duration above 0 and at most %v", wait, adminapi.MaxCheckWait)
		return exitUsage
	}
	// The node answers once the wait is over: the HTTP request must outlast it.
	*admin.timeout = max(*admin.timeout, wait+10*time.Second)
	var rep adminapi.ReplicaCheckReport
	if err := admin.Call(ctx, http.MethodPost, path+"?wait="+wait.String(), &rep); err != nil {
		e.reportAdmin(cmd, err)
		return exitFail
	}
	if asJSON {
		writeJSON(e, rep)
	} else {
		printShardCheck(e, rep)
	}
	return adviseShardCheck(e, rep)
}

func printShardCheck(e *env, rep adminapi.ReplicaCheckReport) {
	fmt.Fprintf(e.stdout, "replica check by node %s: each replica's checksum of its state at the check's Raft index\n\n", rep.Node)
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tINDEX\tVERDICT\tREPLICA\tSTATE\tSTATUS\tCHECKSUM\tKEYS\tNOTE")
	for _, s := range rep.Shards {
		verdict := strings.ToUpper(s.Verdict)
		if s.Verdict == adminapi.CheckAgree {
			verdict = s.Verdict
		}
		if len(s.Replicas) == 0 {
			fmt.Fprintf(tw, "%d\t%s\t%s\t-\t-\t-\t-\t-\t%s\n", s.Shard, index(s.Index), verdict, s.Error)
		}
		for i, r := range s.Replicas {
			if i == 0 {
				fmt.Fprintf(tw, "%d\t%s\t%s", s.Shard, index(s.Index), verdict)
			} else {
				fmt.Fprint(tw, "\t\t")
			}
			status := r.Status
			if r.Status != adminapi.ReplicaMatch {
				status = strings.ToUpper(status)
			}
			keys := "-"
			if r.Checksum != "" {
				keys = fmt.Sprint(r.Keys)
			}
			fmt.Fprintf(tw, "\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Node, dash(r.State), status, dash(r.Checksum), keys, r.Note)
		}
	}
	tw.Flush()
}

// index prints a check's Raft index, "-" when it was not started.
func index(i uint64) string {
	if i == 0 {
		return "-"
	}
	return fmt.Sprint(i)
}

// adviseShardCheck prints on stderr what to do about each shard the check did not find in
// agreement, and returns the command's exit code.
func adviseShardCheck(e *env, rep adminapi.ReplicaCheckReport) int {
	code := exitOK
	fail := func() { code = exitFail }
	incomplete := func() {
		if code == exitOK {
			code = exitIncomplete
		}
	}
	for _, s := range rep.Shards {
		var differ, unsure, broken []string
		matches := 0
		for _, r := range s.Replicas {
			switch r.Status {
			case adminapi.ReplicaMatch:
				matches++
			case adminapi.ReplicaDiffers:
				differ = append(differ, r.Node)
			case adminapi.ReplicaFailed:
				broken = append(broken, fmt.Sprintf("%s (%s)", r.Node, r.Note))
			case adminapi.ReplicaPending, adminapi.ReplicaMissed:
				unsure = append(unsure, fmt.Sprintf("%s (%s: %s)", r.Node, r.Status, r.Note))
			}
		}
		switch {
		case s.Verdict == adminapi.CheckFailed:
			fail()
			e.errorf("shard check", "shard %d: the check could not start: %s", s.Shard, s.Error)
			fmt.Fprintf(e.stderr, "  what to do: syncctl cluster status shows whether the shard has a leader; a refusal of \"op 10\" "+
				"means its leader runs a build without replica checks: upgrade it, then check again\n")
		case s.Verdict == adminapi.CheckMismatch && matches == 0: // the server marks them all when no majority agrees
			fail()
			e.errorf("shard check", "MISMATCH: shard %d: replicas %s hold different state at Raft index %d, and no majority of "+
				"the replicas agrees, so none can be told right", s.Shard, strings.Join(differ, ", "), s.Index)
			fmt.Fprintf(e.stderr, "  what to do: check again once every replica has answered; if no majority agrees then either, "+
				"change nothing and follow %s\n", runbook)
		case s.Verdict == adminapi.CheckMismatch:
			fail()
			e.errorf("shard check", "MISMATCH: shard %d: the replica on %s holds other state than the majority at Raft index %d: "+
				"its copy cannot be trusted", s.Shard, strings.Join(differ, " and on "), s.Index)
			fmt.Fprintf(e.stderr, "  what to do: replace it: syncctl node remove %s; once syncctl cluster status shows it holding "+
				"nothing, stop it, move its data directory aside (keep its certificate files) and start it again with -join, "+
				"so that it copies every replica from its leader (%s)\n", differ[0], runbook)
		}
		if len(broken) > 0 {
			fail()
			e.errorf("shard check", "shard %d: %s could not read its own state", s.Shard, strings.Join(broken, ", "))
			fmt.Fprintf(e.stderr, "  what to do: look at that node's log and disk; replace the replica as for a mismatch (%s)\n", runbook)
		}
		if len(unsure) > 0 && s.Verdict != adminapi.CheckFailed {
			incomplete()
			e.errorf("shard check", "shard %d: no checksum from %s; not a mismatch", s.Shard, strings.Join(unsure, "; "))
			fmt.Fprintf(e.stderr, "  what to do: check again (a longer -wait for a large shard or a node catching up)\n")
		}
	}
	return code
}
