package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/syncd/adminapi"
)

func runTrace(ctx context.Context, e *env, args []string) int {
	const cmd = "trace"
	f := newFlagSet(e, cmd, "[-admin host:port] [-user uid] [-scan N] [-json] msg_id", `
Shows where a message went: its conversation entry on its home shard, whether the outbox still
holds it for fan-out, and for each member of the conversation (and each recipient the outbox
names) whether the user's log holds it and at which position, or why not yet, and which of the
user's devices have stored their log past it. Asks the node's admin HTTP server (GET /v1/trace),
which reads each shard concerned on a replica wherever one is: any node of a cluster answers.`, `
syncctl trace 3.17.0
syncctl trace -user bob -scan 10000 3.17.0`)
	var admin adminFlags
	admin.register(f)
	user := f.String("user", "", "trace only this user")
	scan := f.Int("scan", adminapi.DefaultTraceScan, fmt.Sprintf("read at most this many entries of each user's log, newest first (at most %d)", adminapi.MaxTraceScan))
	asJSON := f.Bool("json", false, "print the server's JSON answer")
	var ids []string // flags and the msg_id may come in any order
	for rest := args; ; {
		if err := f.Parse(rest); errors.Is(err, flag.ErrHelp) {
			return exitOK
		} else if err != nil {
			return exitUsage
		}
		if f.NArg() == 0 {
			break
		}
		ids, rest = append(ids, f.Arg(0)), f.Args()[1:]
	}
	switch {
	case len(ids) != 1:
		e.errorf(cmd, "want one msg_id (shard.index.sub, as printed by send or pull), got %d arguments (see -h)", len(ids))
		return exitUsage
	case !proto.MsgID(ids[0]).Valid():
		e.errorf(cmd, "%q is not a msg_id (shard.index.sub, as printed by send or pull)", ids[0])
		return exitUsage
	case *scan < 1 || *scan > adminapi.MaxTraceScan:
		e.errorf(cmd, "-scan must be between 1 and %d", adminapi.MaxTraceScan)
		return exitUsage
	}
	q := url.Values{"msg_id": {ids[0]}, "scan": {strconv.Itoa(*scan)}}
	if *user != "" {
		q.Set("user", *user)
	}
	var rep adminapi.TraceReport
	if code, done := fetchReport(ctx, e, cmd, &admin, "/v1/trace?"+q.Encode(), *asJSON, &rep); done {
		return code
	}
	printTrace(e, &rep)
	return exitOK
}

func printTrace(e *env, r *adminapi.TraceReport) {
	w := e.stdout
	fmt.Fprintf(w, "message %s: %s conversation %s, conv_seq %d, home shard %d (node %s's replica)\n",
		r.MsgID, r.ConvKind, r.Conv, r.ConvSeq, r.HomeShard, r.Node)
	if en := r.Entry; en != nil {
		fmt.Fprintf(w, "  entry: %s from %s at %s", en.Kind, en.Sender, time.Unix(0, en.Time).UTC().Format(time.RFC3339Nano))
		switch {
		case en.Kind == "message":
			fmt.Fprintf(w, ", %d bytes", en.BodyBytes)
		case en.Kind == "delivered": // ReadUpTo is the sender's delivered mark, nothing read
			fmt.Fprintf(w, ", stored up to %d", en.ReadUpTo)
		case en.ReadUpTo != 0:
			fmt.Fprintf(w, ", read up to %d", en.ReadUpTo)
		case en.Target != "":
			fmt.Fprintf(w, ", target %s", en.Target)
		case len(en.Members) > 0:
			fmt.Fprintf(w, ", members %s", strings.Join(en.Members, ","))
		}
		if r.Recalled {
			fmt.Fprint(w, ", RECALLED")
		}
		if en.Source == "outbox" {
			fmt.Fprint(w, " (trimmed from the history; the outbox's copy)")
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintln(w, "  entry: trimmed from the history and the outbox")
	}
	if ob := r.Outbox; ob.Retained {
		fmt.Fprintf(w, "  outbox: waiting for fan-out at position %d (retained %d..%d), recipients %s\n",
			ob.Pos, ob.First, ob.Head, strings.Join(ob.Recipients, ","))
	} else {
		fmt.Fprintln(w, "  outbox: trimmed: fan-out has passed it on every shard")
	}
	for _, u := range r.Users {
		var tags []string
		if !u.Member {
			tags = append(tags, "not a member now")
		}
		if u.Recipient != nil && !*u.Recipient {
			tags = append(tags, "not a recipient")
		}
		if u.Node != "" && u.Node != r.Node { // read on another node than the home shard
			tags = append(tags, fmt.Sprintf("node %s's replica", u.Node))
		}
		fmt.Fprintf(w, "user %s (shard %d", u.User, u.Shard)
		if len(tags) > 0 {
			fmt.Fprintf(w, "; %s", strings.Join(tags, "; "))
		}
		fmt.Fprint(w, "): ")
		switch u.Status {
		case adminapi.TraceDelivered:
			fmt.Fprintf(w, "delivered at position %d (log epoch %d, head %d)\n", u.Pos, u.Epoch, u.Head)
		case adminapi.TraceUnavailable:
			fmt.Fprintf(w, "unknown: %s\n", u.Note)
			continue
		default:
			fmt.Fprintf(w, "not delivered (%s): %s; read %d of its entries (log head %d)\n", u.Status, u.Note, u.Scanned, u.Head)
		}
		if len(u.Devices) == 0 {
			fmt.Fprintln(w, "  no device has acknowledged a cursor")
		}
		for _, d := range u.Devices {
			state := "past it"
			switch {
			case d.Past:
			case d.Epoch != u.Epoch:
				state = fmt.Sprintf("not past it (cursor of another epoch, %d)", d.Epoch)
			default:
				state = "not past it"
			}
			fmt.Fprintf(w, "  device %s: cursor %d, %s\n", d.Device, d.Pos, state)
		}
	}
	if r.UsersTruncated {
		fmt.Fprintf(w, "(only the first %d users are shown; use -user to trace one)\n", len(r.Users))
	}
}
