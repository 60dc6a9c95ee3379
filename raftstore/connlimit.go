package raftstore

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// Caps on the connections a stranger can make a node hold.
//
// Every TCP connection a node accepts costs a file descriptor, and so do the store's files
// (Pebble's tables, its write-ahead logs, Raft snapshots), from one per-process limit
// (RLIMIT_NOFILE). A port that keeps whatever connects, however long it takes to send its
// first bytes, lets anyone who can reach it spend the whole limit: the store then fails to
// create files and Raft to dial, and the node stops serving (issue #21: 19,990 connections held
// on the admin port; a flood of raw TCP on the Raft port made a node lose its leaderships).
// So what an unauthenticated peer can hold is capped, in total and per source, and the excess
// is closed at once, which costs the descriptor for microseconds only:
//
//   - the node plane (Mux): connections that have not yet completed mutual TLS and sent their
//     header, MaxPendingHandshakes in all and MaxPendingHandshakesPerSource from one source,
//     each for at most the 5 s handshake deadline. Authenticated connections are not counted:
//     they are the cluster's own nodes, and Raft's links must never be refused for a stranger.
//   - the admin HTTP port (syncd/admin, through LimitListener): its connections, open or idle.
//
// A source is an IPv4 address or an IPv6 /64 (one host usually holds a whole /64), as for the
// client plane's handshakes (syncd/admission.go). docs/OPERATIONS.md ("File descriptors") has
// the descriptor arithmetic these caps keep.
const (
	// MaxPendingHandshakes caps the node-plane connections being authenticated at once.
	MaxPendingHandshakes = 256
	// MaxPendingHandshakesPerSource caps them per source, so one machine cannot take them all:
	// well above what a peer's own burst needs (one connection per shard and pool slot, each
	// pending for a round trip or two).
	MaxPendingHandshakesPerSource = 64
)

// connGate counts connections per source and in total, each under a cap. Safe for concurrent
// use.
type connGate struct {
	total, perSource int

	mu       sync.Mutex
	n        int            // connections counted
	bySource map[string]int // of n, per source; absent when 0
}

func newConnGate(total, perSource int) *connGate {
	return &connGate{total: total, perSource: perSource, bySource: map[string]int{}}
}

// Reasons enter refuses a connection for.
const (
	refusedTotal  = "total"  // the gate holds its total already
	refusedSource = "source" // the connection's source holds its share already
)

// enter counts one more connection from addr and returns its source's key, or returns why it
// refuses to (refusedTotal, refusedSource). Call leave with the key when the connection is done.
func (g *connGate) enter(addr net.Addr) (src, refused string) {
	src = SourceKey(addr)
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.n >= g.total:
		return src, refusedTotal
	case g.bySource[src] >= g.perSource:
		return src, refusedSource
	}
	g.n++
	g.bySource[src]++
	return src, ""
}

// leave counts one connection of source src less.
func (g *connGate) leave(src string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.bySource[src]--; g.bySource[src] <= 0 {
		delete(g.bySource, src)
	}
}

// SourceKey is the key of addr's source, which every per-source cap counts by (this listener's,
// and the client plane's admission in syncd): the IP for IPv4, the /64 prefix for IPv6, since
// one host holds a whole /64 and would otherwise pass any per-address cap.
func SourceKey(addr net.Addr) string {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return addr.String()
	}
	ip := ap.Addr().Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// LimitListener returns ln limited to total connections open at once, and to perSource from one
// source (an IPv4 address, or an IPv6 /64). Accept returns only connections within both caps; a
// connection beyond them is handed to refuse (if not nil; it may write a last answer, and must
// not block: the connection's write deadline is 100 ms away), closed, and Accept goes on to the
// next. A returned connection leaves the count when it is first closed. Closing the listener
// closes ln. Safe for concurrent use as ln is; the reason given to refuse is "total" or "source".
func LimitListener(ln net.Listener, total, perSource int, refuse func(c net.Conn, reason string)) net.Listener {
	return &limitListener{Listener: ln, gate: newConnGate(total, perSource), refuse: refuse}
}

type limitListener struct {
	net.Listener
	gate   *connGate
	refuse func(net.Conn, string)
}

// Accept implements net.Listener.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src, refused := l.gate.enter(c.RemoteAddr())
		if refused == "" {
			return &limitedConn{Conn: c, gate: l.gate, src: src}, nil
		}
		if l.refuse != nil {
			c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			l.refuse(c, refused)
		}
		c.Close()
	}
}

// limitedConn is a connection counted by a gate until its first Close.
type limitedConn struct {
	net.Conn
	gate *connGate
	src  string
	once sync.Once
}

// Close implements net.Conn. The connection leaves the count only once its descriptor is
// closed, so the count is never below what is open.
func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.gate.leave(c.src) })
	return err
}

// CloseWrite shuts down the writing side of a TCP connection (net/http does before closing a
// connection it answered, so the answer is not lost to a reset); a no-op for other connections.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
