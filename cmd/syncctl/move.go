package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/syncd-dev/syncd/syncd/adminapi"
)

func runMove(ctx context.Context, e *env, args []string) int {
	const cmd = "move"
	f := newFlagSet(e, cmd, "(user <uid> | conv <conversation id>) (-to <shard> | -new-shard) | cancel <move id> [-admin host:port]", `
Moves a user's log or a conversation to another shard online, through any node's admin HTTP
server. A user's log keeps its entries, positions, epoch, device cursors and group count; a
conversation its entries, conv_seqs, msg_ids, members, read marks and dedup records. Devices keep
syncing from their cursors. Writes to what moves (a user's cursor acks; a conversation's sends,
receipts and member changes) pause for the move's last steps, well under a second, and are
answered with a retry-after meanwhile. Watch it with syncctl cluster status (MOVES).

  user <uid> -to <shard>      move the user's log to that shard
  user <uid> -new-shard       add a shard and move it there: a hot account on a shard of its own
  conv <id> -to <shard>       move the conversation (its home, where its order is decided)
  conv <id> -new-shard        add a shard and move it there: a hot group on a shard of its own
  cancel <move id>            cancel a move that is still copying (its step is copy); after that
                              the move only goes forward`, `
syncctl move user support-bot -new-shard
syncctl move conv all-hands -new-shard
syncctl move user alice -to 3
syncctl move cancel 4711`)
	to := f.Uint("to", 0, "the shard to move to")
	fresh := f.Bool("new-shard", false, "add a shard for the user and move it there")
	var admin adminFlags
	admin.register(f)
	if len(args) >= 2 && args[0] == "cancel" && !strings.HasPrefix(args[1], "-") {
		if code, ok := parse(e, f, args[2:]); !ok {
			return code
		}
		if _, err := strconv.ParseUint(args[1], 10, 64); err != nil {
			fmt.Fprintf(e.stderr, "syncctl move cancel: %q is not a move id (syncctl cluster status lists them)\n", args[1])
			return exitUsage
		}
		if err := admin.Call(ctx, http.MethodPost, "/v1/moves/"+args[1]+"/cancel", nil); err != nil {
			e.reportAdmin(cmd+" cancel", err)
			return exitFail
		}
		fmt.Fprintf(e.stdout, "move %s canceled; its destination drops what it copied\n", args[1])
		return exitOK
	}
	if len(args) < 2 || args[0] != "user" && args[0] != "conv" || strings.HasPrefix(args[1], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			f.Usage()
			return exitOK
		}
		fmt.Fprintln(e.stderr, "syncctl move: want user <uid> or conv <conversation id>, with -to <shard> or -new-shard, or cancel <move id> (see -h)")
		return exitUsage
	}
	kind, key := args[0], args[1]
	if code, ok := parse(e, f, args[2:]); !ok {
		return code
	}
	set := map[string]bool{}
	f.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if set["to"] == *fresh || set["to"] && *to == 0 {
		fmt.Fprintln(e.stderr, "syncctl move: give either -to <shard> (1 or more) or -new-shard")
		return exitUsage
	}
	path := "/v1/moves?" + kind + "=" + url.QueryEscape(key)
	if *fresh {
		path += "&new_shard=1"
	} else {
		path += "&to=" + strconv.FormatUint(uint64(*to), 10)
	}
	return startMove(ctx, e, &admin, cmd, path)
}

// startMove asks the admin server for the move path names and reports it.
func startMove(ctx context.Context, e *env, admin *adminFlags, cmd, path string) int {
	var started adminapi.MoveStarted
	if err := admin.Call(ctx, http.MethodPost, path, &started); err != nil {
		e.reportAdmin(cmd, err)
		return exitFail
	}
	what := "user " + started.User
	switch {
	case started.Subs != 0:
		fmt.Fprintf(e.stdout, "move %d: split of user %s into %d sub-logs started (syncctl cluster status shows its step)\n",
			started.ID, started.User, started.Subs)
		return exitOK
	case started.Slots != "":
		what = "slots " + started.Slots
	case started.Conv != "":
		what = "conversation " + started.Conv
	}
	fmt.Fprintf(e.stdout, "move %d: %s from shard %d to shard %d started (syncctl cluster status shows its step)\n",
		started.ID, what, started.From, started.To)
	return exitOK
}
