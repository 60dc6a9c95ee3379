package tracing

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/syncd-dev/syncd/log"
)

// TestOffIsNilAndFree: without an endpoint New makes nothing, and every step of the send and
// sync paths on the nil Tracer allocates nothing (the cost of tracing off on the hot path is a
// nil check).
func TestOffIsNilAndFree(t *testing.T) {
	tr := New(Config{SampleRatio: 0.5, NodeID: "n1"})
	if tr != nil {
		t.Fatalf("New without an endpoint = %v, want nil", tr)
	}
	if err := tr.Start(); err != nil || tr.Enabled() {
		t.Fatalf("Start of the nil Tracer: %v, enabled %v", err, tr.Enabled())
	}
	ctx := context.Background()
	res := log.AppendResult{MsgID: log.MsgID{Shard: 1, Index: 7}, ConvSeq: 3}
	ids := []log.MsgID{res.MsgID}
	items := []log.Delivery{{Pos: 1, Entry: log.Entry{MsgID: res.MsgID}}}
	var acks Acks
	now := time.Now()
	allocs := testing.AllocsPerRun(100, func() {
		sctx, span := tr.StartSend(ctx, log.KindMessage, "c1", 1, 10)
		commit := tr.StartCommit(sctx, 1)
		tr.EndCommit(commit, nil)
		tr.EndSend(span, res, nil)
		tr.Delivered(Delivery{Source: 1, Dest: 2, Items: items, Began: now, Proposed: now, Answered: now})
		tr.Pushed(&acks, 2, ids, 5, true, now)
		tr.Acked(&acks, 5)
	})
	if allocs != 0 {
		t.Fatalf("tracing off: %v allocations per send, want 0", allocs)
	}
	if err := tr.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkSendOff is the send path's tracing calls with tracing off.
func BenchmarkSendOff(b *testing.B) {
	var tr *Tracer
	ctx := context.Background()
	res := log.AppendResult{MsgID: log.MsgID{Shard: 1, Index: 7}}
	b.ReportAllocs()
	for b.Loop() {
		sctx, span := tr.StartSend(ctx, log.KindMessage, "c1", 1, 10)
		commit := tr.StartCommit(sctx, 1)
		tr.EndCommit(commit, nil)
		tr.EndSend(span, res, nil)
	}
}

func TestCheckEndpoint(t *testing.T) {
	for _, c := range []struct {
		in     string
		ok     bool
		traces string
	}{
		{"", true, ""},
		{"http://127.0.0.1:4318", true, "http://127.0.0.1:4318/v1/traces"},
		{"https://collector.example.com/", true, "https://collector.example.com/v1/traces"},
		{"http://c:4318/custom/path", true, "http://c:4318/custom/path"},
		{"127.0.0.1:4318", false, ""},
		{"grpc://c:4317", false, ""},
		{"http://", false, ""},
		{"http://user:pw@c:4318", false, ""},
	} {
		err := CheckEndpoint(c.in)
		if (err == nil) != c.ok {
			t.Errorf("CheckEndpoint(%q) = %v, want ok %v", c.in, err, c.ok)
		}
		if c.ok && c.in != "" && TracesURL(c.in) != c.traces {
			t.Errorf("TracesURL(%q) = %q, want %q", c.in, TracesURL(c.in), c.traces)
		}
	}
}

func sc(n byte) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{n}, SpanID: trace.SpanID{n}, TraceFlags: trace.FlagsSampled})
}

// TestRegistryForgetsOldest: the registry holds its size, the oldest forgotten first.
func TestRegistryForgetsOldest(t *testing.T) {
	r := newRegistry(3)
	for i := range 5 {
		r.put(log.MsgID{Shard: 1, Index: uint64(i + 1)}, sc(byte(i+1)))
	}
	for i := range 5 {
		_, ok := r.get(log.MsgID{Shard: 1, Index: uint64(i + 1)})
		if want := i >= 2; ok != want {
			t.Errorf("message %d remembered %v, want %v", i+1, ok, want)
		}
	}
	if len(r.m) != 3 {
		t.Errorf("%d remembered, want 3", len(r.m))
	}
}

// TestParentAndLinks: a step's parent is the first message of its batch known here, the other
// known ones are links, and an unknown batch starts a trace of its own that names its ids.
func TestParentAndLinks(t *testing.T) {
	tr := New(Config{Endpoint: "http://127.0.0.1:1"})
	a, b, c := log.MsgID{Shard: 1, Index: 1}, log.MsgID{Shard: 1, Index: 2}, log.MsgID{Shard: 1, Index: 3}
	tr.reg.put(b, sc(2))
	tr.reg.put(c, sc(3))
	ids := []log.MsgID{a, b, c}
	ctx, links, strs := tr.parent(len(ids), func(i int) log.MsgID { return ids[i] })
	if got := trace.SpanContextFromContext(ctx); !got.Equal(sc(2)) {
		t.Errorf("parent %v, want b's", got)
	}
	if len(links) != 1 || !links[0].SpanContext.Equal(sc(3)) {
		t.Errorf("links %v, want c's", links)
	}
	if len(strs) != 3 || strs[0] != "1.1.0" {
		t.Errorf("ids %v", strs)
	}
	ctx, links, _ = tr.parent(1, func(int) log.MsgID { return a })
	if trace.SpanContextFromContext(ctx).IsValid() || len(links) != 0 {
		t.Errorf("an unknown message has a parent or links")
	}
}

// TestAcksBounded: a stream's pending pushes are taken up to the acked position, at most
// maxPendingAcks are held, and positions going back start over.
func TestAcksBounded(t *testing.T) {
	var a Acks
	for i := range maxPendingAcks + 10 {
		a.add(pendingAck{pos: log.Position(i + 1)})
	}
	if len(a.pending) != maxPendingAcks || a.pending[0].pos != 11 {
		t.Fatalf("held %d from %d", len(a.pending), a.pending[0].pos)
	}
	if got := a.take(20); len(got) != 10 {
		t.Errorf("took %d up to 20, want 10", len(got))
	}
	if got := a.take(20); len(got) != 0 {
		t.Errorf("took %d again", len(got))
	}
	a.add(pendingAck{pos: 3}) // a resync from an earlier position
	if len(a.pending) != 1 {
		t.Errorf("held %d after positions went back, want 1", len(a.pending))
	}
}

// TestExportFailureIsLoggedNotGlobal: a collector that is down costs a logged warning, not an
// error handed to OpenTelemetry's global handler.
func TestExportFailureIsLoggedNotGlobal(t *testing.T) {
	e := &loggingExporter{SpanExporter: failing{}, logger: discardLogger()}
	if err := e.ExportSpans(context.Background(), nil); err != nil {
		t.Fatalf("ExportSpans = %v, want nil (logged)", err)
	}
	if e.last.Load() == 0 {
		t.Fatal("the failure was not logged")
	}
}

type failing struct{}

func (failing) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error {
	return errors.New("collector down")
}
func (failing) Shutdown(context.Context) error { return nil }

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
