package raftstore

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Node pairs: one connection per node pair and direction for every shard's Raft traffic.
//
// A node runs a raft instance per shard. Each instance's transport (shardTransport, a
// raft.Transport) sends its AppendEntries, heartbeats, RequestVote, RequestPreVote and TimeoutNow
// through the node's nodeNet, which keeps ONE connection to each peer node (a mux connection
// whose header says "pairs", mutual TLS like every node-plane connection) and multiplexes every
// shard's requests on it, each frame naming its shard and a request id (pairs_codec.go). The
// answers come back on the same connection. Writes are coalesced (frameWriter): what is queued
// while a write is under way goes out with the next one, so one syscall and one TLS record carry
// the frames of many shards; the peer reads them with one goroutine instead of one per shard and
// connection.
//
// The semantics per shard are NetworkTransport's:
//   - A shard's requests from one peer are handled in order, by a goroutine of that shard's own
//     (pairIn.enqueue), so a shard stuck on its disk holds up its own requests only.
//   - Heartbeats (the condition of hashicorp's net_transport.go) go to the shard's heartbeat
//     handler at once, from the reader, never behind the shard's appends.
//   - A request for a shard the node does not host is answered with an error.
//   - AppendEntries is pipelined (AppendEntriesPipeline), up to pairMaxInFlight per shard and peer.
//   - A broken connection fails every request in flight on it at once; the next request redials,
//     after a backoff if dialling failed. A request unanswered for the transport timeout fails, and
//     if nothing at all arrived on the connection meanwhile the peer is taken for dead and the
//     connection is dropped (so a silent peer is detected within the timeout).
//
// InstallSnapshot stays on the shard's own raft.NetworkTransport (over a "SYR1" shard connection):
// a snapshot body would block the shared connection. So does an AppendEntries too large for a
// frame (maxPairFrame). The NetworkTransport's inbound RPCs (snapshots, and everything a node of
// an older version sends) are merged into the shard's consumer channel.

// pairMaxInFlight bounds the pipelined AppendEntries of one shard to one peer (NetworkTransport's
// MaxRPCsInFlight, as the shard transports had).
const pairMaxInFlight = 16

// pairTimeout is the transport timeout: how long a request waits for its answer, and a write for
// the peer to take it (NetworkTransport's Timeout, as the shard transports had).
const pairTimeout = 10 * time.Second

// pairDialTimeout bounds connecting to a peer, TLS handshake and header included.
const pairDialTimeout = 2 * time.Second

// pairBackoff and pairMaxBackoff space the dials to a peer that cannot be reached: requests
// meanwhile fail at once (raft backs off on its own too).
const (
	pairBackoff    = 10 * time.Millisecond
	pairMaxBackoff = time.Second
)

// pairQueueLimit bounds the requests of one shard queued on one connection. A peer's raft has at
// most pairMaxInFlight appends and a few other requests outstanding per shard: a peer beyond the
// limit is broken, and its connection is closed.
const pairQueueLimit = 1024

// pairReadBuffer is the reader's buffer: small frames (heartbeats, answers) cost no syscall each.
const pairReadBuffer = 64 << 10

// nodeNet is a node's Raft transport to its peers (see above). Safe for concurrent use.
type nodeNet struct {
	tls      *TLS // nil: plain TCP
	logger   *slog.Logger
	dialAddr func(id, addr string) string // the address to dial a peer at (Node.dialAddr)
	timeout  time.Duration

	mu     sync.Mutex
	closed bool
	shards map[ShardID]*shardTransport
	out    map[nodeAt]*pairConn // connections this node dialled
	retry  map[nodeAt]pairRetry // peers whose last dial failed
	in     map[*pairIn]struct{} // connections peers dialled
	wg     sync.WaitGroup       // every goroutine of the transport
}

// pairRetry is when a peer whose dial failed may be dialled again.
type pairRetry struct {
	at       time.Time
	failures int
	err      error
}

func newNodeNet(t *TLS, logger *slog.Logger, dialAddr func(id, addr string) string) *nodeNet {
	return &nodeNet{
		tls:      t,
		logger:   logger.With("component", "raft-pairs"),
		dialAddr: dialAddr,
		timeout:  pairTimeout,
		shards:   map[ShardID]*shardTransport{},
		out:      map[nodeAt]*pairConn{},
		retry:    map[nodeAt]pairRetry{},
		in:       map[*pairIn]struct{}{},
	}
}

