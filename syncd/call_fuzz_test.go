package syncd

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"
)

// Another node's call (reads and inspections of a replica hosted here) is input from the network:
// whatever its method and payload, serveCall answers with JSON or an error, and never panics.
func FuzzServeCall(f *testing.F) {
	for _, seed := range []struct{ method, payload string }{
		{methodRead, `{"op":"UserInfo","shard":1,"uid":"alice","limit":{}}`},
		{methodRead, `{"op":"ReadUser","shard":2,"uid":"bob","epoch":1,"pos":1,"limit":{"Count":10}}`},
		{methodRead, `{"op":"read_user_wait","shard":1,"uid":"bob","wait_ms":5,"limit":{}}`},
		{methodRead, `{"op":"ReadConvBefore","shard":1,"conv":"g:x","pos":99,"limit":{}}`},
		{methodInspect, `{"op":"cursors","shard":1,"args":{"user":"alice"}}`},
		{methodInspect, `{"op":"trace_home","shard":2,"args":{"msg_id":"2.5.0","scan":10}}`},
		{methodInspect, `{"op":"dead_letters","shard":1,"args":{"limit":5}}`},
		{methodInspect, `{"op":"dead_letter","shard":9,"args":null}`},
		{"other", `{}`},
	} {
		f.Add(seed.method, []byte(seed.payload))
	}
	node := startMetricsNode(f)
	s := &Server{cfg: Config{NodeID: "n1"}, logger: slog.New(slog.DiscardHandler), node: node,
		slots: NewSlotTable(2), notes: newNotifier()}
	f.Fuzz(func(t *testing.T, method string, payload []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond) // bounds long polls
		defer cancel()
		b, err := s.serveCall(ctx, method, payload)
		if err == nil && !json.Valid(b) {
			t.Fatalf("%s %q: answer is not JSON: %q", method, payload, b)
		}
	})
}
