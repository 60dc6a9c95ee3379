package test

// Tracing (issue #26 point 4): a message's path as OpenTelemetry spans, received by a real
// OTLP/HTTP endpoint that decodes what the server's exporter posts.

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/syncd-dev/syncd/proto/ident"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/tracing"
	"github.com/syncd-dev/syncd/test/testkit"
)

// otlpReceiver is an OTLP/HTTP trace endpoint (POST /v1/traces, binary protobuf), as a collector
// serves it: it keeps every span it was sent, and the raw requests.
type otlpReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	spans    []*tracepb.Span
	raw      [][]byte
	requests int
	services []string // the resources' service.instance.id
}

func startReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || err != nil ||
			req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want POST /v1/traces of application/x-protobuf", http.StatusBadRequest)
			return
		}
		var ex coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &ex); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.requests++
		r.raw = append(r.raw, body)
		for _, rs := range ex.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.instance.id" {
					r.services = append(r.services, kv.Value.GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *otlpReceiver) snapshot() (spans []*tracepb.Span, raw [][]byte, requests int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans), slices.Clone(r.raw), r.requests
}

// attr returns the value of a span's attribute key, nil if it has none.
func attr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	return nil
}

// carries reports whether s names msgID, in syncd.msg_id or syncd.msg_ids.
func carries(s *tracepb.Span, msgID string) bool {
	if v := attr(s, tracing.AttrMsgID); v != nil && v.GetStringValue() == msgID {
		return true
	}
	for _, v := range attr(s, tracing.AttrMsgIDs).GetArrayValue().GetValues() {
		if v.GetStringValue() == msgID {
			return true
		}
	}
	return false
}

// messagePath is the spans of one message's trace, by name, and what they must show.
type messagePath struct {
	spans map[string][]*tracepb.Span // of the message's trace
}

// messageTrace collects the spans of the trace whose send span carries msgID; ok is false until the
// send and every later step have arrived.
func messageTrace(all []*tracepb.Span, msgID string) (messagePath, bool) {
	p := messagePath{spans: map[string][]*tracepb.Span{}}
	var send *tracepb.Span
	for _, s := range all {
		if s.Name == tracing.SpanSend && carries(s, msgID) {
			send = s
		}
	}
	if send == nil {
		return p, false
	}
	for _, s := range all {
		if bytes.Equal(s.TraceId, send.TraceId) {
			p.spans[s.Name] = append(p.spans[s.Name], s)
		}
	}
	for _, name := range []string{tracing.SpanSend, tracing.SpanCommit, tracing.SpanFanout, tracing.SpanDeliver, tracing.SpanPush, tracing.SpanDeviceAck} {
		if len(p.spans[name]) == 0 {
			return p, false
		}
	}
	return p, true
}

// childOf reports whether s's parent is one of parents.
func childOf(s *tracepb.Span, parents []*tracepb.Span) bool {
	return slices.ContainsFunc(parents, func(p *tracepb.Span) bool { return bytes.Equal(s.ParentSpanId, p.SpanId) })
}

func pathSummary(spans []*tracepb.Span) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s trace=%s span=%s parent=%s\n", s.Name, hex.EncodeToString(s.TraceId), hex.EncodeToString(s.SpanId), hex.EncodeToString(s.ParentSpanId))
	}
	return b.String()
}