// close closes every connection, waits for every goroutine and refuses requests from then on.
// Close the shard transports first (their raft instances shut down): a request being handled
// waits for its shard's answer.
func (n *nodeNet) close() {
	n.mu.Lock()
	n.closed = true
	outs := make([]*pairConn, 0, len(n.out))
	for _, c := range n.out {
		outs = append(outs, c)
	}
	for in := range n.in {
		in.conn.Close() // its reader ends and cleans up
	}
	n.mu.Unlock()
	for _, c := range outs {
		<-c.ready
		c.fail(raft.ErrTransportShutdown)
	}
	n.wg.Wait()
}

// connections returns how many connections this node dialled and accepted, for tests.
func (n *nodeNet) connections() (out, in int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.out), len(n.in)
}

// shard registers shard's transport on n: raft gets it, and the requests peers send for the
// shard go to it. nt is the shard's NetworkTransport (its mux layer's), which keeps
// InstallSnapshot. The transport unregisters when closed.
func (n *nodeNet) shard(shard ShardID, nt *raft.NetworkTransport) (*shardTransport, error) {
	t := &shardTransport{
		net:       n,
		shard:     shard,
		nt:        nt,
		consumeCh: make(chan raft.RPC),
		shutdown:  make(chan struct{}),
		pipelines: map[*pairPipeline]struct{}{},
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, fmt.Errorf("raftstore: shard %d transport: %w", shard, raft.ErrTransportShutdown)
	}
	if _, ok := n.shards[shard]; ok {
		return nil, fmt.Errorf("raftstore: shard %d transport already registered", shard)
	}
	n.shards[shard] = t
	n.wg.Add(1)
	go t.mergeConsumer()
	return t, nil
}

func (n *nodeNet) lookup(shard ShardID) *shardTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.shards[shard]
}

// conn returns the connection to node to, dialling one if there is none, within timeout.
func (n *nodeNet) conn(to nodeAt, timeout time.Duration) (*pairConn, error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, raft.ErrTransportShutdown
	}
	c := n.out[to]
	if c == nil {
		if r, ok := n.retry[to]; ok && time.Now().Before(r.at) {
			n.mu.Unlock()
			return nil, fmt.Errorf("raftstore: node %s unreachable (%v); next dial in %v", to, r.err, time.Until(r.at).Round(time.Millisecond))
		}
		c = &pairConn{net: n, to: to, ready: make(chan struct{}), pending: map[uint64]*pairCall{}}
		n.out[to] = c
		n.wg.Add(1)
		go n.dial(c)
	}
	n.mu.Unlock()
	select {
	case <-c.ready:
	default:
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		select {
		case <-c.ready:
		case <-timer.C:
			return nil, fmt.Errorf("raftstore: connecting to node %s: timed out after %v", to, timeout)
		}
	}
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return c, nil
}

// dial connects c, then reads its answers until the connection fails.
func (n *nodeNet) dial(c *pairConn) {
	defer n.wg.Done()
	conn, err := dialNode(n.tls, c.to.id, c.to.addr, pairDialTimeout, 0)
	if err == nil {
		if err = writeHeader(conn, []byte(pairMagic+"\x00\x00\x00\x00"), pairDialTimeout); err != nil {
			conn.Close()
		}
	}
	n.mu.Lock()
	if err == nil && n.closed {
		conn.Close()
		err = raft.ErrTransportShutdown
	}
	if err != nil {
		r := n.retry[c.to]
		r.failures++
		r.err = err
		r.at = time.Now().Add(min(pairBackoff<<min(r.failures-1, 16), pairMaxBackoff))
		n.retry[c.to] = r
	} else {
		delete(n.retry, c.to)
		c.conn = conn
		c.w = newFrameWriter(conn, n.timeout, c.fail)
	}
	n.mu.Unlock()
	if err != nil {
		c.fail(fmt.Errorf("dial: %w", err))
		close(c.ready)
		return
	}
	close(c.ready)
	c.read(bufio.NewReaderSize(conn, pairReadBuffer))
}

