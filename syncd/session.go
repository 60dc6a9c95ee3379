package syncd

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/transport"
)

// maxInFlightPerStream bounds the requests one request stream may have being replicated at once,
// so one pipelining client cannot occupy the server; further frames wait (QUIC flow control then
// pushes back on the client).
const maxInFlightPerStream = 64

// session is one authenticated connection: a user's device. Its control stream and token
// lifecycle are in control.go.
type session struct {
	s      *Server
	conn   transport.Conn // closed by the session on a fault that ends the connection (streams.go)
	user   string
	device string
	ctl    control
	proto  uint32 // the protocol revision of the connection (Welcome.ProtoVersion)

	oversize atomic.Bool // an answer beyond max_frame was logged (send)
	answers  connAnswers // what this connection's answers hold of the budgets (answers.go)
}

// key names the session's device in the server's per-device rate limits and sync streams.
func (ss *session) key() string { return ss.user + "\x00" + ss.device }

// serveStream serves one client-opened stream. Its first frame decides its role: SyncStart
// makes it the sync stream, a request makes it a request stream. The first frame must come
// within Config.RequestIdle, like every frame of a request stream.
func (ss *session) serveStream(ctx context.Context, st transport.Stream) {
	defer st.Close()
	r := proto.NewReader(st, int(ss.s.cfg.Limits.MaxFrame))
	st.SetReadDeadline(time.Now().Add(ss.s.cfg.RequestIdle))
	f, err := r.Next()
	if start, ok := f.(*proto.SyncStart); ok && err == nil {
		st.SetReadDeadline(time.Time{}) // cursor acks may be far apart: the server's heartbeats keep it alive
		ss.serveSync(ctx, st, r, start)
		return
	}
	ss.serveRequests(ctx, st, r, f, err) // a bad first frame is answered like any bad request
}

// serveRequests answers pipelined requests on st, each as soon as it completes (responses may
// come out of order; the request id matches them up). A stream without a frame from the client
// for Config.RequestIdle is closed: it pins a goroutine and buffers for nothing. Whatever ends
// the stream, the requests already received are answered before the server's side ends (the
// caller's Close). Each request holds its share of the answer budgets until its answer is
// written; one beyond them is refused here, at once, and the stream is read no further until
// that refusal is written (answers.go).
func (ss *session) serveRequests(ctx context.Context, st transport.Stream, r *proto.Reader, first proto.Frame, firstErr error) {
	w := &streamWriter{ss: ss, st: st}
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, maxInFlightPerStream)
	for f, err := first, firstErr; ; f, err = r.Next() {
		if ctx.Err() != nil {
			return // the connection is closing: nothing to answer
		}
		code, what := classify(err)
		var msg string
		var req proto.Request
		if err != nil {
			msg = err.Error()
		} else if req, _ = f.(proto.Request); req == nil {
			code, what, msg = proto.CodeUnexpectedFrame, faultReset, "a request stream carries requests only, got "+f.FrameType().String()
		}
		switch ss.onFault(w, code, what, msg) {
		case faultSkip:
			st.SetReadDeadline(time.Now().Add(ss.s.cfg.RequestIdle))
			continue
		case faultReset:
			st.CancelRead(uint64(code))
			return
		case faultClose:
			return
		case faultEnd:
			st.CancelRead(0) // idle, or the client is gone: nothing more is read
			return
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		st.SetReadDeadline(time.Now().Add(ss.s.cfg.RequestIdle))
		held := requestCost(req, int(ss.s.cfg.Limits.MaxFrame))
		if ok, why := ss.answers.reserve(held, false); !ok {
			<-sem
			ss.s.metrics.requestRefused(refusedAnswers)
			w.send(overloaded(req.RequestID(), why, answerRetry))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			frame := ss.encodeAnswer(ss.answer(ctx, req))
			ss.answers.resize(&held, int64(len(frame))+answerOverhead) // the entries read are garbage now
			w.sendAnswer(frame)
			ss.answers.release(held)
		}()
	}
}

