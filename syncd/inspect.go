package syncd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
)

// The inspect endpoints answer an operator's two questions about delivery: where does a user's
// device stand in its log (GET /v1/cursors), and where did a message go (GET /v1/trace). They are
// read-only and read replicas, like sync streams: this node's replica of a shard when it hosts one,
// else a replica on a node that does (inspectcall.go), so any node of a cluster gives the whole
// answer. A follower may answer a little behind its leader; each report names the node whose
// replica answered. The JSON shapes are the exported report types below; errors are [OpsError],
// with the codes "bad_request" (400), "not_found" (404), "no_shard" and "unavailable" (503: no
// replica of a shard concerned could be read) and "internal" (500).

// Trace limits. DefaultTraceScan bounds how many entries of each member's log a trace reads back
// from the head looking for the message (?scan=N raises it up to MaxTraceScan); a trace covers at
// most maxTraceMembers users (?user=uid narrows it to one).
const (
	DefaultTraceScan = 1000
	MaxTraceScan     = 100_000
	maxTraceMembers  = 1000
)

// CursorReport answers GET /v1/cursors?user=uid: the user's log on its shard, as one replica has
// it (this node's, or one on a node that hosts the shard), and the stored cursor of each device that has acknowledged one (a device that
// never acked is not listed: the server knows devices only by their cursors). Exists is false for
// a user whose log does not exist yet (nothing was ever delivered to it); Epoch is then 0.
type CursorReport struct {
	Node    string         `json:"node"` // the node whose replica of the user's shard answered
	User    string         `json:"user"`
	Shard   uint32         `json:"shard"`
	Exists  bool           `json:"exists"`
	Epoch   uint64         `json:"epoch"`
	First   uint64         `json:"first"` // first retained position
	Head    uint64         `json:"head"`  // last position; First-1 when the log is empty
	Devices []DeviceCursor `json:"devices"`
}

// DeviceCursor is one device's stored cursor. Behind is Head-Pos when the cursor is of the log's
// epoch; when it is not (the log was re-created since), Behind is null and EpochChanged is set:
// the device resyncs from scratch on its next sync.
type DeviceCursor struct {
	Device       string  `json:"device"`
	Epoch        uint64  `json:"epoch"`
	Pos          uint64  `json:"pos"`
	Behind       *uint64 `json:"behind"`
	EpochChanged bool    `json:"epoch_changed,omitempty"`
}

// TraceReport answers GET /v1/trace?msg_id=shard.index.sub: where a message lives on its home
// shard and, for each user concerned, whether it reached the user's log and which of the user's
// devices have stored it. Each part is read on a replica of its shard, wherever that is: Node
// names the node that answered for the home shard, TraceUser.Node the one for each user.
type TraceReport struct {
	Node      string `json:"node"` // the node whose replica of the home shard answered
	MsgID     string `json:"msg_id"`
	HomeShard uint32 `json:"home_shard"`
	Conv      string `json:"conv"`
	ConvKind  string `json:"conv_kind"` // "direct" or "group"
	ConvSeq   uint64 `json:"conv_seq"`
	Recalled  bool   `json:"recalled"`
	// Entry is the conversation entry, from the conversation log or, once that trimmed it, from
	// the outbox's copy; null when neither holds it any more.
	Entry  *TraceEntry `json:"entry"`
	Outbox TraceOutbox `json:"outbox"`
	Scan   int         `json:"scan"` // the most entries of each user's log read looking for the message
	// Users lists the conversation's current members and, while the outbox holds the message,
	// its recipients (who may have left since), sorted by user id.
	Users          []TraceUser `json:"users"`
	UsersTruncated bool        `json:"users_truncated,omitempty"` // more than maxTraceMembers
}

// TraceEntry is the traced conversation entry. Bodies are not shown, only their size.
type TraceEntry struct {
	Source    string   `json:"source"` // "history" (the conversation log) or "outbox"
	Kind      string   `json:"kind"`
	Sender    string   `json:"sender"`
	Time      int64    `json:"time"` // the proposer's clock, Unix ns
	BodyBytes int      `json:"body_bytes"`
	ReadUpTo  uint64   `json:"read_up_to,omitempty"` // receipts
	Target    string   `json:"target,omitempty"`     // recalls
	Members   []string `json:"members,omitempty"`    // group creation and membership changes
}