// pairConn is the connection this node dialled to a peer, and the requests waiting for answers.
type pairConn struct {
	net   *nodeNet
	to    nodeAt
	ready chan struct{} // closed once dialled (conn and w set) or failed (err set)
	conn  net.Conn
	w     *frameWriter
	// lastRead is when the last frame arrived (UnixNano); a request unanswered for the timeout
	// with nothing read since it was sent means the peer is silent.
	lastRead atomic.Int64

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]*pairCall
	err     error // set once the connection failed: no new requests
	failed  bool
}

// pairCall is one request on a pairConn, until its answer is decoded into resp.
type pairCall struct {
	id   uint64
	resp any // the RPC's response type
	sent int64
	done chan struct{} // closed with err set, and resp decoded if err is nil
	err  error
}

// start sends req for shard on c; its answer will be decoded into resp.
func (c *pairConn) start(shard ShardID, req, resp any) (*pairCall, error) {
	call := &pairCall{resp: resp, done: make(chan struct{}), sent: time.Now().UnixNano()}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.nextID++
	call.id = c.nextID
	c.pending[call.id] = call
	c.mu.Unlock()
	err := c.w.queue(func(b []byte) ([]byte, error) { return appendPairRequest(b, call.id, shard, req) })
	if err != nil {
		c.mu.Lock()
		delete(c.pending, call.id)
		c.mu.Unlock()
		return nil, err
	}
	return call, nil
}

// await waits for call's answer, for timeout at most, or until cancel is closed (nil: never).
func (c *pairConn) await(call *pairCall, timeout time.Duration, cancel <-chan struct{}) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var err error
	select {
	case <-call.done:
		return call.err
	case <-cancel:
		err = raft.ErrPipelineShutdown
	case <-timer.C:
		err = fmt.Errorf("raftstore: no answer from node %s in %v", c.to, timeout)
	}
	c.mu.Lock()
	_, waiting := c.pending[call.id]
	delete(c.pending, call.id)
	c.mu.Unlock()
	if !waiting { // the answer (or the connection's failure) is being delivered
		<-call.done
		return call.err
	}
	if errors.Is(err, raft.ErrPipelineShutdown) {
		return err
	}
	if c.lastRead.Load() < call.sent {
		err = fmt.Errorf("raftstore: node %s sent nothing for %v: dropping the connection", c.to, timeout)
		c.fail(err)
	}
	return err
}

// read decodes answers until the connection fails.
func (c *pairConn) read(r io.Reader) {
	for {
		frame, err := readFrame(r, maxPairFrame)
		if err != nil {
			c.fail(err)
			return
		}
		c.lastRead.Store(time.Now().UnixNano())
		f, err := decodePairFrame(frame, false)
		if err != nil {
			c.fail(err)
			return
		}
		c.mu.Lock()
		call := c.pending[f.id]
		delete(c.pending, f.id)
		c.mu.Unlock()
		if call == nil {
			continue // its caller gave up waiting
		}
		switch f.kind {
		case pairError:
			d := wireDecoder{b: f.body}
			call.err = fmt.Errorf("raftstore: node %s: %s", c.to, d.str())
			if d.err != nil {
				call.err = d.err
			}
		case pairKind(call.resp):
			call.err = decodePairMessage(f.body, call.resp)
		default:
			call.err = fmt.Errorf("raftstore: node %s answered with a frame of kind %d", c.to, f.kind)
		}
		close(call.done)
		if call.err != nil && f.kind != pairError {
			c.fail(call.err) // a malformed answer: nothing after it can be trusted
			return
		}
	}
}

// fail marks c broken: every request in flight gets err at once, and the next request redials.
// Idempotent: the first error sticks.
func (c *pairConn) fail(err error) {
	n := c.net
	n.mu.Lock()
	if n.out[c.to] == c {
		delete(n.out, c.to)
	}
	n.mu.Unlock()
	c.mu.Lock()
	if c.failed {
		c.mu.Unlock()
		return
	}
	c.failed = true
	c.err = fmt.Errorf("raftstore: connection to node %s: %w", c.to, err)
	pending := c.pending
	c.pending = nil
	cerr := c.err
	c.mu.Unlock()
	if !errors.Is(err, raft.ErrTransportShutdown) && !errors.Is(err, net.ErrClosed) {
		n.logger.Debug("node-pair connection failed", "peer", c.to.String(), "err", err)
	}
	for _, call := range pending {
		call.err = cerr
		close(call.done)
	}
	if c.conn != nil {
		c.conn.Close()
		c.w.stop()
	}
}

