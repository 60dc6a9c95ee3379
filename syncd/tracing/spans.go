package tracing

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/syncd-dev/syncd/log"
)

// The spans' names, one per step of a message (the package comment).
const (
	SpanSend      = "syncd.send"
	SpanCommit    = "syncd.commit"
	SpanFanout    = "syncd.fanout"
	SpanDeliver   = "syncd.deliver"
	SpanPush      = "syncd.push"
	SpanDeviceAck = "syncd.device_ack"
)

// The attributes' keys. Ids and counts only: no body, no user or device id, no token.
const (
	AttrMsgID       = "syncd.msg_id"       // string, shard.index.sub (send)
	AttrMsgIDs      = "syncd.msg_ids"      // []string, at most maxLinks (fan-out, push)
	AttrConvRef     = "syncd.conv_ref"     // string, the keyed hash of the conversation id (send)
	AttrKind        = "syncd.kind"         // string, the entry kind: message, receipt, recall… (send)
	AttrShard       = "syncd.shard"        // int, the shard the step writes or reads
	AttrSourceShard = "syncd.source_shard" // int, the fan-out's source (the conversation's home)
	AttrSize        = "syncd.size"         // int, the body's bytes (send)
	AttrConvSeq     = "syncd.conv_seq"     // int, the position in the conversation log (send)
	AttrDuplicate   = "syncd.duplicate"    // bool, a resend answered with the original ack (send)
	AttrEntries     = "syncd.entries"      // int, the entries of a batch or frame
	AttrAppended    = "syncd.appended"     // int, the user-log entries a delivery wrote
	AttrBatches     = "syncd.batches"      // int, the sources' batches the delivery's proposal carried
	AttrPosition    = "syncd.position"     // int, the last user-log position of a push, or the one acked
	AttrLive        = "syncd.live"         // bool, a push of a caught-up stream (not a catch-up)
)

// maxLinks bounds the links of a fan-out or push span and the ids in its syncd.msg_ids: a
// batch of 256 entries is not 256 links.
const maxLinks = 32

// offSpan is what the span methods return when tracing is off: a value held in an interface
// once, so that returning it allocates nothing.
var offSpan trace.Span = noop.Span{}

// StartSend starts the span of a mutation of kind to conv, to be replicated by shard, with a
// body of size bytes: from its admission to its ack. EndSend ends it. With tracing off it
// returns ctx and a span that does nothing, allocating nothing.
func (t *Tracer) StartSend(ctx context.Context, kind log.Kind, conv string, shard log.ShardID, size int) (context.Context, trace.Span) {
	tr := t.tracer()
	if tr == nil {
		return ctx, offSpan
	}
	ctx, span := tr.Start(ctx, SpanSend, trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() { // an unsampled send costs no attributes
		span.SetAttributes(attribute.String(AttrKind, kind.String()), attribute.String(AttrConvRef, t.convRef(conv)),
			attribute.Int64(AttrShard, int64(shard)), attribute.Int(AttrSize, size))
	}
	return ctx, span
}

// StartCommit starts the span of the Raft commit of the send in ctx to shard, from the
// proposal to its application (raftstore.Node.Propose, forwarded or not). EndCommit ends it.
func (t *Tracer) StartCommit(ctx context.Context, shard log.ShardID) trace.Span {
	tr := t.tracer()
	if tr == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return offSpan
	}
	_, span := tr.Start(ctx, SpanCommit, trace.WithAttributes(attribute.Int64(AttrShard, int64(shard))))
	return span
}

