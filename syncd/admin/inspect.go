package admin

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/peer"
)

// The inspect endpoints answer an operator's two questions about delivery: where does a user's
// device stand in its log (GET /v1/cursors), and where did a message go (GET /v1/trace). They are
// read-only and read replicas, like sync streams: this node's replica of a shard when it hosts one,
// else a replica on a node that does (through syncd/peer), so any node of a cluster gives the whole
// answer. A follower may answer a little behind its leader; each report names the node whose
// replica answered. The JSON shapes are syncd/adminapi's report types; errors are [adminapi.OpsError],
// with the codes "bad_request" (400), "not_found" (404), "no_shard" and "unavailable" (503: no
// replica of a shard concerned could be read) and "internal" (500).

// handleInspections registers the per-shard parts of the operator views, which other nodes ask
// this node's replicas for (and this node runs on its own through the same codec).
func (s *Server) handleInspections(p *peer.Peer) {
	p.Handle(peer.OpCursors, s.opCursors)
	p.Handle(peer.OpTraceHome, s.opTraceHome)
	p.Handle(peer.OpTraceUsers, s.opTraceUsers)
	p.Handle(peer.OpDeadLetters, s.opDeadLetters)
	p.Handle(peer.OpDeadLetter, s.opDeadLetter)
}

// inspectRoutes adds GET /v1/cursors and GET /v1/trace to the admin mux.
func (s *Server) inspectRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/cursors", s.serveCursors)
	mux.HandleFunc("GET /v1/trace", s.serveTrace)
}

// httpError is an error answer on its way to the client.
type httpError struct {
	status int
	body   adminapi.OpsError
}

func (e *httpError) Error() string { return e.body.Message }

func badRequest(msg, hint string) error {
	return &httpError{http.StatusBadRequest, adminapi.OpsError{Code: "bad_request", Message: msg, Hint: hint}}
}

// shardError turns an error from inspecting shard (peer.Run) into its answer: 503 when no
// replica of the shard could be read (this node hosts none and no node that does answered), else
// 500 (logged by reply).
func shardError(shard raftstore.ShardID, err error) error {
	switch {
	case errors.Is(err, raftstore.ErrNoShard):
		return &httpError{http.StatusServiceUnavailable, adminapi.OpsError{Code: "no_shard",
			Message: fmt.Sprintf("no replica of shard %d could be read: this node does not host it and no node that does answered (%v)", shard, err),
			Hint:    "check the cluster with syncctl cluster status: the shard may be moving, or every node hosting it down"}}
	case errors.Is(err, raftstore.ErrUnreachable):
		return &httpError{http.StatusServiceUnavailable, adminapi.OpsError{Code: "unavailable",
			Message: fmt.Sprintf("no replica of shard %d could be read: the nodes hosting it did not answer (%v)", shard, err),
			Hint:    "retry; if it persists, check the nodes hosting the shard with syncctl cluster status"}}
	}
	return err
}

// reply writes v as JSON, or err as an adminapi.OpsError; errors other than an httpError are logged.
func (s *Server) reply(w http.ResponseWriter, r *http.Request, v any, err error) {
	if err == nil {
		writeJSON(w, http.StatusOK, v)
		return
	}
	var he *httpError
	if !errors.As(err, &he) {
		s.logger.Error("admin request failed", "path", r.URL.Path, "err", err)
		he = &httpError{http.StatusInternalServerError, adminapi.OpsError{Code: "internal", Message: err.Error(),
			Hint: "the error was logged by the server; check its logs and storage"}}
	}
	writeJSON(w, he.status, he.body)
}

func (s *Server) serveCursors(w http.ResponseWriter, r *http.Request) {
	rep, err := s.cursors(r.Context(), r.URL.Query().Get("user"))
	s.reply(w, r, rep, err)
}

