package syncd

import (
	"context"
	"errors"
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
	res, err := ss.s.node.Propose(ctx, ss.s.slots.ConvShard(app.Conv), raftstore.AppendCommand(app))
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

// serveSync streams the user's log to the device from its cursor: contiguous batches, then new
// entries as they are appended, heartbeats with the head while idle, and the explicit answers of
// G3 (too old, epoch changed, rebase), after which the stream ends. The device's upstream frames
// are read concurrently (readUpstream): cursor acks are stored, coalesced, anything else is
// answered. A newer sync stream of the same device on this node supersedes this one: it ends
// with Error{superseded}.
func (ss *session) serveSync(ctx context.Context, st transport.Stream, r *proto.Reader, start *proto.SyncStart) {
	w := &streamWriter{ss: ss, st: st}
	if err := start.Validate(); err != nil {
		e := wireError(ss.s.logger, 0, err)
		w.send(e)
		st.CancelRead(uint64(e.Code))
		return
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	me := &liveSync{end: cancel}
	ss.s.syncs.take(ss.key(), me)
	defer ss.s.syncs.release(ss.key(), me)
	// An ending stream does not wait long for a device that does not read: its last frame gets
	// a second to leave.
	defer context.AfterFunc(ctx, func() { w.cutOff(time.Second) })()
	ss.s.metrics.syncStreamOpened()
	defer ss.s.metrics.syncStreamClosed()

	subs, final := ss.subLogs(start)
	defer subs.close()
	var wg sync.WaitGroup
	if final == nil {
		wg.Add(1)
		go func() { // the device's frames; the end of its side ends the sync
			defer wg.Done()
			cancel(ss.readUpstream(r, w, subs))
		}()
		final = ss.syncSubLogs(ctx, w, start, subs)
	}
	code := proto.Code(0)
	var reset *resetCause
	switch cause := context.Cause(ctx); {
	case final != nil:
		if w.send(final) == nil {
			if e, ok := final.(*proto.Error); ok {
				code = e.Code
			}
		}
	case errors.Is(cause, errSuperseded):
		code = proto.CodeSuperseded
		if w.send(&proto.Error{Code: code, Message: "another sync stream of this device replaced this one"}) != nil {
			st.CancelWrite(uint64(code)) // the Error could not go: the reset carries the code
		}
	case errors.As(cause, &reset):
		code = reset.code // its Error went out already
	}
	if w.failed() && code != proto.CodeSuperseded {
		st.CancelWrite(uint64(code)) // part of a frame may be on the stream: never end it cleanly
	}
	st.CancelRead(uint64(code)) // ends readUpstream
	wg.Wait()
}

// followMove finds where a log went when the shard a sync stream reads answered that it is not
// served there (log.ErrMoved): the shard the cluster map routes it to now, with a reader of it.
// Until this node's map has switched (a move's last steps take a few commits) it waits a little
// and gives the same shard back; it gives up, with the error, once the log has been elsewhere
// for longer than a move's switch can take, and the device reconnects.
func (ss *session) followMove(ctx context.Context, sl *subLog, shard raftstore.ShardID, since *time.Time) (shardReader, raftstore.ShardID, error) {
	if since.IsZero() {
		*since = time.Now()
	}
	if time.Since(*since) > moveFollowLimit {
		return nil, shard, fmt.Errorf("%w: log %s has not been found on its shards for %v", log.ErrMoved, sl.id, moveFollowLimit)
	}
	next := ss.route(sl)
	if next == shard {
		select {
		case <-ctx.Done():
			return nil, shard, ctx.Err()
		case <-time.After(moveRetry / 4):
		}
	}
	state, err := ss.s.reader(ctx, next)
	return state, next, err
}

// route returns the shard that holds sl's log now: the user's shard of a sub-log, the group's of
// a source.
func (ss *session) route(sl *subLog) raftstore.ShardID {
	if sl.src != nil {
		return ss.s.slots.ConvShard(sl.id)
	}
	return ss.s.slots.UserShard(sl.id)
}

// moveFollowLimit bounds how long a sync stream follows a log that is between shards.
const moveFollowLimit = 10 * time.Second

// syncLog is serveSync's sending side for one log of the stream: a sub-log of the user's stream,
// or a large group's conversation log it follows as a source (sources.go), within the user's
// membership periods there. It returns the frame that ends the stream (TooOld, EpochChanged,
// Rebase or an Error), or nil when ctx ended, a write failed, or a source has nothing more for
// the user (its SourceEnd sent).
func (ss *session) syncLog(ctx context.Context, w *streamWriter, sl *subLog, start *proto.SyncStart) proto.Frame {
	if sl.gate != nil && !sl.own.wait(ctx, *sl.gate) {
		return nil
	}
	shard := ss.route(sl)
	state, err := ss.s.reader(ctx, shard)
	if err != nil {
		return wireError(ss.s.logger, 0, err)
	}
	maxBatch := int(ss.s.cfg.Limits.MaxBatch)
	if start.MaxBatch > 0 && int(start.MaxBatch) < maxBatch {
		maxBatch = int(start.MaxBatch)
	}
	heartbeat := time.Duration(ss.s.cfg.Limits.HeartbeatMs) * time.Millisecond
	epoch, pos := sl.from.Epoch, sl.from.Pos
	source := ""
	if sl.src != nil {
		source = sl.id
	}
	first := true
	firstBatch := true     // of a source: it says where it starts (after)
	live := false          // caught up once: later entries are pushed as they come, so their delay counts
	stale := false         // the replica read was found stale while idle, and no heartbeat sent since
	heldLast := false      // the last read's replica held its lease
	var lastSent time.Time // of the last batch, heartbeat or stale frame (or its turn, see idleStale)
	room := ss.s.pageRoom()
	var batch syncBatch      // each read's entries, encoded into the next Batch frame
	var movedSince time.Time // when reads first found the log moved, while they do
	for ctx.Err() == nil {
		if f := sl.mapChange(); f != nil {
			return f
		}
		lim := log.Limit{Count: maxBatch, Bytes: room} // stored bytes: about what the batch keeps
		// How long a remote replica may hold its answer (a long poll) for the log to grow.
		wait := max(heartbeat-time.Since(lastSent), 100*time.Millisecond)
		if !live && !stale || stale && heldLast {
			// A heartbeat is owed as soon as the stream is caught up (first, or with the lease
			// back): a remote replica answers at once rather than an interval later.
			wait = 0
		}
		h := hop{from: pos + 1, after: pos}
		var changed <-chan struct{}
		var rd userRead
		if sl.src != nil {
			changed = sl.set.changes(sl.src)
			next, ok, tooOld := sl.set.next(sl.src, pos)
			switch {
			case tooOld:
				return &proto.TooOld{Epoch: proto.Epoch(epoch), First: proto.Position(sl.set.firstKept(sl.src) + 1), Head: proto.Position(pos), Source: source}
			case !ok:
				if err := w.send(&proto.SourceEnd{Source: source, Last: proto.Position(pos)}); err != nil || !sl.set.finish(sl.src, pos) {
					return nil
				}
				continue
			}
			h = next
			if h.gate != 0 && !sl.src.gateOn.reached(ctx, h.gate) {
				return nil
			}
			rd, err = ss.readSource(state, shard, sl, epoch, h.from, h.last, lim, wait, &batch)
		} else {
			rd, err = ss.readUserLog(state, shard, sl.id, epoch, pos+1, lim, wait, &batch)
		}
		if errors.Is(err, log.ErrMoved) && ctx.Err() == nil {
			// The log moved to another shard (or is moving here and is not complete): the stream
			// goes on there from the same cursor, positions unchanged.
			if state, shard, err = ss.followMove(ctx, sl, shard, &movedSince); err == nil {
				continue
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return wireError(ss.s.logger, 0, err)
		}
		movedSince = time.Time{}
		heldLast = rd.lease.Held
		res := rd.res
		info := res.Info
		if first && start.Ceiling > 0 && res.Status == log.ReadEntries && uint64(info.Head-h.after) > start.Ceiling {
			return &proto.Rebase{Epoch: proto.Epoch(info.Epoch), Head: proto.Position(info.Head), Sub: sl.sub, Source: source}
		}
		first = false
		switch res.Status {
		case log.ReadEntries:
			epoch = info.Epoch
			// Packed by encoded size as read; entries that do not fit are read again for the next batch.
			if live {
				for _, t := range batch.times {
					ss.s.metrics.observeDelivery(time.Since(time.Unix(0, t)))
				}
			}
			prev := pos
			pos = batch.last
			sl.bound.set(log.Cursor{Epoch: epoch, Pos: pos}) // before the write: the ack may come back first
			var frame []byte
			if sl.src != nil {
				// A source's first batch says where it starts, and so does one that starts a
				// later period: the positions between were not the user's.
				after := log.Position(0)
				if firstBatch || h.after != prev {
					after = h.after
				}
				frame = batch.sourceFrame(epoch, info.Head, source, after)
				firstBatch = false
			} else {
				frame = batch.frame(epoch, info.Head, sl.sub)
			}
			if err := w.sendEncoded(proto.TypeBatch, frame); err != nil {
				return nil
			}
			lastSent = time.Now()
			sl.sent.report(epoch, pos)
			if marks := batch.marks; len(marks) > 0 && sl.src == nil {
				if ss.proto < 6 {
					return sourcesNeedUpgrade(ss.user)
				}
				sl.set.note(sl, marks)
			}
		case log.ReadTooOld:
			return &proto.TooOld{Epoch: proto.Epoch(info.Epoch), First: proto.Position(info.First), Head: proto.Position(info.Head), Sub: sl.sub, Source: source}
		case log.ReadEpochChanged:
			return &proto.EpochChanged{Epoch: proto.Epoch(info.Epoch), First: proto.Position(info.First), Head: proto.Position(info.Head), Sub: sl.sub, Source: source}
		case log.ReadCaughtUp:
			if info.Epoch != 0 {
				sl.sent.report(info.Epoch, pos)
			}
			// Caught up: the batch's buffers go, so an idle stream holds none.
			batch.release()
			if sl.src != nil {
				info.Head = h.head(info.Head, pos) // no promise of positions that are not the user's
				rd.res.Info.Head = info.Head
			}
			if !rd.lease.Held { // no heartbeat: the head is not proven
				if err := ss.idleStale(ctx, w, sl, rd, &stale, &lastSent, heartbeat); err != nil {
					return nil
				}
				continue
			}
			// A heartbeat when the stream first catches up (or the replica is current again) and
			// then once per idle interval, not after every pushed batch: it tells an idle device
			// the head, so it can prove it has missed nothing.
			if !live || stale || time.Since(lastSent) >= heartbeat {
				hb := &proto.Heartbeat{Epoch: proto.Epoch(info.Epoch), Head: proto.Position(info.Head), ServerTime: time.Now().UnixNano(), Sub: sl.sub, Source: source}
				if err := w.send(hb); err != nil {
					return nil
				}
				lastSent, stale = time.Now(), false
			}
			live = true
			select {
			case <-ctx.Done():
			case <-rd.wake:
			case <-rd.leaseCh:
			case <-sl.mapChanged:
			case <-changed:
			case <-time.After(heartbeat - time.Since(lastSent)):
			}
		}
	}
	return nil
}

// userRead is one read of the user's log by a sync stream, with how current the replica read is.
type userRead struct {
	res     log.Read
	lease   raftstore.Lease // of the replica read, as of just before the read
	wake    <-chan struct{} // closed when the log may have grown since
	leaseCh <-chan struct{} // closed when the lease may have changed since (nil: see wake)
}

// readUserLog reads the user's log from from, its entries into batch (syncBatch.readInto). A
// local replica is read at once, wake comes from the notifier and leaseCh from the replica's
// lease (raftstore.Node.WatchLease), both taken before the read, so a change after it wakes the
// stream. A remote replica waits up to wait for the log to grow or its lease to change before it
// answers (a long poll), so wake is closed already and the lease is the one its answer carries;
// when none can be reached, it answers "caught up" at the head last read, not holding the lease,
// and wake closes after a second, when the stream tries again (remoteReader.readUserWait). from 0
// means the cursor is at the last position there can be (2⁶⁴−1): nothing comes after it, ever, so
// the answer is caught up (or epoch changed) and wake never closes.
func (ss *session) readUserLog(rd shardReader, shard raftstore.ShardID, id string, epoch log.Epoch, from log.Position, lim log.Limit, wait time.Duration, batch *syncBatch) (userRead, error) {
	if from == 0 {
		info, err := rd.UserInfo(id)
		if err != nil {
			return userRead{}, err
		}
		status := log.ReadCaughtUp
		if epoch != 0 && epoch != info.Epoch {
			status = log.ReadEpochChanged
		}
		l := raftstore.Lease{Held: true} // a remote replica's lease comes only with a read
		if _, remote := rd.(*remoteReader); !remote {
			if l, _, err = ss.s.node.WatchLease(shard); err != nil {
				return userRead{}, err
			}
		}
		return userRead{res: log.Read{Status: status, Info: info}, lease: l}, nil
	}
	if remote, ok := rd.(*remoteReader); ok {
		res, l, reached, err := remote.readUserWait(id, epoch, from, lim, wait)
		batch.take(&res, ss.s.pageRoom())
		out := userRead{res: res, lease: l, wake: closedChan}
		if !reached {
			out.wake = after(min(wait, time.Second)) // not a long poll: do not ask again in a loop
		}
		return out, err
	}
	wake := ss.s.notes.wait(shard, id) // before reading, so an append after the read wakes us
	l, leaseCh, err := ss.s.node.WatchLease(shard)
	if err != nil {
		return userRead{}, err // the replica went away (moved): the device resyncs elsewhere
	}
	res, err := batch.readInto(rd, id, epoch, from, lim, ss.s.pageRoom())
	return userRead{res: res, lease: l, wake: wake, leaseCh: leaseCh}, err
}

// after returns a channel closed once d has passed, without a goroutine.
func after(d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(d, func() { close(ch) })
	return ch
}

// idleStale is the idle part of a sync stream while the replica it reads does not hold its lease:
// a Heartbeat would claim a head the replica cannot vouch for (it may be cut off from its shard's
// leader while the others go on), so the stream sends Stale instead — when it finds the lease
// lapsed, then once per heartbeat interval, which also keeps the stream from looking dead — and
// waits for the log to grow, the lease to change, the next interval or the stream's end. A
// revision-1 connection, whose client does not know Stale, is sent nothing: its client's silence
// check restarts the stream after three intervals. The first Heartbeat after it goes out as soon as
// the lease is held again (serveSync).
func (ss *session) idleStale(ctx context.Context, w *streamWriter, sl *subLog, rd userRead, stale *bool, lastSent *time.Time, heartbeat time.Duration) error {
	if !*stale || time.Since(*lastSent) >= heartbeat {
		if ss.proto >= 2 {
			info := rd.res.Info
			f := &proto.Stale{Epoch: proto.Epoch(info.Epoch), Head: proto.Position(info.Head), UnheardMs: uint64(max(rd.lease.Unheard.Milliseconds(), 1)), Sub: sl.sub}
			if err := w.send(f); err != nil {
				return err
			}
		}
		if !*stale {
			ss.s.metrics.syncStale()
		}
		*stale, *lastSent = true, time.Now() // also when nothing was sent: the interval paces the next turn
	}
	select {
	case <-ctx.Done():
	case <-rd.wake:
	case <-rd.leaseCh:
	case <-sl.mapChanged:
	case <-time.After(heartbeat - time.Since(*lastSent)):
	}
	return nil
}

// closedChan is a closed channel: a wait on it returns at once.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// cursorStore replicates a device's newest acknowledged cursor, at most once a second, and once
// more when the sync stream ends. Losing a cursor update only causes re-delivery (clients dedup by
// msg_id), so coalescing is safe. It keeps no goroutine while idle: a timer fires the next store.
type cursorStore struct {
	ss  *session
	log string // the user log the cursor is in: the user's, or one of its sub-logs

	mu      sync.Mutex
	latest  log.Cursor
	stored  log.Cursor
	last    time.Time   // when the last store began
	timer   *time.Timer // pending store, if any
	closed  bool
	flushes sync.WaitGroup // stores in progress
}

// ack records a cursor the device acknowledged and schedules its store.
func (c *cursorStore) ack(cur log.Cursor) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.latest = cur
	if c.closed || c.timer != nil {
		return
	}
	c.flushes.Add(1)
	c.timer = time.AfterFunc(max(0, time.Second-time.Since(c.last)), func() {
		defer c.flushes.Done()
		c.flush(2 * time.Second)
	})
}

func (c *cursorStore) flush(timeout time.Duration) {
	c.mu.Lock()
	cur, stored := c.latest, c.stored
	c.timer, c.last = nil, time.Now()
	c.mu.Unlock()
	if cur == stored || cur.Pos == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := raftstore.CursorCommand(&log.CursorUpdate{UID: c.log, Device: c.ss.device, Cursor: cur})
	// Routed at every store: a user whose log moved to another shard stores it there.
	if _, err := c.ss.s.node.Propose(ctx, c.ss.s.slots.UserShard(c.log), cmd); err != nil {
		c.ss.s.logger.Debug("cursor not stored", "log", c.log, "device", c.ss.device, "err", err)
		return
	}
	c.mu.Lock()
	c.stored = cur
	c.mu.Unlock()
}

// close stores the newest cursor one last time and waits for stores in progress.
func (c *cursorStore) close() {
	c.mu.Lock()
	c.closed = true
	if c.timer != nil && c.timer.Stop() {
		c.timer = nil
		c.flushes.Done()
	}
	c.mu.Unlock()
	c.flushes.Wait()
	c.flush(2 * time.Second)
}