// answer runs one request and returns its response frame.
func (ss *session) answer(ctx context.Context, req proto.Request) proto.Frame {
	id := req.RequestID()
	if err := req.Validate(); err != nil {
		return wireError(ss.s.logger, id, err)
	}
	now := time.Now()
	if isQuery(req) {
		if ok, wait := ss.s.queries.take(ss.key(), now, 1); !ok {
			return rateLimited(id, "query rate exceeded for this device", wait)
		}
		// A query occupies the node while it reads (a remote replica's included) as a mutation
		// does while it is replicated.
		if !ss.s.inflight.enter() {
			ss.s.metrics.requestRefused(refusedInFlight)
			return overloaded(id, "requests in flight", 100*time.Millisecond)
		}
		defer ss.s.inflight.leave()
		return ss.query(req)
	}
	app, err := ss.appendFor(req)
	if err != nil {
		return wireError(ss.s.logger, id, err)
	}
	if ok, wait := ss.s.sends.take(ss.key(), now, 1); !ok {
		return rateLimited(id, "send rate exceeded for this device", wait)
	}
	if app.Kind == log.KindGroupCreate || app.Kind == log.KindMemberAdd {
		if ok, wait := ss.s.memberAdds.take(ss.user, now, float64(len(app.Members))); !ok {
			return rateLimited(id, fmt.Sprintf("this user may add at most %d members to groups per minute", ss.s.cfg.MembersPerMinute), wait)
		}
		if err := ss.s.checkGroupsPerUser(ctx, app); err != nil {
			return wireError(ss.s.logger, id, err)
		}
	}
	if !ss.s.inflight.enter() {
		ss.s.metrics.requestRefused(refusedInFlight)
		return overloaded(id, "requests in flight", 100*time.Millisecond)
	}
	defer ss.s.inflight.leave()
	ctx, cancel := context.WithTimeout(ctx, ss.s.cfg.RequestTimeout)
	defer cancel()
	began := time.Now()
	home := ss.s.slots.ConvShard(app.Conv)
	// The send's span and its commit's (syncd/tracing; nothing, allocating nothing, when off).
	ctx, span := ss.s.tracer.StartSend(ctx, app.Kind, app.Conv, home, len(app.Body))
	commit := ss.s.tracer.StartCommit(ctx, home)
	res, err := ss.s.node.Propose(ctx, home, raftstore.AppendCommand(app))
	ss.s.tracer.EndCommit(commit, err)
	defer ss.s.tracer.EndSend(span, res.Append, err) // once the ack is built
	switch {
	case log.Rejected(err):
		ss.s.metrics.observeSend(time.Since(began), sendRefused)
	case err != nil:
		ss.s.metrics.observeSend(time.Since(began), sendError)
	case res.Append.Duplicate:
		ss.s.metrics.observeSend(time.Since(began), sendDuplicate)
	default:
		ss.s.metrics.observeSend(time.Since(began), sendOK)
	}
	if err != nil {
		return wireError(ss.s.logger, id, err)
	}
	if app.Kind == log.KindReceipt && !res.Append.Duplicate {
		ss.s.observeRead(home, app.Conv, app.ReadUpTo)
	}
	return wireAck(id, app.Conv, res.Append)
}

// appendFor translates a mutation into a conversation append by this session's user: the sender
// is always the authenticated user, never a field of the request (G7).
func (ss *session) appendFor(req proto.Request) (*log.Append, error) {
	cfg := ss.s.cfg
	a := &log.Append{Sender: ss.user, DedupWindow: int64(cfg.DedupWindow), RecallWindow: int64(cfg.RecallWindow),
		MaxGroupSize: int64(cfg.MaxGroupSize), StatusFanoutLimit: int64(cfg.StatusFanoutLimit),
		LargeGroupThreshold: int64(cfg.LargeGroupThreshold)}
	switch f := req.(type) {
	case *proto.Send:
		if maxBody := int(cfg.Limits.MaxBody); len(f.Body) > maxBody { // the announced limit, maybe below proto.MaxBody
			return nil, proto.Errorf(proto.CodeTooLarge, "body of %d bytes, at most %d", len(f.Body), maxBody)
		}
		a.Conv, a.ClientMsgID, a.Kind, a.Body = f.Conv, f.ClientMsgID, log.KindMessage, f.Body
		if f.Peer != "" {
			a.Members = []string{ss.user, f.Peer}
		}
	case *proto.MarkRead:
		a.Conv, a.ClientMsgID, a.Kind, a.ReadUpTo = f.Conv, f.ClientMsgID, log.KindReceipt, log.Position(f.UpTo)
	case *proto.Recall:
		target, err := parseTarget(f.Target)
		if err != nil {
			return nil, err
		}
		a.Conv, a.ClientMsgID, a.Kind, a.Target = f.Conv, f.ClientMsgID, log.KindRecall, target
	case *proto.Edit:
		if maxBody := int(cfg.Limits.MaxBody); len(f.Body) > maxBody {
			return nil, proto.Errorf(proto.CodeTooLarge, "body of %d bytes, at most %d", len(f.Body), maxBody)
		}
		target, err := parseTarget(f.Target)
		if err != nil {
			return nil, err
		}
		a.Conv, a.ClientMsgID, a.Kind, a.Target, a.Body = f.Conv, f.ClientMsgID, log.KindEdit, target, f.Body
	case *proto.React:
		target, err := parseTarget(f.Target)
		if err != nil {
			return nil, err
		}
		a.Conv, a.ClientMsgID, a.Kind, a.Target, a.Reaction, a.Remove = f.Conv, f.ClientMsgID, log.KindReaction, target, f.Reaction, f.Remove
	case *proto.CreateGroup:
		a.Conv, a.ClientMsgID, a.Kind, a.Members = f.Conv, f.ClientMsgID, log.KindGroupCreate, f.Members
	case *proto.AddMembers:
		a.Conv, a.ClientMsgID, a.Kind, a.Members = f.Conv, f.ClientMsgID, log.KindMemberAdd, f.Members
	case *proto.RemoveMembers:
		a.Conv, a.ClientMsgID, a.Kind, a.Members = f.Conv, f.ClientMsgID, log.KindMemberRemove, f.Members
	case *proto.SetRole:
		a.Conv, a.ClientMsgID, a.Kind, a.Members, a.Role = f.Conv, f.ClientMsgID, log.KindRoleChange, f.Members, log.Role(f.Role)
	default:
		return nil, proto.Errorf(proto.CodeUnexpectedFrame, "%v is not served yet", req.FrameType())
	}
	return a, nil
}

// parseTarget reads the msg_id a Recall, Edit or React names.
func parseTarget(id proto.MsgID) (log.MsgID, error) {
	target, err := log.ParseMsgID(string(id))
	if err != nil {
		return log.MsgID{}, proto.Errorf(proto.CodeInvalidArgument, "target: %v", err)
	}
	return target, nil
}
