package syncd

import (
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
// read-only and read this node's local replicas, like sync streams: a follower may answer a little
// behind its leader, and in a cluster each node answers only for the shards it hosts (503
// otherwise). The JSON shapes are the exported report types below; errors are [OpsError], with the
// codes "bad_request" (400), "not_found" (404), "no_shard" (503) and "internal" (500).

// Trace limits. DefaultTraceScan bounds how many entries of each member's log a trace reads back
// from the head looking for the message (?scan=N raises it up to MaxTraceScan); a trace covers at
// most maxTraceMembers users (?user=uid narrows it to one).
const (
	DefaultTraceScan = 1000
	MaxTraceScan     = 100_000
	maxTraceMembers  = 1000
)

// CursorReport answers GET /v1/cursors?user=uid: the user's log on its shard, as this node's
// replica has it, and the stored cursor of each device that has acknowledged one (a device that
// never acked is not listed: the server knows devices only by their cursors). Exists is false for
// a user whose log does not exist yet (nothing was ever delivered to it); Epoch is then 0.
type CursorReport struct {
	Node    string         `json:"node"` // the node whose replica answered
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
// devices have stored it.
type TraceReport struct {
	Node      string `json:"node"` // the node whose replicas answered
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
	TraceUnavailable  = "unavailable"   // the user's shard is not hosted on this node
)

// TraceUser is the message as one user's log has it. SourceMark is the highest outbox position
// of the home shard that the user's shard has applied: once it reaches Outbox.Pos, fan-out has
// passed the message there. Devices are past the message when their cursor is of the log's epoch
// and at or after Pos.
type TraceUser struct {
	User       string        `json:"user"`
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

// shardError turns an error from reading shard into its answer: 503 when this node does not host
// the shard, else 500 (logged by reply).
func shardError(shard raftstore.ShardID, err error) error {
	if errors.Is(err, raftstore.ErrNoShard) {
		return &httpError{http.StatusServiceUnavailable, OpsError{Code: "no_shard",
			Message: fmt.Sprintf("shard %d is not hosted on this node", shard),
			Hint:    "in a cluster, ask the admin address (-admin) of a node that hosts the shard"}}
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
	rep, err := s.cursors(r.URL.Query().Get("user"))
	s.reply(w, r, rep, err)
}

func (s *Server) cursors(uid string) (*CursorReport, error) {
	if !log.ValidID(uid) {
		return nil, badRequest(fmt.Sprintf("bad or missing user %q", uid), "pass ?user=<uid>")
	}
	shard := s.slots.UserShard(uid)
	state, err := s.node.State(shard)
	if err != nil {
		return nil, shardError(shard, err)
	}
	info, err := state.UserInfo(uid)
	if err != nil {
		return nil, err
	}
	cs, err := state.Cursors(uid)
	if err != nil {
		return nil, err
	}
	rep := &CursorReport{Node: s.cfg.NodeID, User: uid, Shard: uint32(shard), Exists: info.Epoch != 0,
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
	state, err := s.node.State(home)
	if err != nil {
		return nil, shardError(home, err)
	}
	conv, seq, recalled, ok, err := state.LookupMsg(id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &httpError{http.StatusNotFound, OpsError{Code: "not_found",
			Message: fmt.Sprintf("no message %s on its home shard %d", id, id.Shard),
			Hint:    "check the msg_id; a follower that is behind may not have applied it yet"}}
	}
	rep := &TraceReport{Node: s.cfg.NodeID, MsgID: id.String(), HomeShard: uint32(home), Conv: conv,
		ConvSeq: uint64(seq), Recalled: recalled, Scan: scan, Users: []TraceUser{}}
	kind, members, err := state.ConvMembers(conv)
	if err != nil {
		return nil, err
	}
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

	users := slices.Clone(members)
	if retained {
		users = append(users, item.Recipients...)
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
	for _, uid := range users {
		tu, err := s.traceUser(id, uid, scan, slices.Contains(members, uid), rep.Outbox)
		if err != nil {
			return nil, err
		}
		rep.Users = append(rep.Users, tu)
	}
	return rep, nil
}

// traceUser finds message id in uid's log and reports the fan-out state and device cursors.
func (s *Server) traceUser(id log.MsgID, uid string, scan int, member bool, ob TraceOutbox) (TraceUser, error) {
	shard := s.slots.UserShard(uid)
	tu := TraceUser{User: uid, Shard: uint32(shard), Member: member, Devices: []TraceDevice{}}
	if ob.Retained {
		named := slices.Contains(ob.Recipients, uid)
		tu.Recipient = &named
	}
	state, err := s.node.State(shard)
	if errors.Is(err, raftstore.ErrNoShard) {
		tu.Status = TraceUnavailable
		tu.Note = fmt.Sprintf("shard %d is not hosted on this node: ask a node that hosts it", shard)
		return tu, nil
	}
	if err != nil {
		return tu, err
	}
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
