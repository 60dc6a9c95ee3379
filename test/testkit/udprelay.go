package testkit

import (
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// UDPRelay is a UDP relay between clients (QUIC devices) and one server that loses, duplicates
// and delays (and thereby reorders) packets, and can cut the link entirely for an outage: the
// faults a real network shows but cannot reproduce on demand. Each client address gets its own
// socket towards the server, so the server sees one peer per client, as without the relay.
//
// Fault decisions come from one generator seeded at NewUDPRelay. Traffic in both directions
// draws from it, so a run is reproducible only as far as the packets' interleaving is; with
// traffic in one direction the decisions for the Nth packet are the same on every run.
//
// A UDPRelay is safe for concurrent use. Close stops it and waits for all its goroutines.
type UDPRelay struct {
	ln     *net.UDPConn
	server *net.UDPAddr

	mu       sync.Mutex
	rng      *rand.Rand
	drop     float64       // probability a packet is lost
	dup      float64       // probability a packet is sent twice
	maxDelay time.Duration // each copy is delayed uniformly in [0, maxDelay)
	down     bool          // outage: every packet is lost
	closed   bool
	sessions map[string]*net.UDPConn // client address → socket towards the server

	packets, dropped, outage, duplicated atomic.Int64

	wg sync.WaitGroup // client reader, session readers, delayed sends
}

// UDPStats counts the packets a UDPRelay handled, both directions together. Packets sent on are
// Packets - Dropped - Down + Duplicated.
type UDPStats struct {
	Packets    int64 // packets read from either side
	Dropped    int64 // packets lost by chance (SetFaults)
	Down       int64 // packets lost to an outage (SetDown)
	Duplicated int64 // packets sent twice
}

// NewUDPRelay listens on a free loopback UDP port and relays to server, with no faults until
// SetFaults. seed seeds the fault decisions.
func NewUDPRelay(server string, seed uint64) (*UDPRelay, error) {
	sa, err := net.ResolveUDPAddr("udp", server)
	if err != nil {
		return nil, err
	}
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	r := &UDPRelay{ln: ln, server: sa, rng: rand.New(rand.NewPCG(seed, 7)), sessions: map[string]*net.UDPConn{}}
	r.wg.Add(1)
	go r.fromClients()
	return r, nil
}

// Addr is the address clients send to instead of the server.
func (r *UDPRelay) Addr() string { return r.ln.LocalAddr().String() }

// SetFaults sets the probability that a packet is lost, the probability that it is sent twice,
// and the bound of the uniform delay of each copy (0: none). Delays of up to maxDelay reorder
// packets sent less than maxDelay apart.
func (r *UDPRelay) SetFaults(drop, dup float64, maxDelay time.Duration) {
	r.mu.Lock()
	r.drop, r.dup, r.maxDelay = drop, dup, maxDelay
	r.mu.Unlock()
}

// SetDown starts (true) or ends (false) an outage, during which every packet is lost.
func (r *UDPRelay) SetDown(down bool) {
	r.mu.Lock()
	r.down = down
	r.mu.Unlock()
}

// Stats returns the relay's counters so far.
func (r *UDPRelay) Stats() UDPStats {
	return UDPStats{Packets: r.packets.Load(), Dropped: r.dropped.Load(), Down: r.outage.Load(), Duplicated: r.duplicated.Load()}
}

// Close stops the relay and waits for its goroutines, including the timers of delayed packets
// (at most maxDelay), whose sends then fail: packets still in flight are lost.
func (r *UDPRelay) Close() {
	r.mu.Lock()
	r.closed = true
	for _, c := range r.sessions {
		c.Close()
	}
	r.mu.Unlock()
	r.ln.Close()
	r.wg.Wait()
}

// fromClients reads what clients send and forwards it towards the server, one session each.
func (r *UDPRelay) fromClients() {
	defer r.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := r.ln.ReadFromUDP(buf)
		if err != nil {
			return
		}
		up := r.session(from)
		if up == nil {
			return
		}
		r.forward(append([]byte(nil), buf[:n]...), func(p []byte) { up.Write(p) })
	}
}

// session returns the socket towards the server for a client, creating it (and its reader), or
// nil once the relay is closed.
func (r *UDPRelay) session(client *net.UDPAddr) *net.UDPConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	if up, ok := r.sessions[client.String()]; ok {
		return up
	}
	up, err := net.DialUDP("udp", nil, r.server)
	if err != nil {
		return nil
	}
	r.sessions[client.String()] = up
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := up.Read(buf)
			if err != nil {
				return
			}
			r.forward(append([]byte(nil), buf[:n]...), func(p []byte) { r.ln.WriteToUDP(p, client) })
		}
	}()
	return up
}

// forward sends p with the configured faults.
func (r *UDPRelay) forward(p []byte, send func([]byte)) {
	r.packets.Add(1)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	if r.down {
		r.mu.Unlock()
		r.outage.Add(1)
		return
	}
	if r.rng.Float64() < r.drop {
		r.mu.Unlock()
		r.dropped.Add(1)
		return
	}
	copies := 1
	if r.rng.Float64() < r.dup {
		copies = 2
		r.duplicated.Add(1)
	}
	delays := make([]time.Duration, copies)
	for i := range delays {
		if r.maxDelay > 0 {
			delays[i] = time.Duration(r.rng.Int64N(int64(r.maxDelay)))
		}
	}
	r.wg.Add(copies) // under r.mu, so Close (which sets closed under r.mu first) waits for them
	r.mu.Unlock()
	for _, d := range delays {
		time.AfterFunc(d, func() {
			defer r.wg.Done()
			send(p)
		})
	}
}