// frameWriter coalesces frames without a goroutine of its own: whoever queues a frame while no
// write is under way writes it, and then everything the others queued meanwhile, until nothing
// is left; whoever queues during a write leaves its frame to the writer. So an idle connection
// writes each frame at once, from the goroutine that made it, and a busy one writes the frames of
// many shards with one Write (group commit).
type frameWriter struct {
	conn    net.Conn
	timeout time.Duration
	fail    func(error) // called once a write fails

	mu      sync.Mutex
	buf     []byte // frames queued
	spare   []byte // the buffer last written, reused
	writing bool
	err     error
}

func newFrameWriter(conn net.Conn, timeout time.Duration, fail func(error)) *frameWriter {
	return &frameWriter{conn: conn, timeout: timeout, fail: fail}
}

// queue appends a frame with enc (which returns the extended buffer, or the buffer as it was and
// an error) and writes it, with whatever else is queued, unless a write is under way.
func (w *frameWriter) queue(enc func([]byte) ([]byte, error)) error {
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return err
	}
	b, err := enc(w.buf)
	w.buf = b
	if err != nil || w.writing {
		w.mu.Unlock()
		return err
	}
	w.writing = true
	for len(w.buf) > 0 && w.err == nil {
		out := w.buf
		w.buf = w.spare[:0]
		w.mu.Unlock()
		w.conn.SetWriteDeadline(time.Now().Add(w.timeout))
		_, werr := w.conn.Write(out)
		w.mu.Lock()
		if werr != nil {
			w.err, w.buf = werr, nil
			w.writing = false
			w.mu.Unlock()
			w.fail(werr)
			return werr
		}
		if cap(out) > 4<<20 {
			out = nil // a burst's buffer is not kept for idle times
		}
		w.spare = out
	}
	w.writing = false
	w.mu.Unlock()
	return nil
}

// stop refuses further frames; what is queued is dropped.
func (w *frameWriter) stop() {
	w.mu.Lock()
	if w.err == nil {
		w.err = net.ErrClosed
	}
	w.buf = nil
	w.mu.Unlock()
}

// serve takes over conn, a node-pair connection a peer dialled (its mux header read), until it
// or the transport closes. It does not block.
func (n *nodeNet) serve(conn net.Conn) {
	in := &pairIn{net: n, conn: conn, peer: peerNodeID(conn, n.tls), queues: map[*shardTransport]*pairQueue{}}
	in.w = newFrameWriter(conn, n.timeout, func(error) { conn.Close() })
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		conn.Close()
		return
	}
	n.in[in] = struct{}{}
	n.wg.Add(1)
	n.mu.Unlock()
	go func() {
		defer n.wg.Done()
		in.read()
	}()
}

// pairIn is a connection a peer dialled: its requests, answered on it.
type pairIn struct {
	net  *nodeNet
	conn net.Conn
	peer string // the node its certificate names ("" without TLS)
	w    *frameWriter

	mu     sync.Mutex
	closed bool
	queues map[*shardTransport]*pairQueue // shards with requests being handled
}

// pairQueue is one shard's requests from one connection, handled in order by one goroutine
// while there are any.
type pairQueue struct {
	reqs []pairRequest
}

type pairRequest struct {
	id   uint64
	kind uint8
	cmd  any
}

// read handles requests until the connection fails or breaks the protocol, then closes it.
func (in *pairIn) read() {
	n := in.net
	r := bufio.NewReaderSize(in.conn, pairReadBuffer)
	var err error
	for err == nil {
		var frame []byte
		if frame, err = readFrame(r, maxPairFrame); err == nil {
			err = in.handle(frame)
		}
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		n.logger.Warn("closing node-pair connection", "remote", in.conn.RemoteAddr().String(), "peer", in.peer, "err", err)
	}
	in.conn.Close()
	in.w.stop()
	in.mu.Lock()
	in.closed = true // queued requests are dropped; the peer failed them with the connection
	in.mu.Unlock()
	n.mu.Lock()
	delete(n.in, in)
	n.mu.Unlock()
}