// cursors reports uid's log and device cursors, from a replica of the user's shard wherever one
// is (through syncd/peer).
func (s *Server) cursors(ctx context.Context, uid string) (*adminapi.CursorReport, error) {
	if !log.ValidLog(uid) {
		return nil, badRequest(fmt.Sprintf("bad or missing user %q", uid), "pass ?user=<uid> (or a sub-log's id, \"<uid> <i>\")")
	}
	shard := s.slots.UserShard(uid)
	var rep adminapi.CursorReport
	if err := s.peer.Run(ctx, shard, peer.OpCursors, false, peer.CursorsArgs{User: uid}, &rep); err != nil {
		return nil, shardError(shard, err)
	}
	return &rep, nil
}

// opCursors is the "cursors" inspection: the whole CursorReport of one user, from a replica of
// the user's shard.
func (s *Server) opCursors(_ context.Context, state *log.Shard, req peer.Request) (any, error) {
	var a peer.CursorsArgs
	if err := req.Decode(&a); err != nil {
		return nil, err
	}
	shard := req.Shard
	info, err := state.UserInfo(a.User)
	if err != nil {
		return nil, err
	}
	cs, err := state.Cursors(a.User)
	if err != nil {
		return nil, err
	}
	rep := &adminapi.CursorReport{Node: s.node.ID(), User: a.User, Shard: uint32(shard), Exists: info.Epoch != 0,
		Epoch: uint64(info.Epoch), First: uint64(info.First), Head: uint64(info.Head), Devices: []adminapi.DeviceCursor{}}
	for _, c := range cs {
		d := adminapi.DeviceCursor{Device: c.Device, Epoch: uint64(c.Cursor.Epoch), Pos: uint64(c.Cursor.Pos)}
		if c.Cursor.Epoch == info.Epoch {
			behind := uint64(info.Head - min(c.Cursor.Pos, info.Head))
			d.Behind = &behind
		} else {
			d.EpochChanged = true
			// Whether the cursor holds across a restore is what a sync from it would be told.
			if c.Cursor.Pos < math.MaxUint64 {
				rd, err := state.ReadUser(a.User, c.Cursor.Epoch, c.Cursor.Pos+1, log.Limit{Count: 1})
				if err != nil {
					return nil, err
				}
				d.Continues = rd.Info.Continues
			}
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
// each user's part from a replica of that user's shard, wherever those are (through syncd/peer).
func (s *Server) trace(r *http.Request) (*adminapi.TraceReport, error) {
	q := r.URL.Query()
	raw := q.Get("msg_id")
	if raw == "" {
		return nil, badRequest("missing msg_id", "pass ?msg_id=<shard.index.sub>, as send and pull print it")
	}
	id, err := log.ParseMsgID(raw)
	if err != nil {
		return nil, badRequest(err.Error(), "a msg_id looks like 3.17.0 (shard.index.sub), as send and pull print it")
	}
	scan := adminapi.DefaultTraceScan
	if v := q.Get("scan"); v != "" {
		if scan, err = strconv.Atoi(v); err != nil || scan < 1 || scan > adminapi.MaxTraceScan {
			return nil, badRequest(fmt.Sprintf("bad scan %q", v), fmt.Sprintf("pass ?scan=N with 1 <= N <= %d", adminapi.MaxTraceScan))
		}
	}
	only := q.Get("user")
	if only != "" && !log.ValidID(only) {
		return nil, badRequest(fmt.Sprintf("bad user %q", only), "pass ?user=<uid> to trace one user, or leave it out")
	}
	home := raftstore.ShardID(id.Shard)
	if !slices.Contains(s.slots.Shards(), home) {
		return nil, &httpError{http.StatusNotFound, adminapi.OpsError{Code: "not_found",
			Message: fmt.Sprintf("no message %s: there is no shard %d", id, id.Shard),
			Hint:    "check the msg_id: its first number is the shard that assigned it"}}
	}
	var h peer.TraceHome
	if err := s.peer.Run(r.Context(), home, peer.OpTraceHome, false, peer.TraceHomeArgs{MsgID: peer.FromMsgID(id)}, &h); err != nil {
		return nil, shardError(home, err)
	}
	if !h.Found {
		return nil, &httpError{http.StatusNotFound, adminapi.OpsError{Code: "not_found",
			Message: fmt.Sprintf("no message %s on its home shard %d", id, id.Shard),
			Hint:    "check the msg_id; a replica that is behind may not have applied it yet"}}
	}
	rep := &h.Report
	rep.Scan, rep.Users = scan, []adminapi.TraceUser{}
	if cur := s.slots.ConvShard(rep.Conv); h.ConvMoved && cur != home {
		// The conversation moved after the message was sent: its members and history are on
		// its new shard, which holds the message's index entry too.
		var there peer.TraceHome
		if err := s.peer.Run(r.Context(), cur, peer.OpTraceHome, false, peer.TraceHomeArgs{MsgID: peer.FromMsgID(id)}, &there); err != nil {
			return nil, shardError(cur, err)
		}
		if there.Found && !there.ConvMoved {
			h.Members, rep.ConvKind = there.Members, there.Report.ConvKind
			if there.Report.Entry != nil && there.Report.Entry.Source == "history" || rep.Entry == nil {
				rep.Entry = there.Report.Entry
			}
		}
	}

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
	if len(users) > adminapi.MaxTraceMembers {
		users, rep.UsersTruncated = users[:adminapi.MaxTraceMembers], true
	}
	// One inspection per shard concerned, not per user: a trace of a large group costs as many
	// calls as there are shards, one after the other (they are few; the scans dominate).
	var order []raftstore.ShardID
	byShard := map[raftstore.ShardID][]peer.TraceUserArgs{}
	for _, uid := range users {
		shard := s.slots.UserShard(uid)
		if byShard[shard] == nil {
			order = append(order, shard)
		}
		byShard[shard] = append(byShard[shard], peer.TraceUserArgs{User: uid, Member: slices.Contains(h.Members, uid)})
	}
	traced := map[string]adminapi.TraceUser{}
	for _, shard := range order {
		args := peer.TraceUsersArgs{MsgID: peer.FromMsgID(id), Scan: scan, Outbox: rep.Outbox, Users: byShard[shard]}
		var got []adminapi.TraceUser
		err := s.peer.Run(r.Context(), shard, peer.OpTraceUsers, false, args, &got)
		if errors.Is(err, raftstore.ErrNoShard) || errors.Is(err, raftstore.ErrUnreachable) {
			// The rest of the trace still helps: say which users could not be read, and why.
			got = got[:0]
			for _, u := range args.Users {
				tu := newTraceUser(u.User, shard, u.Member, rep.Outbox)
				tu.Status = adminapi.TraceUnavailable
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

// opTraceHome is the "trace_home" inspection: the part of a trace a replica of the message's
// home shard knows (the conversation entry, the outbox, the members).
func (s *Server) opTraceHome(_ context.Context, state *log.Shard, req peer.Request) (any, error) {
	var a peer.TraceHomeArgs
	if err := req.Decode(&a); err != nil {
		return nil, err
	}
	shard, id := req.Shard, a.MsgID.Log()
	conv, seq, recalled, ok, err := state.LookupMsg(id)
	if err != nil || !ok {
		return peer.TraceHome{}, err
	}
	h := peer.TraceHome{Found: true, Report: adminapi.TraceReport{Node: s.node.ID(), MsgID: id.String(), HomeShard: uint32(shard),
		Conv: conv, ConvSeq: uint64(seq), Recalled: recalled}}
	rep := &h.Report
	kind, members, err := state.ConvMembers(conv)
	switch {
	case errors.Is(err, log.ErrMoved):
		h.ConvMoved = true // its members and history are on its new shard; the outbox is here
	case err != nil:
		return nil, err
	default:
		h.Members = members
		rep.ConvKind = map[log.ConvKind]string{log.ConvDirect: "direct", log.ConvGroup: "group"}[kind]
		read, err := state.ReadConv(conv, 0, seq, log.Limit{Count: 1})
		if err != nil {
			return nil, err
		}
		if read.Status == log.ReadEntries {
			rep.Entry = traceEntry("history", &read.Entries[0])
		}
	}
	info, err := state.Outbox()
	if err != nil {
		return nil, err
	}
	rep.Outbox = adminapi.TraceOutbox{First: info.First, Head: info.Head}
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

// opTraceUsers is the "trace_users" inspection: a adminapi.TraceUser per user asked, in the same order,
// from a replica of their shard.
func (s *Server) opTraceUsers(_ context.Context, state *log.Shard, req peer.Request) (any, error) {
	var a peer.TraceUsersArgs
	if err := req.Decode(&a); err != nil {
		return nil, err
	}
	shard := req.Shard
	// The asking node bounds both already (?scan, and a trace's member count); a node that does
	// not must still not make this one scan whole logs for thousands of users.
	if len(a.Users) > adminapi.MaxTraceMembers {
		return nil, fmt.Errorf("%w: trace of %d users, at most %d", log.ErrInvalid, len(a.Users), adminapi.MaxTraceMembers)
	}
	scan := min(max(a.Scan, 1), adminapi.MaxTraceScan)
	out := make([]adminapi.TraceUser, 0, len(a.Users))
	for _, u := range a.Users {
		tu, err := traceUser(state, shard, a.MsgID.Log(), u.User, scan, u.Member, a.Outbox)
		if err != nil {
			return nil, err
		}
		tu.Node = s.node.ID()
		out = append(out, tu)
	}
	return out, nil
}

// newTraceUser starts the adminapi.TraceUser of uid on shard: what the trace knows without reading it.
func newTraceUser(uid string, shard raftstore.ShardID, member bool, ob adminapi.TraceOutbox) adminapi.TraceUser {
	tu := adminapi.TraceUser{User: uid, Shard: uint32(shard), Member: member, Devices: []adminapi.TraceDevice{}}
	if ob.Retained {
		named := slices.Contains(ob.Recipients, uid)
		tu.Recipient = &named
	}
	return tu
}

// traceUser finds message id in uid's log on state, a replica of uid's shard, and reports the
// fan-out state and device cursors.
func traceUser(state *log.Shard, shard raftstore.ShardID, id log.MsgID, uid string, scan int, member bool, ob adminapi.TraceOutbox) (adminapi.TraceUser, error) {
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
		tu.Status = adminapi.TraceDelivered
	case ob.Retained && !*tu.Recipient:
		tu.Status = adminapi.TraceNotRecipient
		tu.Note = "the message was not addressed to this user (not a member then, or a receipt that does not concern them)"
	case ob.Retained && tu.SourceMark < ob.Pos:
		tu.Status = adminapi.TracePending
		tu.Note = fmt.Sprintf("not delivered yet: fan-out to shard %d has applied outbox positions up to %d, the message is at %d",
			shard, tu.SourceMark, ob.Pos)
	default:
		tu.Status = adminapi.TraceNotFound
		tu.Note = notFoundNote(scanned, scan, ob.Retained)
	}
	cs, err := state.Cursors(uid)
	if err != nil {
		return tu, err
	}
	for _, c := range cs {
		tu.Devices = append(tu.Devices, adminapi.TraceDevice{Device: c.Device, Epoch: uint64(c.Cursor.Epoch), Pos: uint64(c.Cursor.Pos),
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

func traceEntry(source string, e *log.Entry) *adminapi.TraceEntry {
	out := &adminapi.TraceEntry{Source: source, Kind: e.Kind.String(), Sender: e.Sender, Time: e.Time,
		BodyBytes: len(e.Body), ReadUpTo: uint64(e.ReadUpTo), Members: e.Members}
	if !e.Target.IsZero() {
		out.Target = e.Target.String()
	}
	return out
}
