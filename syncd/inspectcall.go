package syncd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
)

// Inspections of a shard wherever a replica is. The operator views (cursors, trace, dead
// letters) read per-shard state that only a replica holds; in a managed cluster a node hosts
// replicas of only some shards, yet an operator should get the whole answer from any node. So
// each per-shard part of a view is a named op that runs on a replica: here when this node hosts
// the shard, else on a node that does, through raftstore's Node.Call (method "inspect",
// answered by serveCall), like the remote reads of reads.go.
//
// The op runs the same code both ways and its result always crosses JSON, also locally, so a test
// of the local path covers what a remote node would answer. "Not found" is part of an op's
// result (a Found or Exists flag), never an error: errors cross nodes as text (only log
// refusals and raftstore's sentinels keep their identity), and the HTTP layer must tell a 404
// from a failure whichever node answered.

// methodInspect is the call method serveCall answers with an inspection op.
const methodInspect = "inspect"

// inspectOp computes one per-shard part of an operator view from state, a replica of shard on the
// node s (which runs the op: s.node.ID() names the node that answered). args is the op's
// JSON-encoded argument; the result is encoded to JSON for the caller.
type inspectOp func(s *Server, state *log.Shard, shard raftstore.ShardID, args json.RawMessage) (any, error)

// inspectOps are the ops by name, the name both ends of a call agree on: add ops, never rename
// one (nodes of different versions may talk during a rolling upgrade).
var inspectOps = map[string]inspectOp{
	"cursors":      opCursors,
	"trace_home":   opTraceHome,
	"trace_users":  opTraceUsers,
	"dead_letters": opDeadLetters,
	"dead_letter":  opDeadLetter,
}

// inspectRequest is an inspection op to run on another node's replica of Shard.
type inspectRequest struct {
	Op    string          `json:"op"`
	Shard uint32          `json:"shard"`
	Args  json.RawMessage `json:"args"`
	// Leader asks for the shard's leader replica: a node whose replica is not the leader
	// refuses, and the caller asks the next.
	Leader bool `json:"leader,omitempty"`
}

// inspectShard runs op with args on a replica of shard and decodes its result into out (a
// pointer): on this node's replica when it hosts one, else on a node that does (callHosts). It
// returns raftstore.ErrNoShard when neither this node nor any node the map places the shard on
// has it, raftstore.ErrUnreachable when none of those could be asked, or the op's own error.
func (s *Server) inspectShard(ctx context.Context, shard raftstore.ShardID, op string, args, out any) error {
	return s.inspect(ctx, shard, op, args, out, false)
}

// inspectLeader runs op like inspectShard, but only on shard's leader replica, so that what it
// reads includes every change acknowledged before it (a follower may not have applied the latest
// yet). A replay reads its dead letter this way: once a drop of it is acknowledged, a replay
// finds it gone, whichever node is asked.
func (s *Server) inspectLeader(ctx context.Context, shard raftstore.ShardID, op string, args, out any) error {
	return s.inspect(ctx, shard, op, args, out, true)
}

func (s *Server) inspect(ctx context.Context, shard raftstore.ShardID, op string, args, out any, leader bool) error {
	if _, ok := inspectOps[op]; !ok {
		return fmt.Errorf("syncd: unknown inspection %q", op) // a bug: fail before asking anyone
	}
	a, err := json.Marshal(args)
	if err != nil {
		return err
	}
	state, err := s.node.State(shard)
	if err != nil && !errors.Is(err, raftstore.ErrNoShard) {
		return err
	}
	hosted, leaderID := err == nil, ""
	if hosted && leader {
		st, _ := s.node.ShardStatus(shard)
		hosted, leaderID = st.State == "leader", st.LeaderID
	}
	var b []byte
	if hosted {
		b, err = runInspectOp(s, state, shard, op, a)
	} else {
		var payload []byte
		if payload, err = json.Marshal(inspectRequest{Op: op, Shard: uint32(shard), Args: a, Leader: leader}); err == nil {
			b, _, err = s.callHosts(ctx, shard, methodInspect, payload, leaderID)
		}
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("syncd: inspection %s of shard %d: bad answer: %w", op, shard, err)
	}
	return nil
}

// runInspectOp runs op on state and encodes its result.
func runInspectOp(s *Server, state *log.Shard, shard raftstore.ShardID, op string, args json.RawMessage) ([]byte, error) {
	f, ok := inspectOps[op]
	if !ok {
		return nil, fmt.Errorf("syncd: unknown inspection %q", op)
	}
	res, err := f(s, state, shard, args)
	if err != nil {
		return nil, err
	}
	return json.Marshal(res)
}

// serveInspect answers another node's inspectRequest with this node's replica; raftstore.ErrNoShard
// (which crosses the call as itself) when it has none, so the caller asks the next node.
func (s *Server) serveInspect(payload []byte) ([]byte, error) {
	var req inspectRequest
	if err := json.Unmarshal(payload, &req); err != nil {
		return nil, fmt.Errorf("syncd: bad inspection request: %w", err)
	}
	shard := raftstore.ShardID(req.Shard)
	state, err := s.node.State(shard)
	if err != nil {
		return nil, err
	}
	if req.Leader {
		if st, _ := s.node.ShardStatus(shard); st.State != "leader" {
			return nil, fmt.Errorf("syncd: %s's replica of shard %d is not its leader", s.node.ID(), shard)
		}
	}
	return runInspectOp(s, state, shard, req.Op, req.Args)
}

// decodeArgs decodes an op's arguments into a fresh T.
func decodeArgs[T any](op string, args json.RawMessage) (T, error) {
	var v T
	if err := json.Unmarshal(args, &v); err != nil {
		return v, fmt.Errorf("syncd: bad arguments of inspection %s: %w", op, err)
	}
	return v, nil
}
