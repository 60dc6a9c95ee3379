package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/syncd-dev/syncd/proto/ident"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/auth"
)

func runResetUser(ctx context.Context, e *env, args []string) int {
	const cmd = "reset-user"
	f := newFlagSet(e, cmd, "-user uid -yes [-admin host:port]", `
Drops the whole sync log of a user and its device cursors, and restarts the log empty under a
new epoch. Conversations are untouched. Every device of the user is told "epoch changed" and
resyncs from the start of the new log, keeping its local history. Use it when a user's log must
be rebuilt or erased; it cannot be undone, hence -yes.`, `
syncctl reset-user -user bob -yes`)
	var admin adminFlags
	admin.register(f)
	user := f.String("user", "", "the user whose log to reset (required)")
	yes := f.Bool("yes", false, "confirm: the user's log entries are deleted")
	if code, ok := parse(e, f, args); !ok {
		return code
	}
	if *user == "" || !*yes {
		fmt.Fprintln(e.stderr, "syncctl reset-user: needs -user and -yes (the log's entries are deleted)")
		return exitUsage
	}
	var res struct {
		Epoch uint64 `json:"epoch"`
	}
	if err := admin.Call(ctx, http.MethodPost, "/v1/users/"+url.PathEscape(*user)+"/reset", &res); err != nil {
		e.reportAdmin(cmd, err)
		return exitFail
	}
	fmt.Fprintf(e.stdout, "%s: log reset, new epoch %d; the user's devices resync\n", *user, res.Epoch)
	return exitOK
}

func runRevokeDevice(ctx context.Context, e *env, args []string) int {
	const cmd = "revoke-device"
	f := newFlagSet(e, cmd, "-user uid -device id [-admin host:port]", `
Revokes a device: every node of the cluster closes its sessions now and refuses its tokens
issued up to this second plus 30 s, the clock skew a token's issue time may have (unauthenticated,
"revoked"). Tokens issued later are accepted, so a device comes back only when your token service
gives it a new one, 30 s after the revocation at the earliest: stop minting for a lost or stolen
device first. The revocation is replicated (the meta shard): it holds on every node and across
restarts, and is forgotten once max_token_lifetime has passed, when no token it covers can still
be valid.`, `
syncctl revoke-device -user alice -device phone`)
	var admin adminFlags
	admin.register(f)
	user := f.String("user", "", "the user whose device to revoke (required)")
	device := f.String("device", "", "the device to revoke (required)")
	if code, ok := parse(e, f, args); !ok {
		return code
	}
	if *user == "" || *device == "" {
		fmt.Fprintln(e.stderr, "syncctl revoke-device: needs -user and -device")
		return exitUsage
	}
	var res adminapi.Revocation
	path := "/v1/users/" + url.PathEscape(*user) + "/devices/" + url.PathEscape(*device) + "/revoke"
	if err := admin.Call(ctx, http.MethodPost, path, &res); err != nil {
		e.reportAdmin(cmd, err)
		return exitFail
	}
	fmt.Fprintf(e.stdout, "%s/%s: revoked; its sessions close and its tokens issued up to %s are refused (kept until %s)\n",
		res.User, res.Device, time.Unix(res.Before, 0).Add(auth.MaxClockSkew).UTC().Format(time.RFC3339), time.Unix(res.Until, 0).UTC().Format(time.RFC3339))
	return exitOK
}

func runSplitUser(ctx context.Context, e *env, args []string) int {
	const cmd = "split-user"
	f := newFlagSet(e, cmd, "-user uid -subs k [-admin host:port]", `
Splits a user's stream into k sub-logs, online, for a user whose deliveries one shard cannot
take (a bot receiving from millions). Each conversation's entries for the user go to one
sub-log from then on: sub-log 0 is the user's own log, with every entry so far; sub-log i is the
log "<uid> i", on the shard its id hashes to (move it like a user's: syncctl move user "<uid> i"
-new-shard). The user's devices sync every sub-log on one stream under a vector cursor
(docs/PROTOCOL.md, "Sub-logs"); a client that does not send one is refused with
needs_upgrade. A split cannot be undone; watch it with syncctl cluster status.`, `
syncctl split-user -user support-bot -subs 4`)
	var admin adminFlags
	admin.register(f)
	user := f.String("user", "", "the user whose stream to split (required)")
	subs := f.Int("subs", 0, fmt.Sprintf("the number of sub-logs, 2 to %d (required)", ident.MaxSubLogs))
	if code, ok := parse(e, f, args); !ok {
		return code
	}
	if *user == "" || *subs < 2 || *subs > ident.MaxSubLogs {
		fmt.Fprintf(e.stderr, "syncctl split-user: needs -user and -subs (2 to %d)\n", ident.MaxSubLogs)
		return exitUsage
	}
	return startMove(ctx, e, &admin, cmd, "/v1/users/"+url.PathEscape(*user)+"/split?subs="+strconv.Itoa(*subs))
}
