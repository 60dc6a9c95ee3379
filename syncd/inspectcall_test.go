package syncd

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
)

// TestInspectShardCall: an inspection answers the same whether it runs here or is served to
// another node (serveInspect, what a remote node runs for a call); "not found" is an answer, not
// an error, so it survives the trip; an unknown op or a shard no node hosts is an error, and the
// latter keeps raftstore.ErrNoShard (the HTTP layer's 503).
func TestInspectShardCall(t *testing.T) {
	node := startMetricsNode(t) // shards 1 and 2, outside any managed cluster
	s := &Server{cfg: Config{NodeID: "n1"}, logger: slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelError})),
		node: node, slots: NewSlotTable(3)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := node.Propose(ctx, 1, raftstore.AppendCommand(&log.Append{Conv: "g:x", Sender: "u1",
		ClientMsgID: "c1", Kind: log.KindGroupCreate, Members: []string{"u2"}}))
	if err != nil {
		t.Fatal(err)
	}

	var local traceHome
	if err := s.inspectShard(ctx, 1, "trace_home", traceHomeArgs{MsgID: res.Append.MsgID}, &local); err != nil {
		t.Fatal(err)
	}
	if !local.Found || local.Report.Conv != "g:x" || local.Report.Node != "n1" || len(local.Members) != 2 || !local.Report.Outbox.Retained {
		t.Fatalf("trace_home here: %+v", local)
	}
	args, _ := json.Marshal(traceHomeArgs{MsgID: res.Append.MsgID})
	payload, _ := json.Marshal(inspectRequest{Op: "trace_home", Shard: 1, Args: args})
	b, err := s.serveCall(ctx, methodInspect, payload)
	if err != nil {
		t.Fatal(err)
	}
	var served traceHome
	if err := json.Unmarshal(b, &served); err != nil || !reflect.DeepEqual(served, local) {
		t.Fatalf("served trace_home: %+v (%v); here: %+v", served, err, local)
	}

	// Not found is an answer: no dead letter 1-2-99, which a replay reports as ErrNoDeadLetter (404).
	var dl deadLetterAnswer
	payload, _ = json.Marshal(inspectRequest{Op: "dead_letter", Shard: 1, Args: json.RawMessage(`{"dest":2,"pos":99}`)})
	if b, err := s.serveInspect(payload); err != nil || json.Unmarshal(b, &dl) != nil || dl.Found {
		t.Fatalf("served dead_letter: %s %v", b, err)
	}
	if _, err := s.replayDeadLetter(ctx, 1, 2, 99); !errors.Is(err, log.ErrNoDeadLetter) {
		t.Fatalf("replay of a dead letter that does not exist: %v", err)
	}

	// Errors: an unknown op, bad arguments, a shard hosted nowhere.
	var out any
	if err := s.inspectShard(ctx, 1, "nonsense", nil, &out); err == nil {
		t.Error("an unknown op ran")
	}
	payload, _ = json.Marshal(inspectRequest{Op: "nonsense", Shard: 1})
	if _, err := s.serveInspect(payload); err == nil {
		t.Error("an unknown op was served")
	}
	payload, _ = json.Marshal(inspectRequest{Op: "cursors", Shard: 1, Args: json.RawMessage(`{"user":7}`)})
	if _, err := s.serveInspect(payload); err == nil {
		t.Error("bad arguments were served")
	}
	if err := s.inspectShard(ctx, 3, "cursors", cursorsArgs{User: "u3"}, &out); !errors.Is(err, raftstore.ErrNoShard) {
		t.Errorf("inspection of a shard hosted nowhere: %v", err)
	}
	payload, _ = json.Marshal(inspectRequest{Op: "cursors", Shard: 3, Args: json.RawMessage(`{"user":"u3"}`)})
	if _, err := s.serveInspect(payload); !errors.Is(err, raftstore.ErrNoShard) {
		t.Errorf("inspection served for a shard not hosted here: %v", err)
	}
}
