package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
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
	if err := admin.call(ctx, http.MethodPost, "/v1/users/"+url.PathEscape(*user)+"/reset", &res); err != nil {
		e.reportAdmin(cmd, err)
		return exitFail
	}
	fmt.Fprintf(e.stdout, "%s: log reset, new epoch %d; the user's devices resync\n", *user, res.Epoch)
	return exitOK
}
