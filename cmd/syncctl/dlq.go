package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/syncd-dev/syncd/syncd/adminapi"
)

func runDLQ(ctx context.Context, e *env, args []string) int {
	const cmd = "dlq"
	f := newFlagSet(e, cmd, "list|replay|drop [-admin host:port] [-archived] [-all | id...]", `
Dead letters are deliveries a destination shard refused, set aside so that the rest of the
stream goes on (they never vanish). Each is held by the source shard of the delivery; this talks
to a node's admin HTTP server, which lists, replays and drops those of every shard of the cluster,
hosted there or not.

  list            print them: id, message, users who did not get it, when and why, the
                  reason's class and the automatic replays (attempts, next try)
  replay id...    deliver them now (after fixing the cause); a repeated replay never duplicates
  drop id...      forget them without delivering
  -all            with replay or drop: every dead letter listed (up to -limit)
  -archived       list (or with -all, replay or drop) the archived ones instead of the held

Each shard's leader replays retryable dead letters by itself, with backoff, up to
dead_letter_retry_max_attempts; the rest, and those it gave up, wait for you. Those not retried
move to an archive after dead_letter_archive_after; replay and drop take held and archived ids.

A replayed entry arrives after the entries that followed it in the conversation; clients order a
conversation by conv_seq.`, `
syncctl dlq list
syncctl dlq replay 1-2-17
syncctl dlq drop -all`)
	var admin adminFlags
	admin.register(f)
	limit := f.Int("limit", 1000, "list: at most this many")
	asJSON := f.Bool("json", false, "list: print the server's JSON answer")
	all := f.Bool("all", false, "replay or drop: every dead letter listed")
	archived := f.Bool("archived", false, "list, or replay/drop -all: the archived dead letters")
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			f.Usage()
			return exitOK
		}
		fmt.Fprintln(e.stderr, "syncctl dlq: want a subcommand: list, replay or drop (see -h)")
		return exitUsage
	}
	sub := args[0]
	var ids []string // flags and ids may come in any order
	for rest := args[1:]; ; {
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
	list := func() (adminapi.DeadLetterList, error) {
		var l adminapi.DeadLetterList
		path := fmt.Sprintf("/v1/deadletters?limit=%d", *limit)
		if *archived {
			path += "&archived=1"
		}
		err := admin.Call(ctx, http.MethodGet, path, &l)
		return l, err
	}
	switch sub {
	case "list":
		if len(ids) > 0 || *all {
			fmt.Fprintln(e.stderr, "syncctl dlq list: takes no ids and no -all")
			return exitUsage
		}
		l, err := list()
		if err != nil {
			e.reportAdmin(cmd, err)
			return exitFail
		}
		if *asJSON {
			writeJSON(e, l)
			return exitOK
		}
		printDeadLetters(e, l, *archived)
		return exitOK
	case "replay", "drop":
	default:
		fmt.Fprintf(e.stderr, "syncctl dlq: unknown subcommand %q: want list, replay or drop\n", sub)
		return exitUsage
	}
	if *all == (len(ids) > 0) {
		fmt.Fprintf(e.stderr, "syncctl dlq %s: give dead letter ids (as dlq list prints them) or -all\n", sub)
		return exitUsage
	}
	if *all {
		l, err := list()
		if err != nil {
			e.reportAdmin(cmd, err)
			return exitFail
		}
		for _, dl := range l.Items {
			ids = append(ids, dl.ID)
		}
	}
	failed := 0
	for _, id := range ids {
		var res struct {
			Appended int `json:"appended"`
		}
		var err error
		if sub == "replay" {
			err = admin.Call(ctx, http.MethodPost, "/v1/deadletters/"+id+"/replay", &res)
		} else {
			err = admin.Call(ctx, http.MethodDelete, "/v1/deadletters/"+id, nil)
		}
		switch {
		case err != nil:
			failed++
			e.reportAdmin(cmd+" "+sub+" "+id, err)
		case sub == "replay":
			fmt.Fprintf(e.stdout, "%s replayed: %d entries appended\n", id, res.Appended)
		default:
			fmt.Fprintf(e.stdout, "%s dropped\n", id)
		}
	}
	if failed > 0 {
		return exitFail
	}
	return exitOK
}

func printDeadLetters(e *env, l adminapi.DeadLetterList, archived bool) {
	if l.Total == 0 {
		if archived {
			fmt.Fprintln(e.stdout, "no archived dead letters")
		} else {
			fmt.Fprintln(e.stdout, "no dead letters")
		}
		return
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tMSG_ID\tCONV\tCONV_SEQ\tKIND\tUSERS\tFAILED_AT\tCLASS\tATTEMPTS\tNEXT_TRY\tREASON")
	for _, dl := range l.Items {
		// NEXT_TRY: when the next automatic replay is due, "gave up" once they ended, the
		// archive time for an archived one, "-" when none is scheduled (not retried).
		next := "-"
		switch {
		case dl.ArchivedAt != nil:
			next = "archived " + dl.ArchivedAt.Format(time.RFC3339)
		case dl.NextTry != nil:
			next = dl.NextTry.Format(time.RFC3339)
		case dl.GaveUp:
			next = "gave up"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", dl.ID, dl.MsgID, dl.Conv, dl.ConvSeq, dl.Kind,
			strings.Join(dl.Users, ","), dl.FailedAt.Format(time.RFC3339), dl.Class, dl.Attempts, next, dl.Reason)
	}
	tw.Flush()
	if uint64(len(l.Items)) < l.Total {
		fmt.Fprintf(e.stdout, "(%d of %d shown; raise -limit)\n", len(l.Items), l.Total)
	}
}
