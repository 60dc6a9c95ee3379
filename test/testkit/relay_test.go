package testkit

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// echoServer accepts TCP connections on loopback and echoes every byte back, until closed.
type echoServer struct {
	ln net.Listener
	wg sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

// newEchoServer starts an echo server that is stopped when the test ends.
func newEchoServer(t *testing.T) *echoServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *echoServer) addr() string { return s.ln.Addr().String() }

// close stops the server and waits for its goroutines.
func (s *echoServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// roundTrip writes a line on c and reads the echo, with a deadline.
func roundTrip(c net.Conn, r *bufio.Reader, line string) (string, error) {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

// dial connects to addr and returns the connection with a reader on it, closed at test end.
func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// newRelay starts a relay to target that is closed when the test ends.
func newRelay(t *testing.T, target string) *Relay {
	t.Helper()
	r, err := NewRelay(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// TestRelay: the relay forwards a connection, cuts it when blocked, refuses new ones while
// blocked, relays again once unblocked, delays without losing or reordering data, and counts
// what it did.
func TestRelay(t *testing.T) {
	echo := newEchoServer(t)
	r := newRelay(t, echo.addr())

	c, br := dial(t, r.Addr())
	if got, err := roundTrip(c, br, "hello"); err != nil || got != "hello" {
		t.Fatalf("through the relay: %q %v", got, err)
	}

	r.Block()
	if !r.Blocked() {
		t.Fatal("Blocked() is false after Block")
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadString('\n'); err == nil {
		t.Fatal("a connection survived Block")
	}
	c2, err := net.Dial("tcp", r.Addr()) // accepted by the kernel, then closed by the relay
	if err == nil {
		if _, err := roundTrip(c2, bufio.NewReader(c2), "blocked"); err == nil {
			t.Fatal("a new connection was relayed while blocked")
		}
		c2.Close()
	}

	r.Unblock()
	const d = 30 * time.Millisecond
	r.SetDelay(d)
	c3, br3 := dial(t, r.Addr())
	for _, line := range []string{"one", "two", "three"} {
		start := time.Now()
		if got, err := roundTrip(c3, br3, line); err != nil || got != line {
			t.Fatalf("after unblock, delayed: %q %v, want %q", got, err, line)
		}
		// The line is held back once on the way to the echo server and once on the way back.
		if took := time.Since(start); took < 2*d {
			t.Fatalf("a round trip through a relay delayed by %v took %v", d, took)
		}
	}
	// A pump counts a chunk after writing it, so the last echo may be read before it is counted.
	wantBytes := 2 * int64(len("hello\none\ntwo\nthree\n"))
	Wait(t, 5*time.Second, "the relay to count every byte", func() (bool, string) {
		s := r.Stats()
		return s.Bytes == wantBytes, fmt.Sprintf("%+v, want %d bytes", s, wantBytes)
	})
	if s := r.Stats(); s.Accepted != 2 || s.Refused < 1 {
		t.Fatalf("stats: %+v", s)
	}
}

// TestRelayBlockWakesDelayedPumps: blocking a relay whose pumps wait out a long delay ends them
// at once, so Close does not hang for the delay.
func TestRelayBlockWakesDelayedPumps(t *testing.T) {
	echo := newEchoServer(t)
	r, err := NewRelay(echo.addr())
	if err != nil {
		t.Fatal(err)
	}
	c, br := dial(t, r.Addr())
	if got, err := roundTrip(c, br, "warm"); err != nil || got != "warm" { // the pair is up
		t.Fatalf("through the relay: %q %v", got, err)
	}
	r.SetDelay(time.Hour)
	if _, err := c.Write([]byte("held\n")); err != nil {
		t.Fatal(err)
	}
	// The echo does not come back within a while: the pump holds the chunk in its delay.
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if got, err := br.ReadString('\n'); err == nil {
		t.Fatalf("%q came back through a relay delayed by an hour", got)
	}
	r.Block()
	closed := make(chan struct{})
	go func() { r.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close still waits for a pump sleeping on a delay after Block")
	}
}

// TestRelaySetTarget: a relay without a target refuses connections; once given one it relays.
func TestRelaySetTarget(t *testing.T) {
	echo := newEchoServer(t)
	r := newRelay(t, "")
	c, br := dial(t, r.Addr())
	if _, err := roundTrip(c, br, "nowhere"); err == nil {
		t.Fatal("a relay without a target relayed")
	}
	r.SetTarget(echo.addr())
	c2, br2 := dial(t, r.Addr())
	if got, err := roundTrip(c2, br2, "there"); err != nil || got != "there" {
		t.Fatalf("after SetTarget: %q %v", got, err)
	}
	if s := r.Stats(); s.Accepted != 1 || s.Refused != 1 {
		t.Fatalf("stats: %+v", s)
	}
}