// TestTracingFollowsAMessage: with tracing on, one message sent by a real SDK to a conversation
// whose other member has a live device becomes one trace at a real OTLP endpoint: the send
// (root), its Raft commit, the fan-out of its outbox record and the delivery into the logs, the
// push to the live device and that device's ack, each parented as the path runs, with the ids
// and sizes as attributes and neither the body nor a user id anywhere in what was exported.
func TestTracingFollowsAMessage(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // spans leave every 50 ms, not every 5 s
	rcv := startReceiver(t)
	srv := startServerWith(t, func(c *syncd.Config) {
		c.TraceEndpoint = rcv.URL // no path: /v1/traces
		c.NodeID = "trace-node"
	})
	alice := dialDevice(t, srv, "alice", "phone", t.TempDir())
	defer alice.Close()
	bob := dialDevice(t, srv, "bob", "phone", t.TempDir())
	defer bob.Close()
	conv := ident.DirectConv("alice", "bob")

	// A first message makes bob's stream live (caught up, waiting for pushes).
	if _, err := alice.Send(conv, "bob", []byte("warm-up")); err != nil {
		t.Fatal(err)
	}
	waitBodies(t, conv, []string{"warm-up"}, bob)
	const body = "payload-that-must-not-leave-7f3a"
	if _, err := alice.Send(conv, "bob", []byte(body)); err != nil {
		t.Fatal(err)
	}
	waitBodies(t, conv, []string{"warm-up", body}, alice, bob)
	msgs, err := bob.Messages(conv)
	if err != nil {
		t.Fatal(err)
	}
	msgID := string(msgs[len(msgs)-1].MsgID)

	var path messagePath
	testkit.WaitTrue(t, 20*time.Second, "the message's send, commit, fan-out, delivery, push and device ack spans", func() bool {
		all, _, _ := rcv.snapshot()
		var ok bool
		path, ok = messageTrace(all, msgID)
		return ok
	})
	sp := path.spans
	var flat []*tracepb.Span
	for _, ss := range sp {
		flat = append(flat, ss...)
	}
	summary := pathSummary(flat)

	send := sp[tracing.SpanSend]
	if len(send) != 1 || len(send[0].ParentSpanId) != 0 {
		t.Fatalf("want one root send span:\n%s", summary)
	}
	s := send[0]
	if got := attr(s, tracing.AttrSize).GetIntValue(); got != int64(len(body)) {
		t.Errorf("send size %d, want %d", got, len(body))
	}
	if got := attr(s, tracing.AttrKind).GetStringValue(); got != "message" {
		t.Errorf("send kind %q, want message", got)
	}
	if ref := attr(s, tracing.AttrConvRef).GetStringValue(); len(ref) != 16 || strings.Contains(ref, "alice") {
		t.Errorf("send conv_ref %q: want 16 hex digits, not the conversation id", ref)
	}
	if attr(s, tracing.AttrShard) == nil || attr(s, tracing.AttrConvSeq).GetIntValue() != 2 {
		t.Errorf("send attributes %v: want the shard and conv_seq 2", s.Attributes)
	}
	for _, c := range sp[tracing.SpanCommit] {
		if !childOf(c, send) {
			t.Errorf("the commit is not a child of the send:\n%s", summary)
		}
	}
	for _, f := range sp[tracing.SpanFanout] {
		if !childOf(f, send) || !carries(f, msgID) || attr(f, tracing.AttrSourceShard) == nil {
			t.Errorf("fan-out span %v: want a child of the send naming the message and its source:\n%s", f.Attributes, summary)
		}
	}
	for _, d := range sp[tracing.SpanDeliver] {
		if !childOf(d, sp[tracing.SpanFanout]) || attr(d, tracing.AttrAppended).GetIntValue() < 1 {
			t.Errorf("deliver span %v: want a child of a fan-out that appended:\n%s", d.Attributes, summary)
		}
	}
	live := false
	for _, p := range sp[tracing.SpanPush] {
		if !childOf(p, send) || !carries(p, msgID) {
			t.Errorf("push span %v: want a child of the send naming the message:\n%s", p.Attributes, summary)
		}
		live = live || attr(p, tracing.AttrLive).GetBoolValue()
	}
	if !live {
		t.Errorf("no push of the message to a live stream:\n%s", summary)
	}
	for _, a := range sp[tracing.SpanDeviceAck] {
		if !childOf(a, sp[tracing.SpanPush]) || attr(a, tracing.AttrPosition).GetIntValue() < 2 {
			t.Errorf("device ack span %v: want a child of a push, acking position 2 or more:\n%s", a.Attributes, summary)
		}
	}

	// Nothing exported carries the body, a user id or a device token: every byte posted is
	// searched, not only the attributes this test knows of.
	_, raw, _ := rcv.snapshot()
	token, err := srv.MintToken("alice", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range raw {
		for _, secret := range []string{body, "warm-up", "alice", "bob", conv, token[:20]} {
			if bytes.Contains(b, []byte(secret)) {
				t.Errorf("an export carries %q", secret)
			}
		}
	}
	rcv.mu.Lock()
	services := slices.Clone(rcv.services)
	rcv.mu.Unlock()
	if !slices.Contains(services, "trace-node") {
		t.Errorf("resources name %v, want the node id", services)
	}
}

// TestTracingOffByDefault: a server without a trace endpoint exports nothing, even with the
// standard OTEL_EXPORTER_OTLP_ENDPOINT pointing at a live collector (it does not turn tracing on).
func TestTracingOffByDefault(t *testing.T) {
	rcv := startReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
	srv := startServer(t)
	alice := dialDevice(t, srv, "alice", "phone", t.TempDir())
	defer alice.Close()
	bob := dialDevice(t, srv, "bob", "phone", t.TempDir())
	defer bob.Close()
	conv := ident.DirectConv("alice", "bob")
	if _, err := alice.Send(conv, "bob", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	waitBodies(t, conv, []string{"hi"}, alice, bob)
	time.Sleep(300 * time.Millisecond) // thirty export intervals, had an exporter been made
	if _, _, n := rcv.snapshot(); n != 0 {
		t.Fatalf("the collector got %d exports from a server with tracing off", n)
	}
}
