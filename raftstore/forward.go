package raftstore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Forwarding proposals to the shard leader.
//
// Only a shard's leader can propose, but a client's request, a fan-out delivery or a cursor ack
// arrives at whichever node the device or the fan-out runs on. Propose therefore forwards a
// proposal it cannot make to the leader's node, over the same listener as Raft (a mux connection
// whose header says "forward"), and returns the leader's answer as if it had proposed locally:
// the same Result, the same sentinels (log refusals included).
//
// One long-lived TCP connection per peer carries every forwarded proposal to it, pipelined and
// matched by request id; with Config.TLS it is mutual TLS, and the peer's certificate must name
// the node the forwarder meant to reach (tls.go). The forwarded command carries no proposer
// time: the leader stamps it with its own clock, as for a local proposal, and refuses a forwarded
// command that names one (decodeFwdRequest), so that no caller chooses the time entries get. A leader answers only for itself (it never
// forwards again); if it has lost leadership meanwhile, its NotLeaderError names the new leader
// and Propose follows it, a bounded number of times.
//
// Forwarding can leave the outcome unknown (the connection breaks after the request was sent):
// that is ErrUnreachable, which callers treat like ErrLeadershipLost — retry; every command is
// idempotent (dedup by client_msg_id, delivery marks, …).

// fwdMagic is the mux header magic of a forwarding connection (the shard field is unused, 0).
const fwdMagic = "SYF1"

// fwdMaxHops bounds how often one Propose follows a moving leader.
const fwdMaxHops = 3

// fwdDefaultWait bounds a forwarded proposal whose context has no deadline: the leader answers
// within its lease unless the path to it is silently broken.
const fwdDefaultWait = 30 * time.Second

// fwdDialTimeout bounds connecting to a peer.
const fwdDialTimeout = 2 * time.Second

// fwdReadGrace is how long a failed write waits for the connection's reader to report why the
// peer closed it (roundTrip).
const fwdReadGrace = 200 * time.Millisecond

// forwarder sends proposals to other nodes: one connection per peer, dialled on demand and
// redialled after a failure.
type forwarder struct {
	logger *slog.Logger
	tls    *TLS // nil: plain TCP

	mu     sync.Mutex
	conns  map[nodeAt]*fwdConn
	closed bool
	wg     sync.WaitGroup // reader goroutines
}

// nodeAt is a node to dial: its address and the node id its certificate must name ("": any node
// of the cluster, for a joining node's Config.Join only).
type nodeAt struct{ id, addr string }

// String names the peer in errors and logs.
func (p nodeAt) String() string {
	if p.id == "" {
		return p.addr
	}
	return p.id + " at " + p.addr
}

func newForwarder(t *TLS, logger *slog.Logger) *forwarder {
	return &forwarder{logger: logger.With("component", "forward"), tls: t, conns: map[nodeAt]*fwdConn{}}
}

// fwdConn is one connection to a peer and the requests waiting for its answers.
type fwdConn struct {
	to    nodeAt
	ready chan struct{} // closed once dialled (c set) or failed (err set)
	read  chan struct{} // closed when the reader of c's answers has stopped (on c's failure)
	c     net.Conn
	wmu   sync.Mutex // serializes writes

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan fwdResponse
	err     error // set once the connection failed; no new requests
}

// propose forwards cmd for shard to node to and waits for its answer.
func (f *forwarder) propose(ctx context.Context, to nodeAt, shard ShardID, cmd []byte) (Result, error) {
	r, err := f.roundTrip(ctx, to, &fwdRequest{kind: fwdPropose, shard: shard, command: cmd})
	if err != nil {
		return Result{}, err
	}
	var nl *NotLeaderError
	if errors.As(r.err, &nl) {
		nl.Shard = shard
	}
	return r.res, r.err
}

// status asks node to for its NodeStatus.
func (f *forwarder) status(ctx context.Context, to nodeAt) (NodeStatus, error) {
	r, err := f.roundTrip(ctx, to, &fwdRequest{kind: fwdStatusReq})
	if err == nil {
		err = r.err
	}
	if err != nil {
		return NodeStatus{}, err
	}
	var st NodeStatus
	if err := json.Unmarshal(r.body, &st); err != nil {
		return NodeStatus{}, fmt.Errorf("raftstore: status of %s: %w", to, err)
	}
	return st, nil
}