// TraceOutbox is the home shard's outbox as it concerns the message. While fan-out has not
// passed the message on every destination, the outbox holds it at Pos and names its Recipients;
// once every destination's mark has passed it the record is trimmed (Retained false, Pos 0).
type TraceOutbox struct {
	First      uint64   `json:"first"`
	Head       uint64   `json:"head"`
	Retained   bool     `json:"retained"`
	Pos        uint64   `json:"pos,omitempty"`
	Recipients []string `json:"recipients,omitempty"`
}

// Statuses of a [TraceUser].
const (
	TraceDelivered    = "delivered"     // the user's log holds the message at Pos
	TracePending      = "pending"       // fan-out has not passed the message's outbox position for the user's shard yet
	TraceNotFound     = "not_found"     // fan-out passed it, but the scanned part of the log does not hold it
	TraceNotRecipient = "not_recipient" // the outbox record does not name the user (e.g. a receipt, or a later member)
	TraceUnavailable  = "unavailable"   // no replica of the user's shard could be read: neither this node nor any node hosting it answered
)

// TraceUser is the message as one user's log has it. SourceMark is the highest outbox position
// of the home shard that the user's shard has applied: once it reaches Outbox.Pos, fan-out has
// passed the message there. Devices are past the message when their cursor is of the log's epoch
// and at or after Pos.
type TraceUser struct {
	User       string        `json:"user"`
	Node       string        `json:"node,omitempty"` // the node whose replica of the user's shard answered; empty when unavailable
	Shard      uint32        `json:"shard"`
	Member     bool          `json:"member"`    // a current member of the conversation
	Recipient  *bool         `json:"recipient"` // named by the outbox record; null once it is trimmed
	Status     string        `json:"status"`    // one of the Trace… statuses
	Note       string        `json:"note,omitempty"`
	Epoch      uint64        `json:"epoch"`
	First      uint64        `json:"first"`
	Head       uint64        `json:"head"`
	Pos        uint64        `json:"pos,omitempty"` // where the user's log holds the message
	Scanned    int           `json:"scanned"`
	SourceMark uint64        `json:"source_mark"`
	Devices    []TraceDevice `json:"devices"`
}

// TraceDevice is one device of a traced user: its stored cursor and whether it is past the message.
type TraceDevice struct {
	Device string `json:"device"`
	Epoch  uint64 `json:"epoch"`
	Pos    uint64 `json:"pos"`
	Past   bool   `json:"past"`
}

// inspectRoutes adds GET /v1/cursors and GET /v1/trace to the admin mux.
func (s *Server) inspectRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/cursors", s.serveCursors)
	mux.HandleFunc("GET /v1/trace", s.serveTrace)
}

// httpError is an error answer on its way to the client.
type httpError struct {
	status int
	body   OpsError
}

func (e *httpError) Error() string { return e.body.Message }

func badRequest(msg, hint string) error {
	return &httpError{http.StatusBadRequest, OpsError{Code: "bad_request", Message: msg, Hint: hint}}
}

// shardError turns an error from inspecting shard (inspectShard) into its answer: 503 when no
// replica of the shard could be read (this node hosts none and no node that does answered), else
// 500 (logged by reply).
func shardError(shard raftstore.ShardID, err error) error {
	switch {
	case errors.Is(err, raftstore.ErrNoShard):
		return &httpError{http.StatusServiceUnavailable, OpsError{Code: "no_shard",
			Message: fmt.Sprintf("no replica of shard %d could be read: this node does not host it and no node that does answered (%v)", shard, err),
			Hint:    "check the cluster with syncctl cluster status: the shard may be moving, or every node hosting it down"}}
	case errors.Is(err, raftstore.ErrUnreachable):
		return &httpError{http.StatusServiceUnavailable, OpsError{Code: "unavailable",
			Message: fmt.Sprintf("no replica of shard %d could be read: the nodes hosting it did not answer (%v)", shard, err),
			Hint:    "retry; if it persists, check the nodes hosting the shard with syncctl cluster status"}}
	}
	return err
}

// reply writes v as JSON, or err as an OpsError; errors other than an httpError are logged.
func (s *Server) reply(w http.ResponseWriter, r *http.Request, v any, err error) {
	if err == nil {
		writeJSON(w, http.StatusOK, v)
		return
	}
	var he *httpError
	if !errors.As(err, &he) {
		s.logger.Error("admin request failed", "path", r.URL.Path, "err", err)
		he = &httpError{http.StatusInternalServerError, OpsError{Code: "internal", Message: err.Error(),
			Hint: "the error was logged by the server; check its logs and storage"}}
	}
	writeJSON(w, he.status, he.body)
}

func (s *Server) serveCursors(w http.ResponseWriter, r *http.Request) {
	rep, err := s.cursors(r.Context(), r.URL.Query().Get("user"))
	s.reply(w, r, rep, err)
}

