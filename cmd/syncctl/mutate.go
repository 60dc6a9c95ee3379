package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/proto"
)

// The mutation commands (send, read, recall, group) queue one action in the device's outbox
// through the SDK, wait for its outcome and print it as one JSON line.

const timeoutHelp = "how long to wait for the server's acknowledgement (the SDK retries meanwhile); an action still unacknowledged stays queued in -store; 0 waits forever"

const storeNote = "\n\n" + `The action is first written to the device's outbox in -store, then sent (retried with the same
client_msg_id, so the server applies it once). If it is not acknowledged within -timeout it stays
queued and is sent the next time any syncctl command runs with the same -store.

While connected the SDK also syncs the user's log into -store: entries that arrive meanwhile
count as seen, so a later pull with the same -store does not print them.`

// sentJSON is the output of an acknowledged action.
type sentJSON struct {
	ClientMsgID string `json:"client_msg_id"`
	Status      string `json:"status"` // "sent"
	MsgID       string `json:"msg_id"`
	ConvSeq     uint64 `json:"conv_seq"`
	Duplicate   bool   `json:"duplicate"`
	NoOp        bool   `json:"noop,omitempty"` // accepted without writing an entry
}

// failedJSON is the output of a refused action.
type failedJSON struct {
	ClientMsgID string `json:"client_msg_id"`
	Status      string `json:"status"` // "failed"
	Code        string `json:"code,omitempty"`
	Error       string `json:"error"`
}

func runSend(ctx context.Context, e *env, args []string) int {
	const cmd = "send"
	f := newFlagSet(e, cmd, "-conv C [-peer U] -body TEXT [connection flags]", `
Sends a message to conversation -conv and prints the server's acknowledgement as JSON:
{"client_msg_id":…,"status":"sent","msg_id":…,"conv_seq":…,"duplicate":false}.
The first message of a direct conversation names the other user with -peer. On a refusal it
prints {"status":"failed","code":…} and exits 1.`+storeNote, `
syncctl send -data-dir ./syncd-data -token "$TOKEN" -conv d:alice:bob -peer bob -body "hi bob"`)
	var c connFlags
	c.register(f, timeoutHelp)
	conv := f.String("conv", "", "conversation id (required)")
	peer := f.String("peer", "", "the other user of a direct conversation (needed when it does not exist yet)")
	body := f.String("body", "", "the message text (required)")
	if code, ok := parse(e, f, args); !ok {
		return code
	}
	if *conv == "" || *body == "" {
		e.errorf(cmd, "-conv and -body are required (see -h)")
		return exitUsage
	}
	return mutate(ctx, e, cmd, &c, func(cl *client.Client) (string, error) {
		return cl.Send(*conv, *peer, []byte(*body))
	})
}

func runRead(ctx context.Context, e *env, args []string) int {
	const cmd = "read"
	f := newFlagSet(e, cmd, "-conv C -up-to N [connection flags]", `
Marks conversation -conv read up to conv_seq -up-to (a read receipt, delivered to every member)
and prints the acknowledgement as JSON. Marking at or below the current read mark changes
nothing ("noop":true).`+storeNote, `
syncctl read -data-dir ./syncd-data -token "$TOKEN" -conv d:alice:bob -up-to 3`)
	var c connFlags
	c.register(f, timeoutHelp)
	conv := f.String("conv", "", "conversation id (required)")
	upTo := f.Uint64("up-to", 0, "read up to this conv_seq (required)")
	if code, ok := parse(e, f, args); !ok {
		return code
	}
	if *conv == "" || *upTo == 0 {
		e.errorf(cmd, "-conv and -up-to (a conv_seq, from 1) are required (see -h)")
		return exitUsage
	}
	return mutate(ctx, e, cmd, &c, func(cl *client.Client) (string, error) {
		return cl.MarkRead(*conv, proto.Position(*upTo))
	})
}

