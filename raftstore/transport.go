package raftstore

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Shard-aware raft transport.
//
// A node hosts many shards, each its own hashicorp/raft instance, but all of
// them share ONE TCP listener (the Mux). Operators open a single raft port
// per node, and the number of listening sockets, firewall rules and service
// discovery entries does not grow with the number of shards on the node.
//
// Each raft connection starts with a fixed 8-byte header naming the shard it
// is for; after it the stream belongs to that shard's raft.NetworkTransport
// unchanged:
//
//	+-----+-----+-----+-----+-----------------------+
//	| 'S' | 'Y' | 'R' | '1' | shard u32 big-endian  |
//	+-----+-----+-----+-----+-----------------------+
//	  magic; '1' is the header version   4 bytes
//
// A connection whose magic is "SYF1" (shard field 0) instead carries proposals forwarded to
// this node as a shard leader (see forward.go); the mux hands it to the forward handler.
//
// With TLS (Config.TLS, see tls.go) every connection is mutual TLS 1.3 first and the header is
// the first thing sent inside it; a connection that does not complete the handshake within the
// header timeout, with a certificate of the cluster CA, is closed before any header is read.
// Until then it is pending: at most MaxPendingHandshakes connections are, and
// MaxPendingHandshakesPerSource from one source (connlimit.go); the mux closes one beyond
// either as soon as it is accepted, so strangers cannot spend the node's file descriptors.
//
// Only the listener is shared. Every shard still runs its own
// raft.NetworkTransport with its own connection pool, so shards dial
// separate TCP connections to their peers and a slow shard (e.g. sending a
// snapshot) cannot head-of-line block another shard's heartbeats. The cost
// is more outbound connections (up to MaxPool per peer per shard).

// muxMagic opens every mux connection; its last byte is the header version.
const muxMagic = "SYR1"

// muxHeaderLen is magic (4) + shard u32 (4).
const muxHeaderLen = 8

// layerBacklog is how many routed connections a shard layer buffers for its
// Accept. raft accepts in a tight loop, so this only absorbs bursts.
const layerBacklog = 16

// Default timeouts of a Mux created by newMux.
const (
	// defaultHeaderTimeout bounds how long a client may take to send the
	// header, so idle or slow clients cannot pin a goroutine and a socket.
	defaultHeaderTimeout = 5 * time.Second
	// defaultRouteTimeout bounds how long a routed connection waits for
	// room in a busy layer's backlog before it is dropped; raft redials.
	defaultRouteTimeout = time.Second
	// rejectLogInterval spaces the warnings about refused connections: a
	// misconfigured peer redials all the time, and strangers can too.
	rejectLogInterval = 10 * time.Second
)

// Mux is a node's single raft listener. It reads the shard header of every
// accepted connection and hands the connection to the raft.StreamLayer
// registered for that shard (see Layer). Safe for concurrent use.
type Mux struct {
	ln            net.Listener
	tls           *TLS        // nil: plain TCP
	serverTLS     *tls.Config // tls's listener configuration
	logger        *slog.Logger
	headerTimeout time.Duration
	routeTimeout  time.Duration
	// pending counts the connections between accept and the end of their header (handshake).
	pending *connGate

	// closing is closed by Close; routing goroutines select on it.
	closing   chan struct{}
	closeOnce sync.Once
	// wg counts the accept goroutine and every per-connection header
	// goroutine; Close waits for all of them.
	wg sync.WaitGroup

	mu     sync.Mutex
	closed bool
	layers map[ShardID]*shardLayer
	// forward takes over forwarding connections; nil until set, and then such connections are
	// closed.
	forward func(net.Conn)
	// handshaking holds connections still sending their header, so Close
	// can unblock their reads instead of waiting for the deadline.
	handshaking map[net.Conn]struct{}
	// lastReject is when a refused connection was last logged; suppressed
	// counts those refused since without a log line.
	lastReject time.Time
	suppressed int
}

// newMux starts serving raft connections from ln, in mutual TLS under t
// (nil: plain TCP); the Mux owns ln and closes it in Close.
func newMux(ln net.Listener, t *TLS, logger *slog.Logger) *Mux {
	return startMux(ln, t, logger, defaultHeaderTimeout, defaultRouteTimeout)
}