// handle decodes a request frame and answers it, or hands it to its shard's queue. An error
// closes the connection: the frame was malformed.
func (in *pairIn) handle(frame []byte) error {
	f, err := decodePairFrame(frame, true)
	if err != nil {
		return err
	}
	cmd, err := newPairRequest(f.kind)
	if err != nil {
		in.answer(f.id, f.kind, nil, err) // a kind of a newer version, say: the rest is readable
		return nil
	}
	if err := decodePairMessage(f.body, cmd); err != nil {
		return err
	}
	t := in.net.lookup(f.shard)
	if t == nil {
		in.answer(f.id, f.kind, nil, fmt.Errorf("%w: shard %d is not hosted here", ErrNoShard, f.shard))
		return nil
	}
	if hdr := cmd.(raft.WithRPCHeader).GetRPCHeader(); in.peer != "" && string(hdr.ID) != in.peer {
		in.answer(f.id, f.kind, nil, fmt.Errorf("raftstore: request from node %q claims to come from %q", in.peer, hdr.ID))
		return nil
	}
	if ae, ok := cmd.(*raft.AppendEntriesRequest); ok && isHeartbeat(ae) {
		if fn := t.heartbeatHandler(); fn != nil {
			resp, err := t.heartbeat(fn, ae)
			in.answer(f.id, f.kind, resp, err)
			return nil
		}
	}
	return in.enqueue(t, pairRequest{id: f.id, kind: f.kind, cmd: cmd})
}

// isHeartbeat is the condition of hashicorp's net_transport.go for the heartbeat fast path (whose
// fallback to the deprecated Leader field never applies here: the codec does not carry it).
func isHeartbeat(req *raft.AppendEntriesRequest) bool {
	return req.Term != 0 && req.Addr != nil && req.PrevLogEntry == 0 && req.PrevLogTerm == 0 &&
		len(req.Entries) == 0 && req.LeaderCommitIndex == 0
}

// enqueue queues r for shard t, starting the shard's handler on this connection if none runs.
func (in *pairIn) enqueue(t *shardTransport, r pairRequest) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	q := in.queues[t]
	if q == nil {
		q = &pairQueue{}
		in.queues[t] = q
		in.net.wg.Add(1)
		go in.work(t, q)
	}
	if len(q.reqs) >= pairQueueLimit {
		return fmt.Errorf("raftstore: more than %d requests queued for shard %d", pairQueueLimit, t.shard)
	}
	q.reqs = append(q.reqs, r)
	return nil
}

// work hands q's requests to shard t's raft one at a time, answering each, until q is empty.
func (in *pairIn) work(t *shardTransport, q *pairQueue) {
	defer in.net.wg.Done()
	for {
		in.mu.Lock()
		if len(q.reqs) == 0 || in.closed {
			delete(in.queues, t)
			in.mu.Unlock()
			return
		}
		r := q.reqs[0]
		q.reqs[0] = pairRequest{}
		q.reqs = q.reqs[1:]
		in.mu.Unlock()
		resp, err := t.deliver(r.cmd)
		in.answer(r.id, r.kind, resp, err)
	}
}

// answer queues the response to request id.
func (in *pairIn) answer(id uint64, kind uint8, resp any, err error) {
	if err == nil && pairKind(resp) != kind {
		err = fmt.Errorf("raftstore: raft answered a request of kind %d with %T", kind, resp)
	}
	in.w.queue(func(b []byte) ([]byte, error) { return appendPairResponse(b, id, kind, resp, err), nil })
}

// shardTransport is one shard's raft.Transport: the node's connections (nodeNet) for every RPC
// but InstallSnapshot, which the shard's NetworkTransport sends. Raft hands it the server id and
// the address from the Raft configuration; it dials the node at Config.PeerAddr's override, if
// any, and expects the node's certificate to name the id.
type shardTransport struct {
	net       *nodeNet
	shard     ShardID
	nt        *raft.NetworkTransport
	consumeCh chan raft.RPC
	shutdown  chan struct{} // closed by Close
	closeOnce sync.Once

	hbMu sync.Mutex
	hb   func(raft.RPC)

	mu        sync.Mutex
	pipelines map[*pairPipeline]struct{}
}

var (
	_ raft.Transport   = (*shardTransport)(nil)
	_ raft.WithClose   = (*shardTransport)(nil)
	_ raft.WithPreVote = (*shardTransport)(nil)
)

