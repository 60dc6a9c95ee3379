package testkit

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Relay is a TCP forwarder on loopback for one direction of traffic: a client dials Addr instead
// of the target and the relay forwards each connection to the target. A test blocks it to cut
// the link (open connections are closed, new ones are closed as soon as they are accepted) or
// delays it (every chunk read is held back before it is written on). Connections are full
// duplex, so a blocked relay stops the replies on its connections too.
//
// A Relay is safe for concurrent use. Close stops it and waits for all its goroutines.
type Relay struct {
	ln net.Listener

	mu      sync.Mutex
	target  string
	blocked bool
	closed  bool
	delay   time.Duration
	conns   map[*relayPair]struct{} // live connections

	accepted, refused, bytes atomic.Int64

	wg sync.WaitGroup // accept loop and every dial and pump goroutine
}

// RelayStats counts what a Relay did since it started.
type RelayStats struct {
	Accepted int64 // connections relayed to the target
	Refused  int64 // connections closed on accept: blocked, closed, no target, or dial failed
	Bytes    int64 // bytes forwarded, both ways
}

// relayPair is one relayed connection: the dialer's side and the target's side.
type relayPair struct {
	down, up net.Conn
	stop     chan struct{} // closed when the pair is cut: wakes pumps sleeping on a delay
	once     sync.Once
}

// cut closes both sides, once.
func (p *relayPair) cut() {
	p.once.Do(func() {
		close(p.stop)
		p.down.Close()
		p.up.Close()
	})
}

// NewRelay listens on a free loopback port and forwards to target. With target "" it refuses
// every connection until SetTarget is called.
func NewRelay(target string) (*Relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Relay{ln: ln, target: target, conns: map[*relayPair]struct{}{}}
	r.wg.Add(1)
	go r.acceptLoop()
	return r, nil
}

// Addr is the address to dial instead of the target.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// SetTarget sets the address new connections are forwarded to; open ones keep theirs.
func (r *Relay) SetTarget(addr string) {
	r.mu.Lock()
	r.target = addr
	r.mu.Unlock()
}

// Block cuts the link: open connections are closed and new ones closed on accept.
func (r *Relay) Block() {
	r.mu.Lock()
	r.blocked = true
	pairs := r.takeConnsLocked()
	r.mu.Unlock()
	for _, p := range pairs {
		p.cut()
	}
}

// Unblock restores the link: new connections are relayed again.
func (r *Relay) Unblock() {
	r.mu.Lock()
	r.blocked = false
	r.mu.Unlock()
}

// Blocked reports whether the link is cut.
func (r *Relay) Blocked() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.blocked
}

// SetDelay holds back every chunk read from either side by d before it is written on (0: none).
// Order within a connection is kept, so the delay adds latency, not reordering; a pump waits out
// one chunk's delay before it reads the next, so a delay also caps throughput.
func (r *Relay) SetDelay(d time.Duration) {
	r.mu.Lock()
	r.delay = d
	r.mu.Unlock()
}

// Stats returns the relay's counters so far.
func (r *Relay) Stats() RelayStats {
	return RelayStats{Accepted: r.accepted.Load(), Refused: r.refused.Load(), Bytes: r.bytes.Load()}
}

// Close stops accepting, cuts every connection and waits for every goroutine of the relay.
func (r *Relay) Close() {
	r.mu.Lock()
	r.closed = true
	pairs := r.takeConnsLocked()
	r.mu.Unlock()
	r.ln.Close()
	for _, p := range pairs {
		p.cut()
	}
	r.wg.Wait()
}

// takeConnsLocked empties the set of live connections and returns them.
// REQUIRES: r.mu.
func (r *Relay) takeConnsLocked() []*relayPair {
	pairs := make([]*relayPair, 0, len(r.conns))
	for p := range r.conns {
		pairs = append(pairs, p)
	}
	clear(r.conns)
	return pairs
}

// acceptLoop accepts connections until the listener closes and starts relaying each one. The
// dial happens on another goroutine so a slow or dead target does not hold up accepts.
func (r *Relay) acceptLoop() {
	defer r.wg.Done()
	for {
		down, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		target := r.target
		if r.blocked || r.closed || target == "" {
			r.mu.Unlock()
			r.refused.Add(1)
			down.Close()
			continue
		}
		r.wg.Add(1) // under r.mu, so Close (which sets closed under r.mu first) waits for it
		r.mu.Unlock()
		go r.relay(down, target)
	}
}

// relay dials target for one accepted connection and pumps both ways until either side ends or
// the relay is blocked or closed.
func (r *Relay) relay(down net.Conn, target string) {
	defer r.wg.Done()
	up, err := net.DialTimeout("tcp", target, 2*time.Second)
	if err != nil { // the target is down: the dialer sees its connection close, as it would
		r.refused.Add(1)
		down.Close()
		return
	}
	p := &relayPair{down: down, up: up, stop: make(chan struct{})}
	r.mu.Lock()
	if r.blocked || r.closed { // cut while dialing
		r.mu.Unlock()
		r.refused.Add(1)
		p.cut()
		return
	}
	r.conns[p] = struct{}{}
	r.accepted.Add(1)
	r.wg.Add(2)
	r.mu.Unlock()
	go r.pump(p, up, down)
	go r.pump(p, down, up)
}

// pump copies src to dst chunk by chunk, applying the delay, until an error; then it cuts the
// pair (so the other pump ends too) and forgets it.
func (r *Relay) pump(p *relayPair, dst, src net.Conn) {
	defer r.wg.Done()
	defer func() {
		p.cut()
		r.mu.Lock()
		delete(r.conns, p)
		r.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.mu.Lock()
			d := r.delay
			r.mu.Unlock()
			if d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-p.stop:
					t.Stop()
					return
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			r.bytes.Add(int64(n))
		}
		if err != nil {
			return
		}
	}
}
