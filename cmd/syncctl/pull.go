package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/proto"
)

// entryJSON is one entry of the user's log as pull and tail print it. Only seq and kind are
// always present.
type entryJSON struct {
	Seq         uint64   `json:"seq"`
	Sub         uint32   `json:"sub,omitempty"` // the sub-log seq is of, for a split user's stream
	Kind        string   `json:"kind"`
	MsgID       string   `json:"msg_id,omitempty"`
	Conv        string   `json:"conv,omitempty"`
	ConvSeq     uint64   `json:"conv_seq,omitempty"`
	From        string   `json:"from,omitempty"`
	TS          string   `json:"ts,omitempty"`
	Body        string   `json:"body,omitempty"`
	BodyBase64  string   `json:"body_base64,omitempty"` // instead of body when it is not UTF-8
	UpTo        uint64   `json:"up_to,omitempty"`
	Target      string   `json:"target,omitempty"`
	Members     []string `json:"members,omitempty"`
	Role        string   `json:"role,omitempty"`         // role_change
	MemberCount uint32   `json:"member_count,omitempty"` // a membership change too long to list (syncctl group members lists them)
	Reaction    string   `json:"reaction,omitempty"`     // reaction
	Remove      bool     `json:"remove,omitempty"`       // reaction: taken off
	Folded      uint64   `json:"folded,omitempty"`       // superseded by the entry at this seq (PROTOCOL §5)
}

func toEntryJSON(en proto.Entry) entryJSON {
	out := entryJSON{
		Seq: uint64(en.Seq), Kind: en.Kind.String(), MsgID: string(en.MsgID), Conv: en.Conv,
		ConvSeq: uint64(en.ConvSeq), From: en.Sender, UpTo: uint64(en.UpTo), Target: string(en.Target),
		Members: en.Members, MemberCount: en.MemberCount, Reaction: en.Reaction, Remove: en.Remove, Folded: uint64(en.Folded),
	}
	if en.Role != 0 {
		out.Role = en.Role.String()
	}
	if en.Time != 0 {
		out.TS = time.Unix(0, en.Time).UTC().Format(time.RFC3339Nano)
	}
	if utf8.Valid(en.Body) {
		out.Body = string(en.Body)
	} else {
		out.BodyBase64 = base64.StdEncoding.EncodeToString(en.Body)
	}
	return out
}

const followNote = "\n\n" + `Each entry is one JSON line: seq, kind, msg_id, conv, conv_seq, from, ts, body, up_to, target,
members, role, member_count, reaction, remove, folded (empty fields omitted).

The SDK stores what it syncs in -store and keeps the cursor there, like a real device: a second
run with the same -store prints only entries that are new since the last one. Use one -store per
device (the default, ./syncctl-store/<user>/<device>, is one per user and device); entries that
arrived while another command (send, read, ...) ran with the same -store are not printed again.
A fresh -store prints the whole retained log. Actions left queued in -store are sent meanwhile.`

func runPull(ctx context.Context, e *env, args []string) int {
	const cmd = "pull"
	f := newFlagSet(e, cmd, "[-wait 2s] [connection flags]", `
Connects as the device, prints every new entry of the user's log, and exits once the device has
caught up (the server said it holds the head) and no entry has arrived for -wait. If syncing
keeps failing (the SDK's SyncFailedEvent: three attempts in a row without progress), it exits 1
with the error instead.`+followNote, `
syncctl pull -data-dir ./syncd-data -token "$(syncctl token -user bob -device laptop)"`)
	var c connFlags
	c.register(f, "how long to wait for the connection; 0 waits forever")
	wait := f.Duration("wait", 2*time.Second, "once caught up, exit after this long without a new entry")
	if code, ok := parse(e, f, args); !ok {
		return code
	}
	if *wait <= 0 {
		e.errorf(cmd, "-wait must be positive")
		return exitUsage
	}
	return follow(ctx, e, cmd, &c, *wait)
}