func runRecall(ctx context.Context, e *env, args []string) int {
	const cmd = "recall"
	f := newFlagSet(e, cmd, "-conv C -msg-id ID [connection flags]", `
Recalls this user's message -msg-id (the msg_id printed by send or pull) in conversation -conv,
within the server's recall window, and prints the acknowledgement as JSON.`+storeNote, `
syncctl recall -data-dir ./syncd-data -token "$TOKEN" -conv d:alice:bob -msg-id 1.42.0`)
	var c connFlags
	c.register(f, timeoutHelp)
	t := registerTarget(f)
	if code, ok := parse(e, f, args); !ok {
		return code
	}
	if !t.check(e, cmd) {
		return exitUsage
	}
	return mutate(ctx, e, cmd, &c, func(cl *client.Client) (string, error) {
		return cl.Recall(*t.conv, proto.MsgID(*t.msgID))
	})
}

func runEdit(ctx context.Context, e *env, args []string) int {
	const cmd = "edit"
	f := newFlagSet(e, cmd, "-conv C -msg-id ID -body TEXT [connection flags]", `
Replaces the body of this user's message -msg-id (the msg_id printed by send or pull) in
conversation -conv with -body, and prints the acknowledgement as JSON. Every member gets the edit;
a recalled message cannot be edited.`+storeNote, `
syncctl edit -data-dir ./syncd-data -token "$TOKEN" -conv d:alice:bob -msg-id 1.42.0 -body "hello, fixed"`)
	var c connFlags
	c.register(f, timeoutHelp)
	t := registerTarget(f)
	body := f.String("body", "", "the new body (required)")
	if code, ok := parse(e, f, args); !ok {
		return code
	}
	if !t.check(e, cmd) {
		return exitUsage
	}
	if *body == "" {
		e.errorf(cmd, "-body is required (see -h)")
		return exitUsage
	}
	return mutate(ctx, e, cmd, &c, func(cl *client.Client) (string, error) {
		return cl.Edit(*t.conv, proto.MsgID(*t.msgID), []byte(*body))
	})
}

func runReact(ctx context.Context, e *env, args []string) int {
	const cmd = "react"
	f := newFlagSet(e, cmd, "-conv C -msg-id ID -reaction R [-remove] [connection flags]", `
Puts the reaction -reaction (an emoji, or a name your app defines: 1 to 64 bytes, no spaces) on
the message -msg-id of conversation -conv, or takes it off with -remove, and prints the
acknowledgement as JSON. Every member gets the reaction.`+storeNote, `
syncctl react -data-dir ./syncd-data -token "$TOKEN" -conv d:alice:bob -msg-id 1.42.0 -reaction 👍`)
	var c connFlags
	c.register(f, timeoutHelp)
	t := registerTarget(f)
	reaction := f.String("reaction", "", "the reaction (required)")
	remove := f.Bool("remove", false, "take the reaction off")
	if code, ok := parse(e, f, args); !ok {
		return code
	}
	if !t.check(e, cmd) {
		return exitUsage
	}
	if !proto.ValidReaction(*reaction) {
		e.errorf(cmd, "-reaction %q is not a reaction: 1 to %d bytes of printable UTF-8, no spaces", *reaction, proto.MaxReactionLen)
		return exitUsage
	}
	return mutate(ctx, e, cmd, &c, func(cl *client.Client) (string, error) {
		return cl.React(*t.conv, proto.MsgID(*t.msgID), *reaction, *remove)
	})
}

// targetFlags are the flags of a command acting on a message: its conversation and msg_id.
type targetFlags struct{ conv, msgID *string }

func registerTarget(f *flag.FlagSet) targetFlags {
	return targetFlags{
		conv:  f.String("conv", "", "conversation id (required)"),
		msgID: f.String("msg-id", "", "the message's msg_id, shard.index.sub (required)"),
	}
}

// check reports whether both flags are given and -msg-id is a msg_id, saying what is wrong if not.
func (t targetFlags) check(e *env, cmd string) bool {
	if *t.conv == "" || *t.msgID == "" {
		e.errorf(cmd, "-conv and -msg-id are required (see -h)")
		return false
	}
	if !proto.MsgID(*t.msgID).Valid() {
		e.errorf(cmd, "-msg-id %q is not a msg_id (shard.index.sub, as printed by send or pull)", *t.msgID)
		return false
	}
	return true
}

