package syncd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
)

// Reads of shards this node does not host. In a managed cluster a node holds replicas of only
// some shards, but a device may connect to any node: its sync stream and queries then read a
// replica on another node, through raftstore's Node.Call, the same way they read a local one —
// prefix-consistent reads of a replica, so contiguity and the G3 answers hold unchanged.

// shardReader is the read side of one shard: a local *log.Shard, or a remote replica.
type shardReader interface {
	UserInfo(uid string) (log.LogInfo, error)
	Conversation(conv, uid string) (log.ConvState, error)
	UserConvs(uid, after string, limit int) ([]string, error)
	ReadConvBefore(conv string, before log.Position, lim log.Limit) (log.Read, error)
	ReadUser(uid string, epoch log.Epoch, from log.Position, lim log.Limit) (log.Read, error)
}

// reader returns shard's local replica if this node hosts one, else a reader of a replica on a
// node that does.
func (s *Server) reader(ctx context.Context, shard raftstore.ShardID) (shardReader, error) {
	state, err := s.node.State(shard)
	if err == nil {
		return state, nil
	}
	if !errors.Is(err, raftstore.ErrNoShard) {
		return nil, err
	}
	return &remoteReader{s: s, ctx: ctx, shard: shard}, nil
}

// The method Serve answers reads with.
const methodRead = "read"

// readRequest is a read of a shard on another node.
type readRequest struct {
	Op     string       `json:"op"` // the shardReader method, or "read_user_wait"
	Shard  uint32       `json:"shard"`
	UID    string       `json:"uid,omitempty"`
	Conv   string       `json:"conv,omitempty"`
	After  string       `json:"after,omitempty"`
	Epoch  log.Epoch    `json:"epoch,omitempty"`
	Pos    log.Position `json:"pos,omitempty"` // from, or before
	Limit  log.Limit    `json:"limit"`
	Count  int          `json:"count,omitempty"` // UserConvs' limit
	WaitMS int64        `json:"wait_ms,omitempty"`
}

// readAnswer is the answer to a readRequest; the fields of the request's Op are set.
type readAnswer struct {
	Info log.LogInfo   `json:"info"`
	Conv log.ConvState `json:"conv"`
	IDs  []string      `json:"ids,omitempty"`
	Read log.Read      `json:"read"`
}

// remoteReader reads a shard through the nodes that host it, as the cluster map lists them.
type remoteReader struct {
	s     *Server
	ctx   context.Context
	shard raftstore.ShardID
	last  string // the node that answered last, asked first next time
}

func (r *remoteReader) call(req readRequest) (readAnswer, error) {
	req.Shard = uint32(r.shard)
	payload, err := json.Marshal(req)
	if err != nil {
		return readAnswer{}, err
	}
	b, id, err := r.s.callHosts(r.ctx, r.shard, methodRead, payload, r.last)
	if err != nil {
		return readAnswer{}, err
	}
	r.last = id
	var a readAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return readAnswer{}, fmt.Errorf("syncd: read of shard %d from %s: %w", r.shard, id, err)
	}
	return a, nil
}

// callHosts calls method with payload on a node that hosts shard, as the cluster map places it,
// trying each in turn (first, if it is one of them, then the others; never this node, whose
// replica the caller has found missing) until one answers, and returns the answer and the node
// that gave it. Reads and inspections of a shard hosted elsewhere share it, so they fail over
// between replicas alike.
//
// A refusal of the log package (log.Rejected) ends the loop: every replica would refuse alike.
// A node that cannot be reached, or no longer hosts the shard, is skipped; when none answers the
// error is the last node's (raftstore.ErrUnreachable, raftstore.ErrNoShard, ...), or
// raftstore.ErrNoShard when the map places the shard on no other node or this node is not part of
// a managed cluster.
func (s *Server) callHosts(ctx context.Context, shard raftstore.ShardID, method string, payload []byte, first string) ([]byte, string, error) {
	m, ok := s.node.ClusterMap()
	if !ok {
		return nil, "", raftstore.ErrNoShard
	}
	nodes := slices.DeleteFunc(slices.Clone(m.Replicas[shard]), func(id string) bool { return id == s.node.ID() })
	if i := slices.Index(nodes, first); i > 0 {
		nodes[0], nodes[i] = nodes[i], nodes[0]
	}
	err := fmt.Errorf("%w: no other node hosts shard %d", raftstore.ErrNoShard, shard)
	for _, id := range nodes {
		var b []byte
		b, err = s.node.Call(ctx, id, method, payload)
		if err == nil {
			return b, id, nil
		}
		if log.Rejected(err) || ctx.Err() != nil {
			return nil, "", err
		}
	}
	return nil, "", err
}

