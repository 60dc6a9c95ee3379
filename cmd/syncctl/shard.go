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
	f := newFlagSet(e, cmd, "add | split <shard> | check [<shard>] [-wait 10s] [-json] [-admin host:port]", `
Grows the cluster's shards online, and checks that their replicas agree, through any node's
admin HTTP server.

  add            create a data shard: a new Raft group with the next shard id, placed on the
                 nodes holding fewest replicas (as many as the replication factor). It owns no
                 hash slot, so no key routes to it until slots or keys are moved to it. Watch it
                 start with syncctl cluster status: CREATING until its group has a leader.
  split <shard>  add a shard and move the upper half of the shard's slot range to it (of its
                 largest range, if it owns several): every user and conversation of those
                 slots moves with their positions, cursors and msg_ids, online, as syncctl slots
                 move does. Watch it with syncctl cluster status (MOVES).
  check [<shard>]
                 check that every replica of the shard (of every data shard, without one) holds
                 the same state: a checksum command goes through the shard's Raft log, and each
                 replica checksums its state at that entry's index, in the background. Prints
                 each replica's checksum and whether they agree, and what to do about a replica
                 that differs. Reads every replica's whole state once: run it after an incident,
                 a disk problem or an upgrade, or now and then, not in a loop. Exits 0 when every
                 replica agrees, 1 on a mismatch (or a check that could not run), 3 when none
                 differs but some replica gave no checksum within -wait (check again).`, `
syncctl shard add -admin 127.0.0.1:7381
syncctl shard split 1
syncctl shard check
syncctl shard check 2 -wait 30s`)
	var admin adminFlags
	admin.register(f)
	wait := f.Duration("wait", adminapi.DefaultCheckWait, "check: how long the node waits for every replica's checksum (at most "+adminapi.MaxCheckWait.String()+")")
	asJSON := f.Bool("json", false, "check: print the server's JSON answer")
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			f.Usage()
			return exitOK
		}
		fmt.Fprintln(e.stderr, "syncctl shard: want a subcommand: add, split <shard> or check [<shard>] (see -h)")
		return exitUsage
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "split":
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
			fmt.Fprintln(e.stderr, "syncctl shard split: want the shard to split, e.g. syncctl shard split 1 (see -h)")
			return exitUsage
		}
		if !validShard(e, sub, rest[0]) {
			return exitUsage
		}
		if code, ok := parse(e, f, rest[1:]); !ok {
			return code
		}
		return startMove(ctx, e, &admin, cmd+" split", "/v1/shards/"+rest[0]+"/split")
	case "check":
		path := "/v1/shards/check"
		if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
			if !validShard(e, sub, rest[0]) {
				return exitUsage
			}
			path, rest = "/v1/shards/"+rest[0]+"/check", rest[1:]
		}
		if code, ok := parse(e, f, rest); !ok {
			return code
		}
		return runShardCheck(ctx, e, &admin, path, *wait, *asJSON)
	}
	if code, ok := parse(e, f, rest); !ok {
		return code
	}
	if sub != "add" {
		fmt.Fprintf(e.stderr, "syncctl shard: want add, split or check, got %s (see -h)\n", sub)
		return exitUsage
	}
	var added adminapi.ShardAdded
	if err := admin.Call(ctx, http.MethodPost, "/v1/shards", &added); err != nil {
		e.reportAdmin(cmd+" "+sub, err)
		return exitFail
	}
	fmt.Fprintf(e.stdout, "shard %d added; it owns no slots yet (syncctl cluster status shows its group starting)\n", added.Shard)
	return exitOK
}

// validShard reports whether arg names a data shard (a number from 1), and says so if not.
func validShard(e *env, sub, arg string) bool {
	if id, err := strconv.ParseUint(arg, 10, 32); err != nil || id == 0 {
		fmt.Fprintf(e.stderr, "syncctl shard %s: %q is not a data shard id (syncctl cluster status lists them)\n", sub, arg)
		return false
	}
	return true
}
