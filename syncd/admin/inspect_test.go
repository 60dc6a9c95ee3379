package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/peer"
	"github.com/syncd-dev/syncd/test/testkit"
)

// newInspector returns an admin server's inspection side over a real single node hosting shards
// 1 and 2 of a three-shard routing table, outside any managed cluster (so no other node can be
// asked about shard 3), with its handlers registered on a call plane of its own.
func newInspector(t testing.TB) (*Server, *raftstore.Node) {
	t.Helper()
	node := raftstoretest.NewCluster(t, 1, []raftstore.ShardID{1, 2}, nil).Node(0)
	s := &Server{node: node, slots: cluster.Even(3), peer: peer.New(node), logger: slog.New(slog.DiscardHandler)}
	s.handleInspections(s.peer)
	return s, node
}

// wantOpsError GETs url (the request adjusted by opts) and checks the status and the error's
// code, and that it says what to do.
func wantOpsError(t *testing.T, url string, status int, code string, opts ...testkit.RequestOption) adminapi.OpsError {
	t.Helper()
	e, got := testkit.GetJSON[adminapi.OpsError](t, url, opts...)
	if got != status || e.Code != code || e.Message == "" || e.Hint == "" {
		t.Errorf("GET %s: HTTP %d %+v; want %d with code %q, a message and a hint", url, got, e, status, code)
	}
	return e
}

// TestInspectShardNotHosted: when no replica of a shard can be read — here a node outside any
// managed cluster, hosting shards 1 and 2 of a three-shard table, so no other node can be asked
// about shard 3 — the views say so rather than fail or guess: 503 for cursors and a trace whose
// home is shard 3, and a trace of a message of shard 1 reports the user on shard 2 (pending: no
// fan-out runs here) and the user on shard 3 as unavailable, with why. (From any node of a real
// cluster the views are whole: test/adminanynode_test.go.)
func TestInspectShardNotHosted(t *testing.T) {
	s, node := newInspector(t)
	// Users and a conversation on the shards this test needs.
	pick := func(want raftstore.ShardID, of func(string) raftstore.ShardID) string {
		for i := range 1000 {
			if id := fmt.Sprint("x", i); of(id) == want {
				return id
			}
		}
		t.Fatalf("no id on shard %d", want)
		return ""
	}
	here, away, conv := pick(2, s.slots.UserShard), pick(3, s.slots.UserShard), pick(1, s.slots.ConvShard)
	mux := http.NewServeMux()
	s.inspectRoutes(mux)
	hs := httptest.NewServer(mux)
	defer hs.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := node.Propose(ctx, 1, raftstore.AppendCommand(&log.Append{Conv: conv, Sender: here,
		ClientMsgID: "c1", Kind: log.KindGroupCreate, Members: []string{away}}))
	if err != nil {
		t.Fatal(err)
	}
	tr, code := testkit.GetJSON[adminapi.TraceReport](t, hs.URL+"/v1/trace?msg_id="+res.Append.MsgID.String())
	if code != http.StatusOK {
		t.Fatalf("trace: HTTP %d", code)
	}
	if !tr.Outbox.Retained || tr.Outbox.Pos != 1 || !slices.Equal(tr.Outbox.Recipients, []string{here, away}) ||
		tr.Entry == nil || tr.Entry.Kind != "group_create" || len(tr.Users) != 2 {
		t.Fatalf("trace: %+v", tr)
	}
	byUser := map[string]adminapi.TraceUser{}
	for _, u := range tr.Users {
		byUser[u.User] = u
	}
	if u := byUser[here]; u.Status != adminapi.TracePending || u.SourceMark != 0 || u.Recipient == nil || !*u.Recipient || u.Scanned != 0 || u.Node != "n1" {
		t.Errorf("user on a hosted shard, before fan-out: %+v", u)
	}
	if u := byUser[away]; u.Status != adminapi.TraceUnavailable || !strings.Contains(u.Note, "no node that does answered") ||
		u.Node != "" || u.Recipient == nil || !*u.Recipient || u.Devices == nil {
		t.Errorf("user on shard 3: %+v", u)
	}
	e := wantOpsError(t, hs.URL+"/v1/cursors?user="+away, http.StatusServiceUnavailable, "no_shard")
	if !strings.Contains(e.Hint, "cluster status") {
		t.Errorf("hint %q does not say what to check", e.Hint)
	}
	wantOpsError(t, hs.URL+"/v1/trace?msg_id=3.1.0", http.StatusServiceUnavailable, "no_shard")
}