// cursors reports uid's log and device cursors, from a replica of the user's shard wherever one
// is (see inspectcall.go).
func (s *Server) cursors(ctx context.Context, uid string) (*CursorReport, error) {
	if !log.ValidID(uid) {
		return nil, badRequest(fmt.Sprintf("bad or missing user %q", uid), "pass ?user=<uid>")
	}
	shard := s.slots.UserShard(uid)
	var rep CursorReport
	if err := s.inspectShard(ctx, shard, "cursors", cursorsArgs{User: uid}, &rep); err != nil {
		return nil, shardError(shard, err)
	}
	return &rep, nil
}

// cursorsArgs are the arguments of the "cursors" inspection.
type cursorsArgs struct {
	User string `json:"user"`
}

// opCursors is the "cursors" inspection: the whole CursorReport of one user, from a replica of
// the user's shard.
func opCursors(s *Server, state *log.Shard, shard raftstore.ShardID, args json.RawMessage) (any, error) {
	a, err := decodeArgs[cursorsArgs]("cursors", args)
	if err != nil {
		return nil, err
	}
	info, err := state.UserInfo(a.User)
	if err != nil {
		return nil, err
	}
	cs, err := state.Cursors(a.User)
	if err != nil {
		return nil, err
	}
	rep := &CursorReport{Node: s.cfg.NodeID, User: a.User, Shard: uint32(shard), Exists: info.Epoch != 0,
		Epoch: uint64(info.Epoch), First: uint64(info.First), Head: uint64(info.Head), Devices: []DeviceCursor{}}
	for _, c := range cs {
		d := DeviceCursor{Device: c.Device, Epoch: uint64(c.Cursor.Epoch), Pos: uint64(c.Cursor.Pos)}
		if c.Cursor.Epoch == info.Epoch {
			behind := uint64(info.Head - min(c.Cursor.Pos, info.Head))
			d.Behind = &behind
		} else {
			d.EpochChanged = true
		}
		rep.Devices = append(rep.Devices, d)
	}
	return rep, nil
}

func (s *Server) serveTrace(w http.ResponseWriter, r *http.Request) {
	rep, err := s.trace(r)
	s.reply(w, r, rep, err)
}

// trace reports where a message went: its home-shard part from a replica of the home shard, and
// each user's part from a replica of that user's shard, wherever those are (see inspectcall.go).
func (s *Server) trace(r *http.Request) (*TraceReport, error) {
	q := r.URL.Query()
	raw := q.Get("msg_id")
	if raw == "" {
		return nil, badRequest("missing msg_id", "pass ?msg_id=<shard.index.sub>, as send and pull print it")
	}
	id, err := log.ParseMsgID(raw)
	if err != nil {
		return nil, badRequest(err.Error(), "a msg_id looks like 3.17.0 (shard.index.sub), as send and pull print it")
	}
	scan := DefaultTraceScan
	if v := q.Get("scan"); v != "" {
		if scan, err = strconv.Atoi(v); err != nil || scan < 1 || scan > MaxTraceScan {
			return nil, badRequest(fmt.Sprintf("bad scan %q", v), fmt.Sprintf("pass ?scan=N with 1 <= N <= %d", MaxTraceScan))
		}
	}
	only := q.Get("user")
	if only != "" && !log.ValidID(only) {
		return nil, badRequest(fmt.Sprintf("bad user %q", only), "pass ?user=<uid> to trace one user, or leave it out")
	}
	home := raftstore.ShardID(id.Shard)
	if !slices.Contains(s.slots.Shards(), home) {
		return nil, &httpError{http.StatusNotFound, OpsError{Code: "not_found",
			Message: fmt.Sprintf("no message %s: there is no shard %d", id, id.Shard),
			Hint:    "check the msg_id: its first number is the shard that assigned it"}}
	}
	var h traceHome
	if err := s.inspectShard(r.Context(), home, "trace_home", traceHomeArgs{MsgID: id}, &h); err != nil {
		return nil, shardError(home, err)
	}
	if !h.Found {
		return nil, &httpError{http.StatusNotFound, OpsError{Code: "not_found",
			Message: fmt.Sprintf("no message %s on its home shard %d", id, id.Shard),
			Hint:    "check the msg_id; a replica that is behind may not have applied it yet"}}
	}
	rep := &h.Report
	rep.Scan, rep.Users = scan, []TraceUser{}

	users := slices.Clone(h.Members)
	if rep.Outbox.Retained {
		users = append(users, rep.Outbox.Recipients...)
	}
	slices.Sort(users)
	users = slices.Compact(users)
	if only != "" {
		users = slices.DeleteFunc(users, func(u string) bool { return u != only })
		if len(users) == 0 {
			users = []string{only} // not concerned: the trace says so
		}
	}
	if len(users) > maxTraceMembers {
		users, rep.UsersTruncated = users[:maxTraceMembers], true
	}
	// One inspection per shard concerned, not per user: a trace of a large group costs as many
	// calls as there are shards, one after the other (they are few; the scans dominate).
	var order []raftstore.ShardID
	byShard := map[raftstore.ShardID][]traceUserArgs{}
	for _, uid := range users {
		shard := s.slots.UserShard(uid)
		if byShard[shard] == nil {
			order = append(order, shard)
		}
		byShard[shard] = append(byShard[shard], traceUserArgs{User: uid, Member: slices.Contains(h.Members, uid)})
	}
	traced := map[string]TraceUser{}
	for _, shard := range order {
		args := traceUsersArgs{MsgID: id, Scan: scan, Outbox: rep.Outbox, Users: byShard[shard]}
		var got []TraceUser
		err := s.inspectShard(r.Context(), shard, "trace_users", args, &got)
		if errors.Is(err, raftstore.ErrNoShard) || errors.Is(err, raftstore.ErrUnreachable) {
			// The rest of the trace still helps: say which users could not be read, and why.
			got = got[:0]
			for _, u := range args.Users {
				tu := newTraceUser(u.User, shard, u.Member, rep.Outbox)
				tu.Status = TraceUnavailable
				tu.Note = fmt.Sprintf("no replica of shard %d could be read: this node does not host it and no node that does answered (%v); check syncctl cluster status", shard, err)
				got = append(got, tu)
			}
		} else if err != nil {
			return nil, err
		}
		for _, tu := range got {
			traced[tu.User] = tu
		}
	}
	for _, uid := range users {
		tu, ok := traced[uid]
		if !ok {
			return nil, fmt.Errorf("syncd: trace of %s: no answer for user %s", id, uid)
		}
		rep.Users = append(rep.Users, tu)
	}
	return rep, nil
}