// peer is the node to reach server id at addr (raft's address for it).
func (t *shardTransport) peer(id raft.ServerID, addr raft.ServerAddress) nodeAt {
	return nodeAt{id: string(id), addr: t.net.dialAddr(string(id), string(addr))}
}

// call sends req to the server and decodes its answer into resp.
func (t *shardTransport) call(id raft.ServerID, target raft.ServerAddress, req, resp any) error {
	c, err := t.net.conn(t.peer(id, target), t.net.timeout)
	if err != nil {
		return err
	}
	call, err := c.start(t.shard, req, resp)
	if err != nil {
		return err
	}
	return c.await(call, t.net.timeout, nil)
}

// Consumer implements raft.Transport: the RPCs of peers for this shard, over the node's
// connections and the NetworkTransport's.
func (t *shardTransport) Consumer() <-chan raft.RPC { return t.consumeCh }

// mergeConsumer passes the NetworkTransport's RPCs on to the consumer, until Close.
func (t *shardTransport) mergeConsumer() {
	defer t.net.wg.Done()
	for {
		select {
		case rpc := <-t.nt.Consumer():
			select {
			case t.consumeCh <- rpc:
			case <-t.shutdown:
				return // the NetworkTransport's handler gives up on its own shutdown
			}
		case <-t.shutdown:
			return
		}
	}
}

// deliver hands a peer's request to raft and waits for the answer.
func (t *shardTransport) deliver(cmd any) (any, error) {
	respCh := make(chan raft.RPCResponse, 1)
	select {
	case t.consumeCh <- raft.RPC{Command: cmd, RespChan: respCh}:
	case <-t.shutdown:
		return nil, raft.ErrTransportShutdown
	}
	select {
	case r := <-respCh:
		return r.Response, r.Error
	case <-t.shutdown:
		return nil, raft.ErrTransportShutdown
	}
}

// heartbeat runs fn, raft's heartbeat handler, on req. fn answers before it returns, unless raft
// is shutting down.
func (t *shardTransport) heartbeat(fn func(raft.RPC), req *raft.AppendEntriesRequest) (any, error) {
	respCh := make(chan raft.RPCResponse, 1)
	fn(raft.RPC{Command: req, RespChan: respCh})
	select {
	case r := <-respCh:
		return r.Response, r.Error
	default:
		return nil, raft.ErrTransportShutdown
	}
}

func (t *shardTransport) heartbeatHandler() func(raft.RPC) {
	t.hbMu.Lock()
	defer t.hbMu.Unlock()
	return t.hb
}

// SetHeartbeatHandler implements raft.Transport.
func (t *shardTransport) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	t.hbMu.Lock()
	t.hb = cb
	t.hbMu.Unlock()
	t.nt.SetHeartbeatHandler(cb)
}

// LocalAddr implements raft.Transport: the node's raft listener.
func (t *shardTransport) LocalAddr() raft.ServerAddress { return t.nt.LocalAddr() }

// AppendEntriesPipeline implements raft.Transport: a pipeline on the node's connection to the
// peer, which ends with that connection.
func (t *shardTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	c, err := t.net.conn(t.peer(id, target), t.net.timeout)
	if err != nil {
		return nil, err
	}
	p := &pairPipeline{t: t, c: c, inflight: make(chan *pairFuture, pairMaxInFlight),
		doneCh: make(chan raft.AppendFuture, pairMaxInFlight), stop: make(chan struct{})}
	t.mu.Lock()
	select {
	case <-t.shutdown:
		t.mu.Unlock()
		return nil, raft.ErrTransportShutdown
	default:
	}
	t.pipelines[p] = struct{}{}
	t.net.wg.Add(1)
	t.mu.Unlock()
	go p.run()
	return p, nil
}

// AppendEntries implements raft.Transport. One too large for a frame goes through the
// NetworkTransport.
func (t *shardTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := t.call(id, target, args, resp)
	if errors.Is(err, errPairFrameTooLarge) {
		return t.nt.AppendEntries(id, t.snapTarget(id, target), args, resp)
	}
	return err
}

// RequestVote implements raft.Transport.
func (t *shardTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return t.call(id, target, args, resp)
}

// RequestPreVote implements raft.WithPreVote.
func (t *shardTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.call(id, target, args, resp)
}