// call sends a call of method with payload to node to and returns its answer.
func (f *forwarder) call(ctx context.Context, to nodeAt, method string, payload []byte) ([]byte, error) {
	r, err := f.roundTrip(ctx, to, &fwdRequest{kind: fwdCall, method: method, command: payload})
	if err == nil {
		err = r.err
	}
	return r.body, err
}

// roundTrip sends req (its id and timeout filled in here) to node to and waits for the answer.
// The error return is for the trip itself; the answer's own error is in the response.
func (f *forwarder) roundTrip(ctx context.Context, to nodeAt, req *fwdRequest) (fwdResponse, error) {
	c, err := f.conn(ctx, to)
	if err != nil {
		return fwdResponse{}, err
	}
	wait := fwdDefaultWait
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl)
		if wait <= 0 {
			return fwdResponse{}, ErrTimeout
		}
		req.timeoutMS = uint64(max(wait.Milliseconds(), 1))
	}
	ch := make(chan fwdResponse, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return fwdResponse{}, fmt.Errorf("%w: %v", ErrUnreachable, c.err)
	}
	c.nextID++
	req.id = c.nextID
	c.pending[req.id] = ch
	c.mu.Unlock()

	frame := req.encode()
	c.wmu.Lock()
	c.c.SetWriteDeadline(time.Now().Add(min(wait, fwdDefaultWait)))
	_, werr := c.c.Write(frame)
	c.wmu.Unlock()
	if werr != nil {
		// A write sees only a reset where the reader sees why the peer closed: the TLS alert
		// of a certificate it refused, which TLS 1.3 delivers after our handshake completed.
		// The first failure is the one reported: let the reader speak first.
		select {
		case <-c.read:
		case <-time.After(fwdReadGrace):
		}
		f.fail(c, werr)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
	case <-timer.C:
	}
	c.mu.Lock()
	delete(c.pending, req.id)
	c.mu.Unlock()
	return fwdResponse{}, fmt.Errorf("%w: no answer from %s in time", ErrUnreachable, to)
}

// conn returns the connection to node to, dialling it if there is none.
func (f *forwarder) conn(ctx context.Context, to nodeAt) (*fwdConn, error) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, ErrShutdown
	}
	c := f.conns[to]
	if c == nil {
		c = &fwdConn{to: to, ready: make(chan struct{}), read: make(chan struct{}), pending: map[uint64]chan fwdResponse{}}
		f.conns[to] = c
		f.wg.Add(1)
		go f.dial(c)
	}
	f.mu.Unlock()
	select {
	case <-c.ready:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: connecting to %s: %v", ErrUnreachable, to, ctx.Err())
	}
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	return c, nil
}

