package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/syncd-dev/syncd/syncd/adminapi"
)

func runShard(ctx context.Context, e *env, args []string) int {
	const cmd = "shard"
	f := newFlagSet(e, cmd, "add [-admin host:port]", `
Grows the cluster's shards online, through any node's admin HTTP server.

  add   create a data shard: a new Raft group with the next shard id, placed on the nodes
        holding fewest replicas (as many as the replication factor). It owns no hash slot, so
        no key routes to it until slots or keys are moved to it. Watch it start with syncctl
        cluster status: CREATING until its group has a leader.`, `
syncctl shard add -admin 127.0.0.1:7381`)
	var admin adminFlags
	admin.register(f)
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			f.Usage()
			return exitOK
		}
		fmt.Fprintln(e.stderr, "syncctl shard: want a subcommand: add (see -h)")
		return exitUsage
	}
	sub, rest := args[0], args[1:]
	if code, ok := parse(e, f, rest); !ok {
		return code
	}
	if sub != "add" {
		fmt.Fprintf(e.stderr, "syncctl shard: want add, got %s (see -h)\n", sub)
		return exitUsage
	}
	var added adminapi.ShardAdded
	if err := admin.call(ctx, http.MethodPost, "/v1/shards", &added); err != nil {
		e.reportAdmin(cmd+" "+sub, err)
		return exitFail
	}
	fmt.Fprintf(e.stdout, "shard %d added; it owns no slots yet (syncctl cluster status shows its group starting)\n", added.Shard)
	return exitOK
}