// traceHomeArgs are the arguments of the "trace_home" inspection.
type traceHomeArgs struct {
	MsgID log.MsgID `json:"msg_id"`
}

// traceHome is the answer of the "trace_home" inspection. Found is false when the home shard's
// replica does not know the message; Report is then empty. Otherwise Report has everything but
// Scan and Users, and Members lists the conversation's current members.
type traceHome struct {
	Found   bool        `json:"found"`
	Report  TraceReport `json:"report"`
	Members []string    `json:"members"`
}

// opTraceHome is the "trace_home" inspection: the part of a trace a replica of the message's
// home shard knows (the conversation entry, the outbox, the members).
func opTraceHome(s *Server, state *log.Shard, shard raftstore.ShardID, args json.RawMessage) (any, error) {
	a, err := decodeArgs[traceHomeArgs]("trace_home", args)
	if err != nil {
		return nil, err
	}
	id := a.MsgID
	conv, seq, recalled, ok, err := state.LookupMsg(id)
	if err != nil || !ok {
		return traceHome{}, err
	}
	h := traceHome{Found: true, Report: TraceReport{Node: s.cfg.NodeID, MsgID: id.String(), HomeShard: uint32(shard),
		Conv: conv, ConvSeq: uint64(seq), Recalled: recalled}}
	rep := &h.Report
	kind, members, err := state.ConvMembers(conv)
	if err != nil {
		return nil, err
	}
	h.Members = members
	rep.ConvKind = map[log.ConvKind]string{log.ConvDirect: "direct", log.ConvGroup: "group"}[kind]

	read, err := state.ReadConv(conv, 0, seq, log.Limit{Count: 1})
	if err != nil {
		return nil, err
	}
	if read.Status == log.ReadEntries {
		rep.Entry = traceEntry("history", &read.Entries[0])
	}
	info, err := state.Outbox()
	if err != nil {
		return nil, err
	}
	rep.Outbox = TraceOutbox{First: info.First, Head: info.Head}
	item, retained, err := state.FindInOutbox(id)
	if err != nil {
		return nil, err
	}
	if retained {
		rep.Outbox.Retained, rep.Outbox.Pos, rep.Outbox.Recipients = true, item.Pos, item.Recipients
		if rep.Entry == nil {
			rep.Entry = traceEntry("outbox", &item.Entry)
		}
	}
	return h, nil
}

