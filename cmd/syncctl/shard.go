package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/syncd-dev/syncd/syncd/adminapi"
)

func runShard(ctx context.Context, e *env, args []string) int {
	const cmd = "shard"
	f := newFlagSet(e, cmd, "add | split <shard> [-admin host:port]", `
Grows the cluster's shards online, through any node's admin HTTP server.

  add            create a data shard: a new Raft group with the next shard id, placed on the
                 nodes holding fewest replicas (as many as the replication factor). It owns no
                 hash slot, so no key routes to it until slots or keys are moved to it. Watch it
                 start with syncctl cluster status: CREATING until its group has a leader.
  split <shard>  add a shard and move the upper half of the shard's slot range to it (of its
                 largest range, if it owns several): every user and conversation of those
                 slots moves with their positions, cursors and msg_ids, online, as syncctl slots
                 move does. Watch it with syncctl cluster status (MOVES).`, `
syncctl shard add -admin 127.0.0.1:7381
syncctl shard split 1`)
	var admin adminFlags
	admin.register(f)
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			f.Usage()
			return exitOK
		}
		fmt.Fprintln(e.stderr, "syncctl shard: want a subcommand: add or split <shard> (see -h)")
		return exitUsage
	}
	sub, rest := args[0], args[1:]
	if sub == "split" {
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
			fmt.Fprintln(e.stderr, "syncctl shard split: want the shard to split, e.g. syncctl shard split 1 (see -h)")
			return exitUsage
		}
		id, err := strconv.ParseUint(rest[0], 10, 32)
		if err != nil || id == 0 {
			fmt.Fprintf(e.stderr, "syncctl shard split: %q is not a data shard id (syncctl cluster status lists them)\n", rest[0])
			return exitUsage
		}
		if code, ok := parse(e, f, rest[1:]); !ok {
			return code
		}
		return startMove(ctx, e, &admin, cmd+" split", "/v1/shards/"+rest[0]+"/split")
	}
	if code, ok := parse(e, f, rest); !ok {
		return code
	}
	if sub != "add" {
		fmt.Fprintf(e.stderr, "syncctl shard: want add or split, got %s (see -h)\n", sub)
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