func runTail(ctx context.Context, e *env, args []string) int {
	const cmd = "tail"
	f := newFlagSet(e, cmd, "[connection flags]", `
Connects as the device and prints every new entry of the user's log as it arrives, until Ctrl-C.
The SDK reconnects by itself if the connection drops.`+followNote, `
syncctl tail -data-dir ./syncd-data -token "$(syncctl token -user bob -device laptop)"`)
	var c connFlags
	c.register(f, "how long to wait for the first connection; 0 waits forever")
	if code, ok := parse(e, f, args); !ok {
		return code
	}
	return follow(ctx, e, cmd, &c, 0)
}

// follow prints entries until ctx ends or, with quiet > 0 (pull), until the device has caught up
// and none arrived for quiet; pull fails when the SDK reports that syncing keeps failing.
func follow(ctx context.Context, e *env, cmd string, c *connFlags, quiet time.Duration) int {
	dctx, cancel := withTimeout(ctx, c.timeout)
	cl, code := connect(dctx, e, cmd, c)
	cancel()
	if cl == nil {
		return code
	}
	defer cl.Close()

	var idle <-chan time.Time
	var timer *time.Timer
	if quiet > 0 {
		timer = time.NewTimer(quiet)
		defer timer.Stop()
		idle = timer.C
	}
	// stop closes the client and prints what its events still hold: entries the SDK stored
	// just before (they are in the local store, so no later pull would print them again).
	stop := func(code int) int {
		cl.Close()
		for ev := range cl.Events() {
			printEvent(e, cmd, ev)
		}
		return code
	}
	synced := false // the SDK said the device holds the head: pull may stop once quiet
	for {
		select {
		case <-ctx.Done():
			if quiet > 0 { // pull: Ctrl-C before caught up
				code := stop(exitFail)
				e.errorf(cmd, "interrupted; the entries printed are stored in %s and will not be printed again", c.store)
				return code
			}
			return stop(exitOK)
		case <-idle:
			if synced {
				return stop(exitOK)
			}
			idle = nil // quiet but not caught up: wait for the SDK to say either way
		case ev, ok := <-cl.Events():
			if !ok {
				e.errorf(cmd, "the SDK stopped")
				return exitFail
			}
			switch ev := ev.(type) {
			case client.SyncedEvent:
				synced = true
			case client.SyncFailedEvent:
				if quiet > 0 { // pull: the entries printed so far are stored; say why the rest is not
					code := stop(exitFail)
					e.report(cmd, fmt.Sprintf("sync failed %d times in a row", ev.Failures), c, ev.Err)
					return code
				}
			}
			printEvent(e, cmd, ev)
			if timer != nil {
				timer.Reset(quiet)
				idle = timer.C
			}
		}
	}
}

// printEvent prints one SDK event: an entry as a JSON line on stdout, anything else as a note on
// stderr.
func printEvent(e *env, cmd string, ev client.Event) {
	switch ev := ev.(type) {
	case client.EntryEvent:
		en := toEntryJSON(ev.Entry)
		en.Sub = ev.Sub
		writeJSON(e, en)
	case client.RebaseEvent:
		e.errorf(cmd, "note: the stored cursor was too old or too far behind; jumped to the head (epoch %d, seq %d): entries before it were not printed", ev.Epoch, ev.Head)
	case client.EpochEvent:
		e.errorf(cmd, "note: the user's log was re-created (epoch %d); printing it from its start", ev.Epoch)
	case client.StatusEvent:
		if ev.Status != client.StatusSent && ev.Status != client.StatusFailed {
			break // a delivered or read step of one of the user's messages: its entry is printed
		}
		if ev.Status == client.StatusFailed {
			e.errorf(cmd, "note: a previously queued action %s failed: %v", ev.ClientMsgID, ev.Err)
		} else {
			e.errorf(cmd, "note: a previously queued action %s was %s", ev.ClientMsgID, ev.Status)
		}
	case client.SyncFailedEvent:
		e.errorf(cmd, "note: syncing failed %d times in a row (the SDK keeps retrying): %v", ev.Failures, ev.Err)
	case client.GapEvent, client.SyncedEvent:
		// refetched by the SDK, nothing skipped; caught up
	}
}