// EndCommit ends a commit span with the proposal's outcome.
func (t *Tracer) EndCommit(span trace.Span, err error) {
	if !span.IsRecording() {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// EndSend ends a send span with its outcome, and remembers the span's context under the
// message's id for the steps that follow on this node (the fan-out, the push), sampled or not.
// A duplicate (a resend) is not remembered again: the original send's trace is the message's.
func (t *Tracer) EndSend(span trace.Span, res log.AppendResult, err error) {
	if t == nil {
		return
	}
	if sc := span.SpanContext(); err == nil && sc.IsValid() && !res.Duplicate && !res.NoOp && !res.MsgID.IsZero() {
		t.reg.put(res.MsgID, sc)
	}
	if !span.IsRecording() {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(attribute.String(AttrMsgID, res.MsgID.String()), attribute.Int64(AttrConvSeq, int64(res.ConvSeq)),
			attribute.Bool(AttrDuplicate, res.Duplicate))
	}
	span.End()
}

// Delivery is one fan-out batch's journey to its destination, as the fan-out measured it.
type Delivery struct {
	Source, Dest log.ShardID
	Items        []log.Delivery
	// Began is when the batch was handed over; Proposed and Answered bound the destination's
	// proposal that carried it (zero Proposed: it was never proposed, the delivery timed out
	// first), together with Batches other sources' batches.
	Began, Proposed, Answered time.Time
	Batches                   int
	Appended                  int
	Err                       error
}

// Delivered records the fan-out of a batch (SpanFanout, from Began to Answered) and, when it was
// proposed, its delivery into the recipients' logs on the destination (SpanDeliver, the
// destination's commit, a child of the fan-out). Called when the destination answered; an
// empty batch (a mark moved on) records nothing.
func (t *Tracer) Delivered(d Delivery) {
	tr := t.tracer()
	if tr == nil || len(d.Items) == 0 {
		return
	}
	ctx, links, ids := t.parent(len(d.Items), func(i int) log.MsgID { return d.Items[i].Entry.MsgID })
	ctx, fan := tr.Start(ctx, SpanFanout, trace.WithTimestamp(d.Began), trace.WithLinks(links...),
		trace.WithSpanKind(trace.SpanKindProducer))
	if !fan.IsRecording() {
		return
	}
	fan.SetAttributes(attribute.Int64(AttrSourceShard, int64(d.Source)), attribute.Int64(AttrShard, int64(d.Dest)),
		attribute.Int(AttrEntries, len(d.Items)), attribute.StringSlice(AttrMsgIDs, ids))
	if !d.Proposed.IsZero() {
		_, del := tr.Start(ctx, SpanDeliver, trace.WithTimestamp(d.Proposed), trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attribute.Int64(AttrShard, int64(d.Dest)), attribute.Int(AttrBatches, d.Batches),
				attribute.Int(AttrAppended, d.Appended)))
		if d.Err != nil {
			del.SetStatus(codes.Error, d.Err.Error())
		}
		del.End(trace.WithTimestamp(d.Answered))
	}
	if d.Err != nil {
		fan.SetStatus(codes.Error, d.Err.Error())
	}
	fan.End(trace.WithTimestamp(d.Answered))
}

// Pushed records the push of a frame to a device (SpanPush, from began to now): the entries ids
// of the shard's user log, up to position last. With acks, the device's ack of last is recorded
// when it comes (Acked). live says whether the stream was caught up (a push, not a catch-up).
func (t *Tracer) Pushed(acks *Acks, shard log.ShardID, ids []log.MsgID, last log.Position, live bool, began time.Time) {
	tr := t.tracer()
	if tr == nil || len(ids) == 0 {
		return
	}
	ctx, links, strIDs := t.parent(len(ids), func(i int) log.MsgID { return ids[i] })
	_, span := tr.Start(ctx, SpanPush, trace.WithTimestamp(began), trace.WithLinks(links...), trace.WithSpanKind(trace.SpanKindProducer))
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.Int64(AttrShard, int64(shard)), attribute.Int(AttrEntries, len(ids)),
		attribute.Int64(AttrPosition, int64(last)), attribute.Bool(AttrLive, live), attribute.StringSlice(AttrMsgIDs, strIDs))
	now := time.Now()
	span.End(trace.WithTimestamp(now))
	if acks != nil {
		acks.add(pendingAck{pos: last, sc: span.SpanContext(), at: now})
	}
}

