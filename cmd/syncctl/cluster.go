package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/syncd-dev/syncd/syncd/adminapi"
)

func runCluster(ctx context.Context, e *env, args []string) int {
	const cmd = "cluster"
	f := newFlagSet(e, cmd, "status [-admin host:port] [-json]", `
Shows the cluster as one node sees it: every node (its Raft, client and admin addresses, whether
it answered, how many shards it leads) and every shard (its leader, term and voters, and each
replica's commit and applied indexes and its lag behind the leader's log). Ask any node; a node
that cannot be reached is listed with the reason. Exits 1 if a node is unreachable or a shard has
no leader.`, `
syncctl cluster status -admin 127.0.0.1:7381`)
	var admin adminFlags
	admin.register(f)
	asJSON := f.Bool("json", false, "print the server's JSON answer")
	if len(args) == 0 || args[0] != "status" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			f.Usage()
			return exitOK
		}
		fmt.Fprintln(e.stderr, "syncctl cluster: want a subcommand: status (see -h)")
		return exitUsage
	}
	if code, ok := parse(e, f, args[1:]); !ok {
		return code
	}
	var view adminapi.ClusterView
	if err := admin.Call(ctx, http.MethodGet, "/v1/cluster", &view); err != nil {
		e.reportAdmin(cmd, err)
		return exitFail
	}
	if *asJSON {
		writeJSON(e, view)
	} else {
		printCluster(e, view)
	}
	healthy := true
	for _, n := range view.Nodes {
		healthy = healthy && n.Reachable
	}
	for _, s := range view.Shards {
		healthy = healthy && s.Leader != ""
	}
	if !healthy {
		return exitFail
	}
	return exitOK
}

func printCluster(e *env, view adminapi.ClusterView) {
	fmt.Fprintf(e.stdout, "as seen by node %s; replication factor %d, cluster map version %d\n\n", view.Node, view.RF, view.MapIndex)
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tRAFT\tCLIENTS\tADMIN\tREPLICAS\tLEADS\tSTATUS")
	for _, n := range view.Nodes {
		status := "up"
		if !n.Reachable {
			status = "UNREACHABLE: " + n.Error
		}
		if n.Removing {
			status += " (being removed)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", n.ID, n.RaftAddr, dash(n.ClientAddr), dash(n.AdminAddr), n.Placed, n.Leads, status)
	}
	tw.Flush()
	fmt.Fprintln(e.stdout)
	tw = tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tSLOTS\tLEADER\tTERM\tVOTERS\tPLACED\tREPLICA\tSTATE\tCOMMIT\tAPPLIED\tLAG")
	for _, s := range view.Shards {
		leader := s.Leader
		switch {
		case leader == "" && s.Creating:
			leader = "CREATING"
		case leader == "":
			leader = "NONE"
		}
		slots := dash(strings.Join(s.SlotRanges, ","))
		if len(s.Replicas) == 0 {
			fmt.Fprintf(tw, "%d\t%s\t%s\t-\t-\t%s\t-\t-\t-\t-\t-\n", s.Shard, slots, leader, strings.Join(s.Placed, ","))
		}
		for i, r := range s.Replicas {
			if i == 0 {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s", s.Shard, slots, leader, s.Term, strings.Join(s.Voters, ","), strings.Join(s.Placed, ","))
			} else {
				fmt.Fprint(tw, "\t\t\t\t\t")
			}
			fmt.Fprintf(tw, "\t%s\t%s\t%d\t%d\t%d\n", r.Node, r.State, r.Commit, r.Applied, r.Lag)
		}
	}
	tw.Flush()
	if len(view.Moves) > 0 {
		fmt.Fprintln(e.stdout)
		tw = tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "MOVE\tKEY\tFROM\tTO\tSTEP\tSTARTED")
		for _, mv := range view.Moves {
			key := "user " + mv.User
			switch {
			case mv.Subs != 0:
				key = fmt.Sprintf("split of user %s into %d", mv.User, mv.Subs)
			case mv.Slots != "":
				key = "slots " + mv.Slots
			case mv.Conv != "":
				key = "conv " + mv.Conv
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%s\n", mv.ID, key, mv.From, mv.To, mv.Step, mv.Started.Format(time.RFC3339))
		}
		tw.Flush()
	}
	if n, c := len(view.Overrides), len(view.ConvOverrides); n+c > 0 {
		fmt.Fprintf(e.stdout, "\n%d users and %d conversations pinned to a shard by a move (-json lists them)\n", n, c)
	}
	if len(view.Splits) > 0 {
		fmt.Fprintln(e.stdout, "\nSPLIT USERS (sub-log shards, from the user's own log on)")
		for _, uid := range slices.Sorted(maps.Keys(view.Splits)) {
			shards := view.Splits[uid]
			fmt.Fprintf(e.stdout, "  %s: %d sub-logs on shards %s\n", uid, len(shards), strings.Trim(fmt.Sprint(shards), "[]"))
		}
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
