package test

import (
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// lossyRelay is a UDP relay between QUIC clients and a server that loses, duplicates, delays
// (and thereby reorders) packets, and can cut the link entirely for an outage. It is the fault
// injector for tests that a real network cannot reproduce on demand.
type lossyRelay struct {
	ln     *net.UDPConn
	server *net.UDPAddr

	mu       sync.Mutex
	rng      *rand.Rand
	drop     float64       // probability a packet is lost
	dup      float64       // probability a packet is sent twice
	maxDelay time.Duration // each packet is delayed uniformly in [0, maxDelay)
	down     bool          // outage: every packet is lost
	closed   bool
	sessions map[string]*net.UDPConn // client address → socket towards the server

	wg sync.WaitGroup
}

func newLossyRelay(server string, seed uint64) (*lossyRelay, error) {
	sa, err := net.ResolveUDPAddr("udp", server)
	if err != nil {
		return nil, err
	}
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	r := &lossyRelay{ln: ln, server: sa, rng: rand.New(rand.NewPCG(seed, 7)), sessions: map[string]*net.UDPConn{}}
	r.wg.Add(1)
	go r.fromClients()
	return r, nil
}

func (r *lossyRelay) addr() string { return r.ln.LocalAddr().String() }

// setFaults sets loss, duplication and delay.
func (r *lossyRelay) setFaults(drop, dup float64, maxDelay time.Duration) {
	r.mu.Lock()
	r.drop, r.dup, r.maxDelay = drop, dup, maxDelay
	r.mu.Unlock()
}

// setDown starts (true) or ends (false) an outage.
func (r *lossyRelay) setDown(down bool) {
	r.mu.Lock()
	r.down = down
	r.mu.Unlock()
}

func (r *lossyRelay) close() {
	r.mu.Lock()
	r.closed = true
	for _, c := range r.sessions {
		c.Close()
	}
	r.mu.Unlock()
	r.ln.Close()
	r.wg.Wait()
}

func (r *lossyRelay) fromClients() {
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

// session returns the socket towards the server for a client, creating it (and its reader).
func (r *lossyRelay) session(client *net.UDPAddr) *net.UDPConn {
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
func (r *lossyRelay) forward(p []byte, send func([]byte)) {
	r.mu.Lock()
	if r.closed || r.down || r.rng.Float64() < r.drop {
		r.mu.Unlock()
		return
	}
	copies := 1
	if r.rng.Float64() < r.dup {
		copies = 2
	}
	delays := make([]time.Duration, copies)
	for i := range delays {
		if r.maxDelay > 0 {
			delays[i] = time.Duration(r.rng.Int64N(int64(r.maxDelay)))
		}
	}
	r.wg.Add(copies)
	r.mu.Unlock()
	for _, d := range delays {
		time.AfterFunc(d, func() {
			defer r.wg.Done()
			send(p)
		})
	}
}
