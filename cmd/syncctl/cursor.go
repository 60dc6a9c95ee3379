package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"text/tabwriter"

	"github.com/syncd-dev/syncd/proto/ident"
	"github.com/syncd-dev/syncd/syncd/adminapi"
)

func runCursor(ctx context.Context, e *env, args []string) int {
	const cmd = "cursor"
	f := newFlagSet(e, cmd, "-user uid [-admin host:port] [-json]", `
Shows a user's log as a replica of the user's shard has it (epoch, first retained and
last position) and, per device that has acknowledged a cursor, the position it has stored and how
many entries it is behind. A device that never acknowledged one is not listed; "epoch changed"
means the log was re-created since the device stored its cursor (it resyncs on its next sync).
Asks the node's admin HTTP server (GET /v1/cursors), which reads its own replica or, when it
hosts none, one on a node that does: any node of a cluster answers, and names the replica's node.`, `
syncctl cursor -user alice
syncctl cursor -user alice -json | jq .devices`)
	var admin adminFlags
	admin.register(f)
	user := f.String("user", "", "the user whose log and device cursors to show (required); \"<uid> <i>\" for sub-log i of a split user's stream")
	asJSON := f.Bool("json", false, "print the server's JSON answer")
	if code, ok := parse(e, f, args); !ok {
		return code
	}
	if !ident.ValidLog(*user) {
		e.errorf(cmd, "-user is required: a user id, or a sub-log's (\"<uid> <i>\", see -h)")
		return exitUsage
	}
	var rep adminapi.CursorReport
	if code, done := fetchReport(ctx, e, cmd, &admin, "/v1/cursors?user="+url.QueryEscape(*user), *asJSON, &rep); done {
		return code
	}
	if !rep.Exists {
		fmt.Fprintf(e.stdout, "user %s: no log yet on shard %d (nothing was ever delivered to this user)\n", rep.User, rep.Shard)
		return exitOK
	}
	fmt.Fprintf(e.stdout, "user %s: log on shard %d (node %s's replica): epoch %d, first %d, head %d\n",
		rep.User, rep.Shard, rep.Node, rep.Epoch, rep.First, rep.Head)
	if len(rep.Devices) == 0 {
		fmt.Fprintln(e.stdout, "no device has acknowledged a cursor")
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tCURSOR\tBEHIND")
	for _, d := range rep.Devices {
		switch {
		case d.Continues:
			fmt.Fprintf(tw, "%s\t%d (epoch %d)\tcontinues in the restored log's new epoch\n", d.Device, d.Pos, d.Epoch)
		case d.EpochChanged || d.Behind == nil:
			fmt.Fprintf(tw, "%s\t%d (epoch %d)\tepoch changed\n", d.Device, d.Pos, d.Epoch)
		default:
			fmt.Fprintf(tw, "%s\t%d\t%d\n", d.Device, d.Pos, *d.Behind)
		}
	}
	tw.Flush()
	return exitOK
}

// fetchReport GETs path from the admin server into out. With asJSON it prints the server's JSON
// instead. done reports that the command is over, with its exit code: after -json, or after an
// error (printed with what to do).
func fetchReport(ctx context.Context, e *env, cmd string, admin *adminFlags, path string, asJSON bool, out any) (code int, done bool) {
	var raw json.RawMessage
	if err := admin.Call(ctx, http.MethodGet, path, &raw); err != nil {
		e.reportAdmin(cmd, err)
		return exitFail, true
	}
	if asJSON {
		fmt.Fprintf(e.stdout, "%s\n", raw)
		return exitOK, true
	}
	if err := json.Unmarshal(raw, out); err != nil {
		e.errorf(cmd, "unexpected answer from %s%s: %v", admin.Base(), path, err)
		fmt.Fprintln(e.stderr, "  what to do: check that -admin names a syncd admin address, and that syncctl and syncd are the same release")
		return exitFail, true
	}
	return exitOK, false
}