// TimeoutNow implements raft.Transport.
func (t *shardTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return t.call(id, target, args, resp)
}

// InstallSnapshot implements raft.Transport, over the shard's NetworkTransport.
func (t *shardTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	return t.nt.InstallSnapshot(id, t.snapTarget(id, target), args, resp, data)
}

// snapTarget is the address the NetworkTransport dials server id at: the node's, tagged with the
// id (raftTarget) for the shard layer's Dial to check the certificate.
func (t *shardTransport) snapTarget(id raft.ServerID, target raft.ServerAddress) raft.ServerAddress {
	p := t.peer(id, target)
	return raftTarget(id, p.addr)
}

// EncodePeer implements raft.Transport.
func (t *shardTransport) EncodePeer(id raft.ServerID, addr raft.ServerAddress) []byte {
	return t.nt.EncodePeer(id, addr)
}

// DecodePeer implements raft.Transport.
func (t *shardTransport) DecodePeer(b []byte) raft.ServerAddress { return t.nt.DecodePeer(b) }

// Close implements raft.WithClose: the shard leaves the node's connections (peers' requests for
// it are answered with an error from then on), its pipelines end, and its NetworkTransport
// closes. Idempotent.
func (t *shardTransport) Close() error {
	var err error
	t.closeOnce.Do(func() {
		t.net.mu.Lock()
		if t.net.shards[t.shard] == t {
			delete(t.net.shards, t.shard)
		}
		t.net.mu.Unlock()
		t.mu.Lock()
		close(t.shutdown)
		pipes := t.pipelines
		t.pipelines = nil
		t.mu.Unlock()
		for p := range pipes {
			p.Close()
		}
		err = t.nt.Close()
	})
	return err
}

// CloseStreams closes the NetworkTransport's pooled connections (see newShardTransport).
func (t *shardTransport) CloseStreams() { t.nt.CloseStreams() }

// pairPipeline is a shard's AppendEntries pipeline to one peer, on the node's connection to it.
type pairPipeline struct {
	t        *shardTransport
	c        *pairConn
	inflight chan *pairFuture // sent, in order, for run to wait for
	doneCh   chan raft.AppendFuture
	stop     chan struct{}
	once     sync.Once
}

// AppendEntries implements raft.AppendPipeline. It blocks while pairMaxInFlight requests are
// unanswered.
func (p *pairPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	f := &pairFuture{start: time.Now(), args: args, resp: resp, done: make(chan struct{})}
	call, err := p.c.start(p.t.shard, args, resp)
	if err != nil {
		return nil, err
	}
	f.call = call
	select {
	case p.inflight <- f:
		return f, nil
	case <-p.stop:
		return nil, raft.ErrPipelineShutdown
	}
}

// run completes the futures in the order they were sent and passes them to the consumer.
func (p *pairPipeline) run() {
	defer p.t.net.wg.Done()
	for {
		select {
		case f := <-p.inflight:
			f.err = p.c.await(f.call, p.t.net.timeout, p.stop)
			close(f.done)
			select {
			case p.doneCh <- f:
			case <-p.stop:
				return
			}
		case <-p.stop:
			return
		}
	}
}

// Consumer implements raft.AppendPipeline.
func (p *pairPipeline) Consumer() <-chan raft.AppendFuture { return p.doneCh }

// Close implements raft.AppendPipeline: requests in flight are no longer waited for.
func (p *pairPipeline) Close() error {
	p.once.Do(func() {
		close(p.stop)
		p.t.mu.Lock()
		delete(p.t.pipelines, p)
		p.t.mu.Unlock()
	})
	return nil
}

// pairFuture is a pipelined AppendEntries (raft.AppendFuture).
type pairFuture struct {
	start time.Time
	args  *raft.AppendEntriesRequest
	resp  *raft.AppendEntriesResponse
	call  *pairCall
	done  chan struct{}
	err   error
}

// Error implements raft.Future.
func (f *pairFuture) Error() error {
	<-f.done
	return f.err
}

// Start implements raft.AppendFuture.
func (f *pairFuture) Start() time.Time { return f.start }

// Request implements raft.AppendFuture.
func (f *pairFuture) Request() *raft.AppendEntriesRequest { return f.args }

// Response implements raft.AppendFuture.
func (f *pairFuture) Response() *raft.AppendEntriesResponse { return f.resp }