// TestInspectionsCrossTheCodec: an inspection answers the same whether it runs here (Peer.Run on
// the local replica) or is served to another node (Peer.Serve, what a remote node runs for a
// call); "not found" is an answer, not an error, so it survives the trip; an unknown op, bad
// arguments or a shard no node hosts are errors, and the latter keeps raftstore.ErrNoShard (the
// HTTP layer's 503).
func TestInspectionsCrossTheCodec(t *testing.T) {
	s, node := newInspector(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := node.Propose(ctx, 1, raftstore.AppendCommand(&log.Append{Conv: "g:x", Sender: "u1",
		ClientMsgID: "c1", Kind: log.KindGroupCreate, Members: []string{"u2"}}))
	if err != nil {
		t.Fatal(err)
	}
	args := peer.TraceHomeArgs{MsgID: peer.FromMsgID(res.Append.MsgID)}
	var local peer.TraceHome
	if err := s.peer.Run(ctx, 1, peer.OpTraceHome, false, args, &local); err != nil {
		t.Fatal(err)
	}
	if !local.Found || local.Report.Conv != "g:x" || local.Report.Node != node.ID() || len(local.Members) != 2 || !local.Report.Outbox.Retained {
		t.Fatalf("trace_home here: %+v", local)
	}
	payload, _ := peer.EncodeRequest(peer.OpTraceHome, 1, false, args)
	b, err := s.peer.Serve(ctx, peer.Method, payload)
	if err != nil {
		t.Fatal(err)
	}
	var served peer.TraceHome
	if err := peer.DecodeAnswer(b, &served); err != nil || !reflect.DeepEqual(served, local) {
		t.Fatalf("served trace_home: %+v (%v); here: %+v", served, err, local)
	}

	// Not found is an answer: no dead letter 1-2-99, which a replay reports as ErrNoDeadLetter (404).
	payload, _ = peer.EncodeRequest(peer.OpDeadLetter, 1, false, peer.DeadLetterArgs{Dest: 2, Pos: 99})
	var dl peer.DeadLetterAnswer
	if b, err := s.peer.Serve(ctx, peer.Method, payload); err != nil || peer.DecodeAnswer(b, &dl) != nil || dl.Found {
		t.Fatalf("served dead_letter: %x %v", b, err)
	}
	if _, err := s.replayDeadLetter(ctx, 1, 2, 99); !errors.Is(err, log.ErrNoDeadLetter) {
		t.Fatalf("replay of a dead letter that does not exist: %v", err)
	}

	// Errors: an unknown op, bad arguments, a shard hosted nowhere, another method or version.
	var out any
	if err := s.peer.Run(ctx, 1, peer.Op(99), false, nil, &out); err == nil {
		t.Error("an unknown op ran")
	}
	payload, _ = peer.EncodeRequest(peer.Op(99), 1, false, nil)
	if _, err := s.peer.Serve(ctx, peer.Method, payload); err == nil {
		t.Error("an unknown op was served")
	}
	payload, _ = peer.EncodeRequest(peer.OpCursors, 1, false, map[string]int{"user": 7})
	if _, err := s.peer.Serve(ctx, peer.Method, payload); !errors.Is(err, peer.ErrFormat) {
		t.Errorf("bad arguments were served: %v", err)
	}
	if err := s.peer.Run(ctx, 3, peer.OpCursors, false, peer.CursorsArgs{User: "u3"}, &out); !errors.Is(err, raftstore.ErrNoShard) {
		t.Errorf("inspection of a shard hosted nowhere: %v", err)
	}
	payload, _ = peer.EncodeRequest(peer.OpCursors, 3, false, peer.CursorsArgs{User: "u3"})
	if _, err := s.peer.Serve(ctx, peer.Method, payload); !errors.Is(err, raftstore.ErrNoShard) {
		t.Errorf("inspection served for a shard not hosted here: %v", err)
	}
	if _, err := s.peer.Serve(ctx, "inspect", payload); err == nil || !strings.Contains(err.Error(), "unknown call method") {
		t.Errorf("a call of another method: %v", err)
	}
	payload[0] = 2
	if _, err := s.peer.Serve(ctx, peer.Method, payload); !errors.Is(err, peer.ErrFormat) || !strings.Contains(err.Error(), "version 2") {
		t.Errorf("a call of another version: %v", err)
	}
}

// Another node's inspection is input from the network: whatever its payload, Serve answers with
// a decodable answer or an error, and never panics.
func FuzzServeInspection(f *testing.F) {
	for _, seed := range []struct {
		op   peer.Op
		args any
	}{
		{peer.OpCursors, peer.CursorsArgs{User: "alice"}},
		{peer.OpTraceHome, peer.TraceHomeArgs{MsgID: peer.MsgID{Shard: 2, Index: 5}}},
		{peer.OpTraceUsers, peer.TraceUsersArgs{MsgID: peer.MsgID{Shard: 1, Index: 3}, Scan: 10, Users: []peer.TraceUserArgs{{User: "bob"}}}},
		{peer.OpDeadLetters, peer.DeadLettersArgs{Limit: 5}},
		{peer.OpDeadLetter, peer.DeadLetterArgs{Dest: 2, Pos: 1}},
	} {
		b, err := peer.EncodeRequest(seed.op, 1, false, seed.args)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	s, _ := newInspector(f)
	f.Fuzz(func(t *testing.T, payload []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		b, err := s.peer.Serve(ctx, peer.Method, payload)
		if err == nil {
			var v any
			if err := peer.DecodeAnswer(b, &v); err != nil {
				t.Fatalf("%x: the answer does not decode: %v", payload, err)
			}
		}
	})
}