// startMux is newMux with explicit timeouts (tests shorten them).
func startMux(ln net.Listener, t *TLS, logger *slog.Logger, headerTimeout, routeTimeout time.Duration) *Mux {
	m := &Mux{
		ln:            ln,
		tls:           t,
		logger:        logger.With("component", "raft-mux", "addr", ln.Addr().String()),
		headerTimeout: headerTimeout,
		routeTimeout:  routeTimeout,
		pending:       newConnGate(MaxPendingHandshakes, MaxPendingHandshakesPerSource),
		closing:       make(chan struct{}),
		layers:        make(map[ShardID]*shardLayer),
		handshaking:   make(map[net.Conn]struct{}),
	}
	if t != nil {
		m.serverTLS = t.serverConfig()
	}
	m.wg.Add(1)
	go m.acceptLoop()
	return m
}

// Addr returns the address of the node's raft listener; it is every shard's
// raft server address on this node.
func (m *Mux) Addr() net.Addr { return m.ln.Addr() }

// Layer registers shard on the mux and returns its raft.StreamLayer, to be
// passed to newShardTransport. It fails if the shard already has a layer or
// the mux is closed. Closing the layer unregisters it, after which the
// shard can be registered again.
func (m *Mux) Layer(shard ShardID) (raft.StreamLayer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("raftstore: mux layer for shard %d: %w", shard, net.ErrClosed)
	}
	if _, ok := m.layers[shard]; ok {
		return nil, fmt.Errorf("raftstore: mux layer for shard %d already registered", shard)
	}
	l := &shardLayer{
		mux:   m,
		shard: shard,
		conns: make(chan net.Conn, layerBacklog),
		done:  make(chan struct{}),
	}
	m.layers[shard] = l
	return l, nil
}

// handleForward makes h take over every forwarding connection from now on. h must not block.
func (m *Mux) handleForward(h func(net.Conn)) {
	m.mu.Lock()
	m.forward = h
	m.mu.Unlock()
}

// Close stops the mux: it closes the listener and every registered layer
// (their Accept returns net.ErrClosed), closes connections that were not yet
// accepted by a layer, and waits for all of the mux's goroutines to exit.
// Connections already returned by a layer's Accept belong to their
// raft.NetworkTransport and are not touched. Shut the shards' raft
// instances down first: a NetworkTransport whose layer dies under it logs
// accept errors until it is closed. Close is idempotent.
func (m *Mux) Close() error {
	var err error
	m.closeOnce.Do(func() {
		close(m.closing)
		if cerr := m.ln.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
			err = fmt.Errorf("raftstore: close mux listener: %w", cerr)
		}
		m.mu.Lock()
		m.closed = true
		for c := range m.handshaking {
			c.Close() // unblocks the header read
		}
		layers := m.layers
		m.layers = make(map[ShardID]*shardLayer)
		m.mu.Unlock()

		m.wg.Wait()
		// No goroutine can route into a layer any more: drain them.
		for _, l := range layers {
			l.shutdown()
		}
	})
	return err
}

// acceptLoop accepts connections until the listener is closed, handing each
// to its own goroutine so a slow header never delays the next accept.
func (m *Mux) acceptLoop() {
	defer m.wg.Done()
	const maxDelay = time.Second
	var delay time.Duration
	for {
		conn, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.closing:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				m.logger.Error("mux listener closed unexpectedly", "err", err)
				return
			}
			// Transient (e.g. out of file descriptors): back off.
			delay = min(max(2*delay, 5*time.Millisecond), maxDelay)
			m.logger.Warn("mux accept failed", "err", err, "retry_in", delay)
			select {
			case <-m.closing:
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		src, refused := m.pending.enter(conn.RemoteAddr())
		if refused != "" {
			// Closed before TLS starts: no goroutine, no handshake CPU, the descriptor back at once.
			remote := conn.RemoteAddr().String()
			conn.Close()
			m.warnRejected("remote", remote, "err", "too many connections pending authentication",
				"limit", refused, "max_pending", MaxPendingHandshakes, "max_pending_per_source", MaxPendingHandshakesPerSource)
			continue
		}
		if m.serverTLS != nil {
			conn = tls.Server(conn, m.serverTLS) // the handshake runs in handshake(), under its deadline
		}

		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			m.pending.leave(src)
			conn.Close()
			return
		}
		m.handshaking[conn] = struct{}{}
		m.wg.Add(1) // safe: this goroutine's own count keeps wg above zero
		m.mu.Unlock()
		go m.handshake(conn, src)
	}
}