func runGroup(ctx context.Context, e *env, args []string) int {
	const cmd = "group"
	if len(args) == 0 || !slices.Contains([]string{"create", "add", "remove", "role", "members"}, args[0]) {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(e.stderr, groupUsage)
			return exitOK
		}
		fmt.Fprint(e.stderr, groupUsage)
		return exitUsage
	}
	op := args[0]
	sub := cmd + " " + op
	about := map[string]string{
		"create":  "Creates group -conv with -members (this user is always a member) and prints the acknowledgement as JSON.",
		"add":     "Adds -members to group -conv and prints the acknowledgement as JSON (\"noop\":true if they all were members).",
		"remove":  "Removes -members from group -conv and prints the acknowledgement as JSON (\"noop\":true if none was a member). Naming only this user leaves the group.",
		"role":    "Gives -members the -role (member, admin, or owner: hands the group over to one member) in group -conv and prints the acknowledgement as JSON. Only the group's owner may.",
		"members": "Prints group -conv's current members and their roles as JSON lines, paged from the server.",
	}[op]
	example := map[string]string{
		"create":  `syncctl group create -data-dir ./syncd-data -token "$TOKEN" -conv g:team -members bob,carol`,
		"add":     `syncctl group add -data-dir ./syncd-data -token "$TOKEN" -conv g:team -members dave`,
		"remove":  `syncctl group remove -data-dir ./syncd-data -token "$TOKEN" -conv g:team -members dave`,
		"role":    `syncctl group role -data-dir ./syncd-data -token "$TOKEN" -conv g:team -members bob -role admin`,
		"members": `syncctl group members -data-dir ./syncd-data -token "$TOKEN" -conv g:team`,
	}[op]
	synopsis := "-conv C -members a,b,c [connection flags]"
	switch op {
	case "role":
		synopsis = "-conv C -members a,b -role member|admin|owner [connection flags]"
	case "members":
		synopsis = "-conv C [connection flags]"
	}
	f := newFlagSet(e, sub, synopsis, about+storeNote, example)
	var c connFlags
	c.register(f, timeoutHelp)
	conv := f.String("conv", "", "group conversation id (required)")
	membersFlag := f.String("members", "", "comma-separated user ids")
	roleFlag := f.String("role", "", "role: member, admin or owner (group role)")
	if code, ok := parse(e, f, args[1:]); !ok {
		return code
	}
	var role proto.Role
	if op == "role" {
		for r := proto.RoleMember; r <= proto.RoleOwner; r++ {
			if r.String() == *roleFlag {
				role = r
			}
		}
		if role == 0 {
			e.errorf(sub, "-role must be member, admin or owner, not %q", *roleFlag)
			return exitUsage
		}
	}
	var members []string
	for m := range strings.SplitSeq(*membersFlag, ",") {
		if m = strings.TrimSpace(m); m != "" {
			members = append(members, m)
		}
	}
	if *conv == "" || (op != "create" && op != "members" && len(members) == 0) {
		e.errorf(sub, "-conv and -members are required (see -h)")
		return exitUsage
	}
	if op == "members" {
		return groupMembers(ctx, e, sub, &c, *conv)
	}
	return mutate(ctx, e, sub, &c, func(cl *client.Client) (string, error) {
		switch op {
		case "create":
			return cl.CreateGroup(*conv, members)
		case "add":
			return cl.AddMembers(*conv, members)
		case "role":
			return cl.SetRole(*conv, members, role)
		}
		return cl.RemoveMembers(*conv, members)
	})
}

// memberJSON is one line of `syncctl group members`.
type memberJSON struct {
	User string `json:"user"`
	Role string `json:"role"`
}

