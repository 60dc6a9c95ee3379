package peer

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
)

// Node is what the call plane needs of this node's raftstore node (*raftstore.Node): its
// replicas, where the others are placed, and calls to other nodes.
type Node interface {
	ID() string
	State(shard raftstore.ShardID) (*log.Shard, error)
	ShardStatus(shard raftstore.ShardID) (raftstore.ShardStatus, error)
	Placed(shard raftstore.ShardID) []raftstore.Peer
	Call(ctx context.Context, id, method string, payload []byte) ([]byte, error)
}

// Handler answers one operation with state, this node's replica of req.Shard. Its result is
// encoded with EncodeAnswer; "not found" belongs in the result (a Found flag), not in the error:
// errors cross nodes as text (only log refusals and raftstore's sentinels keep their identity).
type Handler func(ctx context.Context, state *log.Shard, req Request) (any, error)

// Peer makes and answers node-to-node calls. Register every handler with Handle before the node
// serves calls; after that a Peer is safe for concurrent use.
type Peer struct {
	node     Node
	handlers map[Op]Handler
}

// New returns the call plane of node, with no handlers yet.
func New(node Node) *Peer { return &Peer{node: node, handlers: map[Op]Handler{}} }

// Handle registers h to answer op. It panics if op has a handler already (a wiring bug).
func (p *Peer) Handle(op Op, h Handler) {
	if _, dup := p.handlers[op]; dup {
		panic(fmt.Sprintf("peer: second handler for %s", op))
	}
	p.handlers[op] = h
}

// Serve answers another node's call (wire it as raftstore.App.Serve): it decodes the request,
// finds this node's replica of its shard (raftstore.ErrNoShard, which crosses the call as itself,
// when there is none, so the caller asks the next node) and runs the op's handler.
func (p *Peer) Serve(ctx context.Context, method string, payload []byte) ([]byte, error) {
	if method != Method {
		return nil, fmt.Errorf("peer: unknown call method %q (a node of another version? upgrade the older node)", method)
	}
	req, err := DecodeRequest(payload)
	if err != nil {
		return nil, err
	}
	state, err := p.node.State(req.Shard)
	if err != nil {
		return nil, err
	}
	if req.Leader {
		if st, _ := p.node.ShardStatus(req.Shard); st.State != "leader" {
			return nil, fmt.Errorf("peer: %s's replica of shard %d is not its leader", p.node.ID(), req.Shard)
		}
	}
	return p.answer(ctx, state, req)
}

func (p *Peer) answer(ctx context.Context, state *log.Shard, req Request) ([]byte, error) {
	h, ok := p.handlers[req.Op]
	if !ok {
		return nil, fmt.Errorf("peer: %s does not answer %s (a node of another version? upgrade the older node)", p.node.ID(), req.Op)
	}
	res, err := h(ctx, state, req)
	if err != nil {
		return nil, err
	}
	return EncodeAnswer(res)
}

// Run runs op with args on a replica of shard and decodes its result into out (a pointer): on
// this node's replica when it hosts one (and, with leader, leads it), else on a node that does
// (Remote). The local path encodes and decodes like the remote one, so a test of either covers
// what the other answers. It returns raftstore.ErrNoShard when neither this node nor any node
// the map places the shard on has it, raftstore.ErrUnreachable when none of those could be
// asked, or the op's own error.
func (p *Peer) Run(ctx context.Context, shard raftstore.ShardID, op Op, leader bool, args, out any) error {
	if _, ok := p.handlers[op]; !ok {
		return fmt.Errorf("peer: no handler for %s", op) // a wiring bug: fail before asking anyone
	}
	payload, err := EncodeRequest(op, shard, leader, args)
	if err != nil {
		return err
	}
	state, err := p.node.State(shard)
	if err != nil && !errors.Is(err, raftstore.ErrNoShard) {
		return err
	}
	hosted, leaderID := err == nil, ""
	if hosted && leader {
		st, _ := p.node.ShardStatus(shard)
		hosted, leaderID = st.State == "leader", st.LeaderID
	}
	var b []byte
	if hosted {
		var req Request
		if req, err = DecodeRequest(payload); err == nil {
			b, err = p.answer(ctx, state, req)
		}
	} else {
		b, _, err = p.call(ctx, shard, payload, leaderID)
	}
	if err != nil {
		return err
	}
	if err := DecodeAnswer(b, out); err != nil {
		return fmt.Errorf("peer: %s of shard %d: %w", op, shard, err)
	}
	return nil
}

// Remote runs op with args on a replica of shard on another node and decodes its result into out,
// asking first (if it hosts the shard) before the others. It returns the node that answered, which
// a caller making a series of reads asks first next time.
func (p *Peer) Remote(ctx context.Context, shard raftstore.ShardID, op Op, args, out any, first string) (string, error) {
	payload, err := EncodeRequest(op, shard, false, args)
	if err != nil {
		return "", err
	}
	b, id, err := p.call(ctx, shard, payload, first)
	if err != nil {
		return "", err
	}
	if err := DecodeAnswer(b, out); err != nil {
		return "", fmt.Errorf("peer: %s of shard %d from %s: %w", op, shard, id, err)
	}
	return id, nil
}

// call sends payload to a node that hosts shard, as the cluster map places it, trying each in turn
// (first, if it is one of them, then the others; never this node, whose replica the caller has
// found missing) until one answers, and returns the answer and the node that gave it.
//
// A refusal of the log package (log.Rejected) ends the loop: every replica would refuse alike.
// A node that cannot be reached, or no longer hosts the shard, is skipped; when none answers the
// error is the last node's (raftstore.ErrUnreachable, raftstore.ErrNoShard, ...), or
// raftstore.ErrNoShard when the map places the shard on no other node or this node is not part of
// a managed cluster.
func (p *Peer) call(ctx context.Context, shard raftstore.ShardID, payload []byte, first string) ([]byte, string, error) {
	var nodes []string
	for _, n := range p.node.Placed(shard) {
		if n.ID != p.node.ID() {
			nodes = append(nodes, n.ID)
		}
	}
	if i := slices.Index(nodes, first); i > 0 {
		nodes[0], nodes[i] = nodes[i], nodes[0]
	}
	err := fmt.Errorf("%w: no other node hosts shard %d", raftstore.ErrNoShard, shard)
	for _, id := range nodes {
		var b []byte
		b, err = p.node.Call(ctx, id, Method, payload)
		if err == nil {
			return b, id, nil
		}
		if log.Rejected(err) || ctx.Err() != nil {
			return nil, "", err
		}
	}
	return nil, "", err
}