// handshake completes conn's TLS handshake (if any) and reads its header, under one deadline,
// and routes it. src is conn's source in m.pending, which it leaves on return: conn is closed or
// handed over by then, so the pending count is never below the descriptors pending connections
// hold.
func (m *Mux) handshake(conn net.Conn, src string) {
	defer m.wg.Done()
	defer m.pending.leave(src)
	forward, shard, err := m.readHeader(conn)
	peer := peerNodeID(conn, m.tls)

	m.mu.Lock()
	delete(m.handshaking, conn)
	closed := m.closed
	var l *shardLayer
	fwd := m.forward
	if err == nil && !closed && !forward {
		l = m.layers[shard]
		if l != nil {
			// Registered under mu, so the layer's Close (which
			// unregisters under mu, then waits) cannot miss us.
			l.routing.Add(1)
		}
	}
	m.mu.Unlock()

	remote := conn.RemoteAddr().String()
	switch {
	case closed:
		conn.Close()
	case errors.Is(err, io.EOF):
		// Port probes and health checks connect and hang up; not worth a
		// warning.
		m.logger.Debug("mux connection closed before header", "remote", remote)
		conn.Close()
	case err != nil:
		m.warnRejected("remote", remote, "peer", peer, "err", err)
		conn.Close()
	case forward && fwd == nil:
		m.logger.Warn("mux forwarding connection before the node is ready", "remote", remote, "peer", peer)
		conn.Close()
	case forward:
		fwd(conn)
	case l == nil:
		m.logger.Warn("mux connection for unregistered shard", "remote", remote, "peer", peer, "shard", uint32(shard))
		conn.Close()
	default:
		defer l.routing.Done()
		m.route(l, conn, remote)
	}
}

// warnRejected logs a refused connection (a failed TLS handshake, a bad
// header) with args, at most once per rejectLogInterval, saying how many
// were refused in between without a line.
func (m *Mux) warnRejected(args ...any) {
	m.mu.Lock()
	now := time.Now()
	if !m.lastReject.IsZero() && now.Sub(m.lastReject) < rejectLogInterval {
		m.suppressed++
		m.mu.Unlock()
		return
	}
	n := m.suppressed
	m.lastReject, m.suppressed = now, 0
	m.mu.Unlock()
	if n > 0 {
		args = append(args, "refused_unlogged", n)
	}
	m.logger.Warn("mux rejected connection", args...)
}

// readHeader completes the TLS handshake of a TLS connection, then reads
// and validates the 8-byte header, all within the header timeout, then
// clears the deadline so the stream is handed over clean. forward reports a
// forwarding connection.
func (m *Mux) readHeader(conn net.Conn) (forward bool, shard ShardID, err error) {
	deadline := time.Now().Add(m.headerTimeout)
	if err := conn.SetDeadline(deadline); err != nil {
		return false, 0, fmt.Errorf("raftstore: set header deadline: %w", err)
	}
	if tc, ok := conn.(*tls.Conn); ok {
		// Explicitly, so that a plain-TCP client, a certificate of another CA or one naming no
		// node is reported as a failed handshake (the client sees an alert), not a bad header.
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			return false, 0, fmt.Errorf("raftstore: TLS handshake: %w", err)
		}
	}
	var hdr [muxHeaderLen]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		return false, 0, err
	}
	switch string(hdr[:4]) {
	case muxMagic:
	case fwdMagic:
		forward = true
	default:
		return false, 0, fmt.Errorf("raftstore: bad mux header magic %q", hdr[:4])
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return false, 0, fmt.Errorf("raftstore: clear header deadline: %w", err)
	}
	return forward, ShardID(binary.BigEndian.Uint32(hdr[4:])), nil
}

// route queues conn for l's Accept, dropping it if the backlog stays full
// for routeTimeout or the layer or mux closes meanwhile: blocking forever
// would leak the goroutine and the socket, and raft simply redials.
func (m *Mux) route(l *shardLayer, conn net.Conn, remote string) {
	timer := time.NewTimer(m.routeTimeout)
	defer timer.Stop()
	select {
	case l.conns <- conn:
	case <-l.done:
		conn.Close()
	case <-m.closing:
		conn.Close()
	case <-timer.C:
		m.logger.Warn("mux dropped connection, shard not accepting", "remote", remote, "shard", uint32(l.shard))
		conn.Close()
	}
}

// unregister removes l from the mux if it is still the registered layer.
func (m *Mux) unregister(l *shardLayer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.layers[l.shard] == l {
		delete(m.layers, l.shard)
	}
}