// Acked records the device's ack of pos (SpanDeviceAck, a child of each push it covers, from the
// push to the ack) and forgets those pushes.
func (t *Tracer) Acked(acks *Acks, pos log.Position) {
	tr := t.tracer()
	if tr == nil {
		return
	}
	for _, p := range acks.take(pos) {
		ctx := trace.ContextWithSpanContext(context.Background(), p.sc)
		_, span := tr.Start(ctx, SpanDeviceAck, trace.WithTimestamp(p.at), trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attribute.Int64(AttrPosition, int64(pos))))
		span.End()
	}
}

// parent finds the send span contexts of the n messages id(0…n-1) in the registry: the first
// known one is the parent of the returned ctx, the others (up to maxLinks) links. With none
// known (the send came through another node, or long ago) ctx has no parent: the step starts a
// trace of its own, which the ids returned (up to maxLinks, as strings) join to the send's.
func (t *Tracer) parent(n int, id func(int) log.MsgID) (context.Context, []trace.Link, []string) {
	ctx := context.Background()
	var links []trace.Link
	var ids []string
	var parent trace.SpanContext
	for i := range n {
		m := id(i)
		if m.IsZero() {
			continue
		}
		if len(ids) < maxLinks {
			ids = append(ids, m.String())
		}
		sc, ok := t.reg.get(m)
		switch {
		case !ok:
		case !parent.IsValid():
			parent = sc
		case len(links) < maxLinks && sc.TraceID() != parent.TraceID():
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	if parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, parent)
	}
	return ctx, links, ids
}

// Acks holds the pushes of one sync stream's log waiting for the device's ack, the newest
// maxPendingAcks (a device that never acks costs no more). The zero value is ready. Safe for
// concurrent use: the stream's loop adds, its upstream reader takes.
type Acks struct {
	mu      sync.Mutex
	pending []pendingAck // by position, ascending
}

// maxPendingAcks bounds what one stream's Acks holds.
const maxPendingAcks = 64

type pendingAck struct {
	pos log.Position
	sc  trace.SpanContext // the push span's
	at  time.Time         // when the push was written
}

func (a *Acks) add(p pendingAck) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n := len(a.pending); n > 0 && a.pending[n-1].pos >= p.pos {
		a.pending = a.pending[:0] // positions went back: a new epoch or a resync, start over
	}
	if len(a.pending) == maxPendingAcks {
		a.pending = append(a.pending[:0], a.pending[1:]...)
	}
	a.pending = append(a.pending, p)
}

// take returns the pushes up to pos and forgets them.
func (a *Acks) take(pos log.Position) []pendingAck {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for n < len(a.pending) && a.pending[n].pos <= pos {
		n++
	}
	if n == 0 {
		return nil
	}
	out := append([]pendingAck(nil), a.pending[:n]...)
	a.pending = append(a.pending[:0], a.pending[n:]...)
	return out
}

// registrySize is how many messages' send contexts a node remembers: at 20 000 sends a second,
// the last 0.4 s, well beyond the fan-out's and a live push's usual delay (milliseconds); a step
// later than that starts a trace of its own, joined by msg id. Under 1 MiB.
const registrySize = 8192

// registry maps message ids to their send spans' contexts, the oldest forgotten first. Safe for
// concurrent use.
type registry struct {
	mu   sync.Mutex
	m    map[log.MsgID]trace.SpanContext
	ring []log.MsgID // insertion order; ring[next] is the oldest once full
	next int
}

func newRegistry(size int) *registry {
	return &registry{m: make(map[log.MsgID]trace.SpanContext, size), ring: make([]log.MsgID, 0, size)}
}

func (r *registry) put(id log.MsgID, sc trace.SpanContext) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.m[id]; ok {
		r.m[id] = sc
		return
	}
	if len(r.ring) < cap(r.ring) {
		r.ring = append(r.ring, id)
	} else {
		delete(r.m, r.ring[r.next])
		r.ring[r.next] = id
		r.next = (r.next + 1) % len(r.ring)
	}
	r.m[id] = sc
}

func (r *registry) get(id log.MsgID) (trace.SpanContext, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sc, ok := r.m[id]
	return sc, ok
}