// traceUsersArgs are the arguments of the "trace_users" inspection: the users of one shard to
// trace message MsgID for, and the home shard's outbox as the trace found it.
type traceUsersArgs struct {
	MsgID  log.MsgID       `json:"msg_id"`
	Scan   int             `json:"scan"`
	Outbox TraceOutbox     `json:"outbox"`
	Users  []traceUserArgs `json:"users"`
}

// traceUserArgs is one user to trace, and whether the user is a current member.
type traceUserArgs struct {
	User   string `json:"user"`
	Member bool   `json:"member"`
}

// opTraceUsers is the "trace_users" inspection: a TraceUser per user asked, in the same order,
// from a replica of their shard.
func opTraceUsers(s *Server, state *log.Shard, shard raftstore.ShardID, args json.RawMessage) (any, error) {
	a, err := decodeArgs[traceUsersArgs]("trace_users", args)
	if err != nil {
		return nil, err
	}
	out := make([]TraceUser, 0, len(a.Users))
	for _, u := range a.Users {
		tu, err := traceUser(state, shard, a.MsgID, u.User, a.Scan, u.Member, a.Outbox)
		if err != nil {
			return nil, err
		}
		tu.Node = s.cfg.NodeID
		out = append(out, tu)
	}
	return out, nil
}

// newTraceUser starts the TraceUser of uid on shard: what the trace knows without reading it.
func newTraceUser(uid string, shard raftstore.ShardID, member bool, ob TraceOutbox) TraceUser {
	tu := TraceUser{User: uid, Shard: uint32(shard), Member: member, Devices: []TraceDevice{}}
	if ob.Retained {
		named := slices.Contains(ob.Recipients, uid)
		tu.Recipient = &named
	}
	return tu
}

// traceUser finds message id in uid's log on state, a replica of uid's shard, and reports the
// fan-out state and device cursors.
func traceUser(state *log.Shard, shard raftstore.ShardID, id log.MsgID, uid string, scan int, member bool, ob TraceOutbox) (TraceUser, error) {
	tu := newTraceUser(uid, shard, member, ob)
	info, err := state.UserInfo(uid)
	if err != nil {
		return tu, err
	}
	tu.Epoch, tu.First, tu.Head = uint64(info.Epoch), uint64(info.First), uint64(info.Head)
	if tu.SourceMark, err = state.SourceMark(log.ShardID(id.Shard)); err != nil {
		return tu, err
	}
	pos, found, scanned, err := state.FindInUserLog(uid, id, scan)
	if err != nil {
		return tu, err
	}
	tu.Pos, tu.Scanned = uint64(pos), scanned
	switch {
	case found:
		tu.Status = TraceDelivered
	case ob.Retained && !*tu.Recipient:
		tu.Status = TraceNotRecipient
		tu.Note = "the message was not addressed to this user (not a member then, or a receipt that does not concern them)"
	case ob.Retained && tu.SourceMark < ob.Pos:
		tu.Status = TracePending
		tu.Note = fmt.Sprintf("not delivered yet: fan-out to shard %d has applied outbox positions up to %d, the message is at %d",
			shard, tu.SourceMark, ob.Pos)
	default:
		tu.Status = TraceNotFound
		tu.Note = notFoundNote(scanned, scan, ob.Retained)
	}
	cs, err := state.Cursors(uid)
	if err != nil {
		return tu, err
	}
	for _, c := range cs {
		tu.Devices = append(tu.Devices, TraceDevice{Device: c.Device, Epoch: uint64(c.Cursor.Epoch), Pos: uint64(c.Cursor.Pos),
			Past: found && c.Cursor.Epoch == info.Epoch && c.Cursor.Pos >= pos})
	}
	return tu, nil
}

func notFoundNote(scanned, scan int, retained bool) string {
	if scanned >= scan {
		return fmt.Sprintf("fan-out has passed the message, but the newest %d entries of the log do not hold it (raise the scan limit to look further back)", scanned)
	}
	why := "trimmed by retention, refused by the user's shard (a dead letter), or not addressed to this user"
	if retained {
		why = "trimmed by retention or refused by the user's shard (a dead letter)"
	}
	return "fan-out has passed the message, but the retained log does not hold it: " + why
}

func traceEntry(source string, e *log.Entry) *TraceEntry {
	out := &TraceEntry{Source: source, Kind: e.Kind.String(), Sender: e.Sender, Time: e.Time,
		BodyBytes: len(e.Body), ReadUpTo: uint64(e.ReadUpTo), Members: e.Members}
	if !e.Target.IsZero() {
		out.Target = e.Target.String()
	}
	return out
}
