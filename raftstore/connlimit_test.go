package raftstore_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/raftstore"
)

// TestLimitListener: over real loopback TCP, a LimitListener with caps of 3 in all and 2 per
// source returns connections up to the caps, hands the one beyond the per-source cap to refuse
// ("source") and closes it, does the same for the one beyond the total from another source
// ("total"), and takes a connection from the first source again once one of its connections is
// closed.
func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var refusals []string
	ln := raftstore.LimitListener(inner, 3, 2, func(c net.Conn, reason string) {
		mu.Lock()
		refusals = append(refusals, reason)
		mu.Unlock()
		io.WriteString(c, reason)
	})
	defer ln.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func(src string) net.Conn {
		t.Helper()
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: time.Second}
		c, err := d.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Skipf("cannot dial from %s (loopback aliases are Linux's): %v", src, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	take := func(what string) net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			return c
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: not accepted", what)
			return nil
		}
	}
	// refused reads what the listener wrote to a refused connection, up to its close.
	refused := func(c net.Conn) string {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("a refused connection was not closed: %v", err)
		}
		return string(b)
	}

	dial("127.0.0.1")
	first := take("first from .1")
	dial("127.0.0.1")
	take("second from .1")
	if got := refused(dial("127.0.0.1")); got != "source" {
		t.Fatalf("a third connection from one source: %q, want refused for its source", got)
	}
	dial("127.0.0.2")
	take("first from .2")
	if got := refused(dial("127.0.0.3")); got != "total" {
		t.Fatalf("a fourth connection in all: %q, want refused for the total", got)
	}
	first.Close()
	dial("127.0.0.1")
	take("from .1 after one of its connections closed")
	select {
	case c := <-accepted:
		t.Fatalf("accepted %v beyond the caps", c.RemoteAddr())
	case <-time.After(100 * time.Millisecond):
	}
	mu.Lock()
	defer mu.Unlock()
	if len(refusals) != 2 {
		t.Fatalf("refusals %v, want source and total", refusals)
	}
}
