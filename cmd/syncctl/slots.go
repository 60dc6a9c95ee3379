package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

func runSlots(ctx context.Context, e *env, args []string) int {
	const cmd = "slots"
	f := newFlagSet(e, cmd, "move <first>-<last> (-to <shard> | -new-shard) [-admin host:port]", `
Moves a range of hash slots to another shard online, through any node's admin HTTP server.
Every user's log and every conversation of those slots that their shard holds moves with it,
keeping positions, epochs, device cursors, conv_seqs, msg_ids and dedup records, then the slot
table gives the range to the destination. The slots must all be one shard's (syncctl cluster
status shows each shard's ranges). Writes to the range's keys pause for the move's last steps
and are answered with a retry-after meanwhile. Watch it with syncctl cluster status (MOVES).

  move <first>-<last> -to <shard>   move the slots to that shard
  move <first>-<last> -new-shard    add a shard and move them there`, `
syncctl slots move 3072-4095 -to 5
syncctl slots move 0-99 -new-shard`)
	to := f.Uint("to", 0, "the shard to move the slots to")
	fresh := f.Bool("new-shard", false, "add a shard and move the slots there")
	var admin adminFlags
	admin.register(f)
	if len(args) < 2 || args[0] != "move" || strings.HasPrefix(args[1], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			f.Usage()
			return exitOK
		}
		fmt.Fprintln(e.stderr, "syncctl slots: want move <first>-<last> with -to <shard> or -new-shard (see -h)")
		return exitUsage
	}
	span := args[1]
	if code, ok := parse(e, f, args[2:]); !ok {
		return code
	}
	set := map[string]bool{}
	f.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if set["to"] == *fresh || set["to"] && *to == 0 {
		fmt.Fprintln(e.stderr, "syncctl slots move: give either -to <shard> (1 or more) or -new-shard")
		return exitUsage
	}
	path := "/v1/moves?slots=" + url.QueryEscape(span)
	if *fresh {
		path += "&new_shard=1"
	} else {
		path += "&to=" + strconv.FormatUint(uint64(*to), 10)
	}
	return startMove(ctx, e, &admin, cmd+" move", path)
}