func (r *remoteReader) UserInfo(uid string) (log.LogInfo, error) {
	a, err := r.call(readRequest{Op: "UserInfo", UID: uid})
	return a.Info, err
}

func (r *remoteReader) Conversation(conv, uid string) (log.ConvState, error) {
	a, err := r.call(readRequest{Op: "Conversation", Conv: conv, UID: uid})
	return a.Conv, err
}

func (r *remoteReader) UserConvs(uid, after string, limit int) ([]string, error) {
	a, err := r.call(readRequest{Op: "UserConvs", UID: uid, After: after, Count: limit})
	return a.IDs, err
}

func (r *remoteReader) ReadConvBefore(conv string, before log.Position, lim log.Limit) (log.Read, error) {
	a, err := r.call(readRequest{Op: "ReadConvBefore", Conv: conv, Pos: before, Limit: lim})
	return a.Read, err
}

func (r *remoteReader) ReadUser(uid string, epoch log.Epoch, from log.Position, lim log.Limit) (log.Read, error) {
	a, err := r.call(readRequest{Op: "ReadUser", UID: uid, Epoch: epoch, Pos: from, Limit: lim})
	return a.Read, err
}

// readUserWait reads like ReadUser, but a remote replica that is caught up waits up to wait for
// the log to grow before it answers: a long poll, so a proxied sync stream gets new entries as
// soon as the replica applies them.
func (r *remoteReader) readUserWait(uid string, epoch log.Epoch, from log.Position, lim log.Limit, wait time.Duration) (log.Read, error) {
	a, err := r.call(readRequest{Op: "read_user_wait", UID: uid, Epoch: epoch, Pos: from, Limit: lim, WaitMS: wait.Milliseconds()})
	return a.Read, err
}

// serveCall answers other nodes' calls (raftstore.Config.Serve): reads and inspections of a
// shard hosted here.
func (s *Server) serveCall(ctx context.Context, method string, payload []byte) ([]byte, error) {
	switch method {
	case methodRead:
		return s.serveRead(ctx, payload)
	case methodInspect:
		return s.serveInspect(payload)
	}
	return nil, fmt.Errorf("syncd: unknown call %q", method)
}

// serveRead answers a readRequest with the local replica.
func (s *Server) serveRead(ctx context.Context, payload []byte) ([]byte, error) {
	var req readRequest
	if err := json.Unmarshal(payload, &req); err != nil {
		return nil, fmt.Errorf("syncd: bad read request: %w", err)
	}
	shard := raftstore.ShardID(req.Shard)
	state, err := s.node.State(shard)
	if err != nil {
		return nil, err
	}
	var a readAnswer
	switch req.Op {
	case "UserInfo":
		a.Info, err = state.UserInfo(req.UID)
	case "Conversation":
		a.Conv, err = state.Conversation(req.Conv, req.UID)
	case "UserConvs":
		a.IDs, err = state.UserConvs(req.UID, req.After, req.Count)
	case "ReadConvBefore":
		a.Read, err = state.ReadConvBefore(req.Conv, req.Pos, req.Limit)
	case "ReadUser":
		a.Read, err = state.ReadUser(req.UID, req.Epoch, req.Pos, req.Limit)
	case "read_user_wait":
		wake := s.notes.wait(shard, req.UID) // before reading, so an append after the read wakes us
		a.Read, err = state.ReadUser(req.UID, req.Epoch, req.Pos, req.Limit)
		if err == nil && a.Read.Status == log.ReadCaughtUp && req.WaitMS > 0 {
			t := time.NewTimer(time.Duration(req.WaitMS) * time.Millisecond)
			select {
			case <-ctx.Done():
			case <-wake:
			case <-t.C:
			}
			t.Stop()
			a.Read, err = state.ReadUser(req.UID, req.Epoch, req.Pos, req.Limit)
		}
	default:
		return nil, fmt.Errorf("syncd: unknown read %q", req.Op)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(a)
}