// shardLayer is one shard's raft.StreamLayer on a Mux.
type shardLayer struct {
	mux   *Mux
	shard ShardID
	conns chan net.Conn
	// done is closed when the layer is closed; Accept then fails.
	done     chan struct{}
	doneOnce sync.Once
	// routing counts handshake goroutines currently trying to queue into
	// conns; shutdown waits for them before draining.
	routing sync.WaitGroup
}

var _ raft.StreamLayer = (*shardLayer)(nil)

// Accept implements net.Listener: it returns the next connection routed to
// this shard, or an error wrapping net.ErrClosed once the layer is closed.
func (l *shardLayer) Accept() (net.Conn, error) {
	select {
	case <-l.done:
		return nil, l.closedErr()
	default:
	}
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, l.closedErr()
	}
}

func (l *shardLayer) closedErr() error {
	return fmt.Errorf("raftstore: shard %d raft layer closed: %w", l.shard, net.ErrClosed)
}

// Close implements net.Listener: it unregisters the shard from the mux,
// makes Accept fail and closes connections routed but not yet accepted.
// The mux's listener stays open for the other shards.
func (l *shardLayer) Close() error {
	l.mux.unregister(l)
	l.shutdown()
	return nil
}

// shutdown closes done, waits out in-flight routing and closes whatever
// was queued. Called after the layer left the mux's map, so no new routing
// can start. Idempotent.
func (l *shardLayer) shutdown() {
	l.doneOnce.Do(func() { close(l.done) })
	l.routing.Wait()
	for {
		select {
		case c := <-l.conns:
			c.Close()
		default:
			return
		}
	}
}

// Addr implements net.Listener: the shared mux listener address, which is
// this node's raft address for every shard.
func (l *shardLayer) Addr() net.Addr { return l.mux.Addr() }

// Dial implements raft.StreamLayer: it connects to the peer node's mux at
// address and writes this shard's header, each within timeout. With TLS,
// address must name the server id (raftTarget, as peerTransport gives raft)
// and the peer's certificate must name that id; a plain mux also takes a
// bare host:port.
func (l *shardLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	id, addr, tagged := splitRaftTarget(address)
	if !tagged && l.mux.tls != nil {
		return nil, fmt.Errorf("raftstore: shard %d dial %s: no node id to expect of its certificate", l.shard, address)
	}
	if timeout <= 0 {
		timeout = defaultHeaderTimeout
	}
	conn, err := dialNode(l.mux.tls, id, addr, timeout, 0)
	if err != nil {
		return nil, fmt.Errorf("raftstore: shard %d dial %s at %s: %w", l.shard, cmp.Or(id, "a node"), addr, err)
	}
	hdr := make([]byte, 0, muxHeaderLen)
	hdr = append(hdr, muxMagic...)
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(l.shard))
	if err := writeHeader(conn, hdr, timeout); err != nil {
		conn.Close()
		return nil, fmt.Errorf("raftstore: shard %d header to %s: %w", l.shard, address, err)
	}
	return conn, nil
}

// writeHeader writes hdr under a write deadline, then clears the deadline
// (NetworkTransport sets its own per RPC).
func writeHeader(conn net.Conn, hdr []byte, timeout time.Duration) error {
	if err := conn.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := conn.Write(hdr); err != nil {
		return err
	}
	return conn.SetWriteDeadline(time.Time{})
}

// raftConnPool is how many idle outbound connections a shard's transport
// keeps per peer.
const raftConnPool = 3

// newShardTransport wraps a shard's stream layer (from Mux.Layer) in a
// raft.NetworkTransport with its own connection pool (raftConnPool, 10 s I/O
// timeout). Log lines are forwarded to logger, tagged with the shard when
// layer is a mux layer. A node gives raft the transport wrapped in a
// peerTransport, which picks the address to dial and tags it with the id.
//
// Closing the transport closes the layer (unregistering the shard) but, as
// in hashicorp/raft, not its pooled outbound connections: call
// CloseStreams as well when the shard is shut down for good, or the peers'
// inbound handlers stay blocked on those connections.
func newShardTransport(layer raft.StreamLayer, logger *slog.Logger) *raft.NetworkTransport {
	var hl hclog.Logger
	if sl, ok := layer.(*shardLayer); ok {
		hl = newRaftLogger(logger, sl.shard)
	} else {
		hl = newHclog(logger)
	}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:          layer,
		MaxPool:         raftConnPool,
		MaxRPCsInFlight: 16,
		Timeout:         10 * time.Second,
		Logger:          hl,
	})
}
