package raftstoretest

import (
	"io"
	"net"
	"sync"
)

// Relay is a TCP forwarder on loopback that a test can cut: while blocked it drops every
// connection (existing and new), which is how the Cluster partitions nodes without touching the
// real transport. It is safe for concurrent use.
type Relay struct {
	ln net.Listener
	wg sync.WaitGroup

	mu      sync.Mutex
	target  string
	blocked bool
	closed  bool
	conns   map[net.Conn]struct{}
}

// NewRelay listens on a free loopback port. Connections are dropped until SetTarget is called.
func NewRelay() (*Relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Relay{ln: ln, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr is the address to dial instead of the target.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// SetTarget sets the address connections are forwarded to.
func (r *Relay) SetTarget(addr string) {
	r.mu.Lock()
	r.target = addr
	r.mu.Unlock()
}

// SetBlocked cuts (true) or restores (false) the link. Cutting closes every open connection.
func (r *Relay) SetBlocked(blocked bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.blocked = blocked
	if blocked {
		for c := range r.conns {
			c.Close()
		}
	}
}

// Close stops the relay and waits for its goroutines.
func (r *Relay) Close() {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.ln.Close()
	r.wg.Wait()
}

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		in, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		target, ok := r.target, !r.blocked && !r.closed && r.target != ""
		r.mu.Unlock()
		if !ok {
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", target)
		if err != nil {
			in.Close()
			continue
		}
		if !r.track(in, out) {
			continue
		}
		r.wg.Add(2)
		go r.pipe(in, out)
		go r.pipe(out, in)
	}
}

// track registers both ends, or closes them if the relay was cut meanwhile.
func (r *Relay) track(a, b net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.blocked || r.closed {
		a.Close()
		b.Close()
		return false
	}
	r.conns[a] = struct{}{}
	r.conns[b] = struct{}{}
	return true
}

func (r *Relay) pipe(dst, src net.Conn) {
	defer r.wg.Done()
	io.Copy(dst, src)
	dst.Close()
	src.Close()
	r.mu.Lock()
	delete(r.conns, dst)
	delete(r.conns, src)
	r.mu.Unlock()
}
