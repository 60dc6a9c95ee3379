package test

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// netRelay is a TCP relay for one direction of node-to-node traffic: node from dials it (through
// -peer-dial) instead of node to's Raft address, and it forwards every connection to that
// address. A test blocks it to partition that direction (current connections are cut, new ones
// are closed as soon as they are accepted) or delays it (every chunk read is held back before it
// is written on). Node-to-node connections are full duplex, so a blocked relay stops the replies
// on its connections too; block both directions of a pair for a clean partition.
type netRelay struct {
	from, to string // node ids, for messages
	target   string // node to's Raft address
	ln       net.Listener

	mu      sync.Mutex
	blocked bool
	closed  bool
	delay   time.Duration
	conns   map[*relayPair]struct{} // live connections

	accepted, refused, bytes atomic.Int64 // counters for the test log

	wg sync.WaitGroup // accept loop and every pump goroutine
}

// relayPair is one relayed connection: the node's side and the target's side.
type relayPair struct {
	down, up net.Conn
	stop     chan struct{} // closed when the pair is cut: wakes pumps sleeping on a delay
	once     sync.Once
}

// cut closes both sides once.
func (p *relayPair) cut() {
	p.once.Do(func() {
		close(p.stop)
		p.down.Close()
		p.up.Close()
	})
}

// newNetRelay listens on a free loopback port and forwards to target.
func newNetRelay(from, to, target string) (*netRelay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &netRelay{from: from, to: to, target: target, ln: ln, conns: map[*relayPair]struct{}{}}
	r.wg.Add(1)
	go r.acceptLoop()
	return r, nil
}

// Addr is the address node from dials instead of node to's Raft address.
func (r *netRelay) Addr() string { return r.ln.Addr().String() }

// String names the relay's direction.
func (r *netRelay) String() string { return r.from + "→" + r.to }

// Block partitions the direction: live connections are cut and new ones closed on accept.
func (r *netRelay) Block() {
	r.mu.Lock()
	r.blocked = true
	pairs := r.takeConnsLocked()
	r.mu.Unlock()
	for _, p := range pairs {
		p.cut()
	}
}

// Unblock ends the partition: new connections are relayed again.
func (r *netRelay) Unblock() {
	r.mu.Lock()
	r.blocked = false
	r.mu.Unlock()
}

// SetDelay holds back every chunk read from either side by d before it is written on (0: none).
// Order within a connection is kept, so the delay adds latency, not reordering.
func (r *netRelay) SetDelay(d time.Duration) {
	r.mu.Lock()
	r.delay = d
	r.mu.Unlock()
}

// Counters returns the connections relayed, the connections refused while blocked and the
// bytes forwarded (both ways) so far.
func (r *netRelay) Counters() (accepted, refused, bytes int64) {
	return r.accepted.Load(), r.refused.Load(), r.bytes.Load()
}

// Close stops accepting, cuts every connection and waits for every goroutine of the relay.
func (r *netRelay) Close() {
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
func (r *netRelay) takeConnsLocked() []*relayPair {
	pairs := make([]*relayPair, 0, len(r.conns))
	for p := range r.conns {
		pairs = append(pairs, p)
	}
	clear(r.conns)
	return pairs
}

// acceptLoop accepts connections until the listener closes and starts relaying each one.
func (r *netRelay) acceptLoop() {
	defer r.wg.Done()
	for {
		down, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		if r.blocked || r.closed {
			r.mu.Unlock()
			r.refused.Add(1)
			down.Close()
			continue
		}
		r.wg.Add(1) // under r.mu, so Close (which sets closed under r.mu first) waits for it
		r.mu.Unlock()
		go r.relay(down)
	}
}

// relay dials the target for one accepted connection and pumps both ways until either side
// ends, the relay is blocked or closed.
func (r *netRelay) relay(down net.Conn) {
	defer r.wg.Done()
	up, err := net.DialTimeout("tcp", r.target, 2*time.Second)
	if err != nil { // the target is down: the dialer sees its connection close, as it would
		down.Close()
		return
	}
	p := &relayPair{down: down, up: up, stop: make(chan struct{})}
	r.mu.Lock()
	if r.blocked || r.closed {
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
func (r *netRelay) pump(p *relayPair, dst, src net.Conn) {
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

// relayMesh holds one relay per ordered pair of nodes, so every node-to-node connection of the
// cluster passes through a relay the test controls.
type relayMesh struct {
	relays map[[2]string]*netRelay // (from, to) → relay
}

// newRelayMesh creates a relay for every ordered pair of the nodes, forwarding to raftAddrs[to].
func newRelayMesh(raftAddrs map[string]string) (*relayMesh, error) {
	m := &relayMesh{relays: map[[2]string]*netRelay{}}
	for from := range raftAddrs {
		for to, target := range raftAddrs {
			if from == to {
				continue
			}
			r, err := newNetRelay(from, to, target)
			if err != nil {
				m.Close()
				return nil, err
			}
			m.relays[[2]string{from, to}] = r
		}
	}
	return m, nil
}

// DialMap returns the -peer-dial value for node from: every other node's id with the address of
// the relay from → that node.
func (m *relayMesh) DialMap(from string) map[string]string {
	out := map[string]string{}
	for k, r := range m.relays {
		if k[0] == from {
			out[k[1]] = r.Addr()
		}
	}
	return out
}

// Partition cuts node off from every other node, in both directions.
func (m *relayMesh) Partition(node string) {
	for k, r := range m.relays {
		if k[0] == node || k[1] == node {
			r.Block()
		}
	}
}

// Heal unblocks every relay and removes every delay.
func (m *relayMesh) Heal() {
	for _, r := range m.relays {
		r.SetDelay(0)
		r.Unblock()
	}
}

// SetDelay delays every direction by d.
func (m *relayMesh) SetDelay(d time.Duration) {
	for _, r := range m.relays {
		r.SetDelay(d)
	}
}

// Summary describes every relay's counters, for the test log.
func (m *relayMesh) Summary() string {
	var b []byte
	for _, k := range sortedPairs(m.relays) {
		a, ref, n := m.relays[k].Counters()
		b = fmt.Appendf(b, "%s: %d conns, %d refused, %d bytes; ", m.relays[k], a, ref, n)
	}
	return string(b)
}

// Close closes every relay and waits for their goroutines.
func (m *relayMesh) Close() {
	for _, r := range m.relays {
		r.Close()
	}
}

// sortedPairs returns the keys of relays in order.
func sortedPairs(relays map[[2]string]*netRelay) [][2]string {
	keys := slices.Collect(maps.Keys(relays))
	slices.SortFunc(keys, func(a, b [2]string) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	})
	return keys
}
