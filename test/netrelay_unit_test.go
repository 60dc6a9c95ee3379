package test

import (
	"bufio"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// echoServer accepts TCP connections on loopback and echoes every line back, until closed.
type echoServer struct {
	ln net.Listener
	wg sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

// newEchoServer starts an echo server.
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
	return s
}

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

// TestClusterNetRelay: the relay forwards a connection, cuts it when blocked, refuses new ones
// while blocked, relays again once unblocked, delays without losing or reordering data, and
// leaves no goroutine behind when closed.
func TestClusterNetRelay(t *testing.T) {
	echo := newEchoServer(t)
	defer echo.close()
	r, err := newNetRelay("a", "b", echo.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	if got, err := roundTrip(c, br, "hello"); err != nil || got != "hello" {
		t.Fatalf("through the relay: %q %v", got, err)
	}

	r.Block()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadString('\n'); err == nil {
		t.Fatal("a connection survived Block")
	}
	c2, err := net.Dial("tcp", r.Addr()) // accepted by the kernel, then closed by the relay
	if err == nil {
		c2.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := roundTrip(c2, bufio.NewReader(c2), "blocked"); err == nil {
			t.Fatal("a new connection was relayed while blocked")
		}
		c2.Close()
	}

	r.Unblock()
	r.SetDelay(20 * time.Millisecond)
	c3, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	br3 := bufio.NewReader(c3)
	for _, line := range []string{"one", "two", "three"} {
		if got, err := roundTrip(c3, br3, line); err != nil || got != line {
			t.Fatalf("after unblock, delayed: %q %v, want %q", got, err, line)
		}
	}
	if a, ref, n := r.Counters(); a != 2 || ref < 1 || n == 0 {
		t.Fatalf("counters: %d accepted, %d refused, %d bytes", a, ref, n)
	}
	// A blocked relay also wakes pumps that sleep on a delay.
	r.SetDelay(time.Hour)
	if _, err := c3.Write([]byte("held\n")); err != nil {
		t.Fatal(err)
	}
	r.Block()
}

// TestClusterRelayMesh: a mesh of three nodes has a relay per ordered pair, hands each node the
// relays towards the others, and partitions a node in both directions only.
func TestClusterRelayMesh(t *testing.T) {
	echo := newEchoServer(t)
	defer echo.close()
	addr := echo.ln.Addr().String()
	m, err := newRelayMesh(map[string]string{"n1": addr, "n2": addr, "n3": addr})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if len(m.relays) != 6 || len(m.DialMap("n1")) != 2 {
		t.Fatalf("mesh: %d relays, n1 dials %v", len(m.relays), m.DialMap("n1"))
	}
	m.Partition("n1")
	for k, r := range m.relays {
		r.mu.Lock()
		blocked := r.blocked
		r.mu.Unlock()
		if want := k[0] == "n1" || k[1] == "n1"; blocked != want {
			t.Errorf("%s blocked %v, want %v", r, blocked, want)
		}
	}
	m.Heal()
	c, err := net.Dial("tcp", m.DialMap("n1")["n2"])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, bufio.NewReader(c), "healed"); err != nil || got != "healed" {
		t.Fatalf("after heal: %q %v", got, err)
	}
	t.Log(m.Summary())
}