// dial connects c, then reads its answers until the connection fails.
func (f *forwarder) dial(c *fwdConn) {
	defer f.wg.Done()
	conn, err := dialNode(f.tls, c.to.id, c.to.addr, fwdDialTimeout, 5*time.Second)
	if err == nil {
		hdr := binary.BigEndian.AppendUint32([]byte(fwdMagic), 0)
		if err = writeHeader(conn, hdr, fwdDialTimeout); err != nil {
			conn.Close()
		}
	}
	f.mu.Lock()
	if err == nil && f.closed {
		conn.Close()
		err = ErrShutdown
	}
	if err == nil {
		c.c = conn
	}
	f.mu.Unlock()
	if err != nil {
		f.fail(c, err)
		close(c.ready)
		return
	}
	close(c.ready)
	defer close(c.read)
	for {
		body, err := readFrame(conn)
		if err != nil {
			f.fail(c, err)
			return
		}
		r, err := decodeFwdResponse(body)
		if err != nil {
			f.fail(c, err)
			return
		}
		c.mu.Lock()
		ch := c.pending[r.id]
		delete(c.pending, r.id)
		c.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
}

// fail marks c broken: its waiting requests get ErrUnreachable and the next proposal redials.
func (f *forwarder) fail(c *fwdConn, err error) {
	f.mu.Lock()
	if f.conns[c.to] == c {
		delete(f.conns, c.to)
	}
	f.mu.Unlock()
	c.mu.Lock()
	if c.err == nil {
		c.err = fmt.Errorf("forwarding connection to %s: %w", c.to, err)
		if !errors.Is(err, ErrShutdown) && !errors.Is(err, net.ErrClosed) {
			f.logger.Debug("forwarding connection failed", "peer", c.to.String(), "err", err)
		}
	}
	pending := c.pending
	c.pending = map[uint64]chan fwdResponse{}
	cerr := c.err
	c.mu.Unlock()
	for _, ch := range pending {
		ch <- fwdResponse{err: fmt.Errorf("%w: %v", ErrUnreachable, cerr)}
	}
	if c.c != nil {
		c.c.Close()
	}
}

// close closes every connection and waits for the readers.
func (f *forwarder) close() {
	f.mu.Lock()
	f.closed = true
	conns := make([]*fwdConn, 0, len(f.conns))
	for _, c := range f.conns {
		conns = append(conns, c)
	}
	f.mu.Unlock()
	for _, c := range conns {
		<-c.ready
		f.fail(c, ErrShutdown)
	}
	f.wg.Wait()
}

// readFrame reads one length-prefixed frame.
func readFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxForwardFrame {
		return nil, fmt.Errorf("raftstore: forwarded frame of %d bytes exceeds %d", n, maxForwardFrame)
	}
	body := make([]byte, n)
	_, err := io.ReadFull(r, body)
	return body, err
}

// fwdServer answers forwarded proposals with the node's local ones.
type fwdServer struct {
	node *Node

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // connection readers and in-flight proposals
}

// serve takes over conn (its mux header already read) until it or the server closes.
func (s *fwdServer) serve(conn net.Conn) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		conn.Close()
		return
	}
	s.conns[conn] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.conns, conn)
			s.mu.Unlock()
			conn.Close()
		}()
		var wmu sync.Mutex
		for {
			body, err := readFrame(conn)
			if err != nil {
				return
			}
			req, err := decodeFwdRequest(body)
			if err != nil {
				s.node.logger.Warn("bad forwarded request; closing the connection", "remote", conn.RemoteAddr().String(),
					"peer", peerNodeID(conn, s.node.cfg.TLS), "err", err)
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				resp := fwdResponse{id: req.id}
				switch req.kind {
				case fwdStatusReq:
					resp.body, resp.err = json.Marshal(s.node.NodeStatus())
				case fwdCall:
					resp.body, resp.err = s.node.serveCall(req)
					if resp.err == nil && resp.body == nil {
						resp.body = []byte{}
					}
				default:
					resp.res, resp.err = s.node.proposeForwarded(req)
				}
				frame := resp.encode()
				wmu.Lock()
				conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
				_, werr := conn.Write(frame)
				wmu.Unlock()
				if werr != nil {
					conn.Close() // the reader ends; the forwarder sees the outcome as unknown
				}
			}()
		}
	}()
}

// close closes every forwarding connection and waits for their proposals to finish (shut the
// shards down first, so that none waits long).
func (s *fwdServer) close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Call asks node id to answer method with payload through its App.Serve, over the
// forwarding connection, and returns the answer. Refusals of the log package keep their
// sentinel; a node that cannot be reached gives ErrUnreachable.
func (n *Node) Call(ctx context.Context, id, method string, payload []byte) ([]byte, error) {
	addr := n.knownAddr(id)
	if addr == "" {
		return nil, fmt.Errorf("%w: no address known for node %q", ErrUnreachable, id)
	}
	return n.fwd.call(ctx, nodeAt{id, n.dialAddr(id, addr)}, method, payload)
}

// serveCall answers a call with the App's Serve.
func (n *Node) serveCall(req fwdRequest) ([]byte, error) {
	if n.cfg.App == nil {
		return nil, fmt.Errorf("raftstore: node %s serves no calls", n.cfg.NodeID)
	}
	ctx := context.Background()
	if req.timeoutMS > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.timeoutMS)*time.Millisecond)
		defer cancel()
	}
	return n.cfg.App.Serve(ctx, req.method, req.command)
}