// groupMembers prints conv's members, paged from the server, one JSON line each.
func groupMembers(ctx context.Context, e *env, cmd string, c *connFlags, conv string) int {
	ctx, cancel := withTimeout(ctx, c.timeout)
	defer cancel()
	cl, code := connect(ctx, e, cmd, c)
	if cl == nil {
		return code
	}
	defer cl.Close()
	members, err := cl.FetchMembers(ctx, conv)
	for errors.Is(err, client.ErrOffline) && ctx.Err() == nil { // Dial returns before the connection is up
		time.Sleep(50 * time.Millisecond)
		members, err = cl.FetchMembers(ctx, conv)
	}
	if err != nil {
		e.report(cmd, "members", c, err)
		return exitFail
	}
	for _, m := range members {
		writeJSON(e, memberJSON{User: m.User, Role: m.Role.String()})
	}
	return exitOK
}

const groupUsage = `Usage: syncctl group create|add|remove|role|members -conv C [-members a,b,c] [-role R] [connection flags]

Creates a group conversation, adds or removes members, gives roles (the creator owns a group; the
owner names admins; owners and admins add and remove), or lists the members. Run
"syncctl group create -h" (or add, remove, role, members) for the flags.

Example:
  syncctl group create -data-dir ./syncd-data -token "$TOKEN" -conv g:team -members bob,carol
`

// connect checks the connection flags and dials; on failure it reports and returns a nil client
// and the exit code.
func connect(ctx context.Context, e *env, cmd string, c *connFlags) (*client.Client, int) {
	if err := c.resolve(); err != nil {
		e.errorf(cmd, "%v", err)
		return nil, exitUsage
	}
	cl, err := c.dial(ctx, e)
	if err != nil {
		e.report(cmd, "connect", c, err)
		return nil, exitFail
	}
	return cl, exitOK
}

// mutate connects, queues one action with queue, waits for its StatusEvent and prints the
// outcome.
func mutate(ctx context.Context, e *env, cmd string, c *connFlags, queue func(*client.Client) (string, error)) int {
	ctx, cancel := withTimeout(ctx, c.timeout)
	defer cancel()
	cl, code := connect(ctx, e, cmd, c)
	if cl == nil {
		return code
	}
	defer cl.Close()
	cmid, err := queue(cl)
	if err != nil {
		e.report(cmd, "queue", c, err)
		return exitFail
	}
	for {
		select {
		case <-ctx.Done():
			why := "not acknowledged within -timeout " + c.timeout.String()
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				why = "interrupted before the acknowledgement"
			}
			e.errorf(cmd, "%s; client_msg_id %s stays queued in %s and is sent the next time syncctl runs with this -store", why, cmid, c.store)
			fmt.Fprintf(e.stderr, "  what to do: check the server (syncctl status) and -addr, then run e.g. syncctl pull with the same flags\n")
			return exitFail
		case ev, ok := <-cl.Events():
			if !ok {
				e.errorf(cmd, "the SDK stopped before the acknowledgement")
				return exitFail
			}
			st, isStatus := ev.(client.StatusEvent)
			if !isStatus || st.ClientMsgID != cmid {
				continue // entries synced meanwhile, an older queued action's outcome
			}
			switch st.Status {
			case client.StatusSent:
				out := sentJSON{ClientMsgID: cmid, Status: "sent"}
				if a := st.Ack; a != nil {
					out.MsgID, out.ConvSeq, out.Duplicate, out.NoOp = string(a.MsgID), uint64(a.ConvSeq), a.Duplicate, a.NoOp
				}
				writeJSON(e, out)
				return exitOK
			case client.StatusFailed:
				out := failedJSON{ClientMsgID: cmid, Status: "failed", Error: fmt.Sprint(st.Err)}
				var pe *proto.Error
				if errors.As(st.Err, &pe) {
					out.Code = pe.Code.String()
				}
				writeJSON(e, out)
				e.report(cmd, "refused", c, st.Err)
				return exitFail
			}
		}
	}
}

func writeJSON(e *env, v any) {
	b, err := json.Marshal(v)
	if err != nil { // cannot happen with the types written here
		e.errorf("json", "%v", err)
		return
	}
	fmt.Fprintf(e.stdout, "%s\n", b)
}

// withTimeout bounds ctx by d; d <= 0 means no bound.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}
