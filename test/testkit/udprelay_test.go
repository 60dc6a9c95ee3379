package testkit

import (
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// udpSink is a UDP server on loopback that records the sequence number (the first 4 bytes) of
// every packet it receives and, if echo is set, sends the packet back.
type udpSink struct {
	pc   *net.UDPConn
	echo bool
	wg   sync.WaitGroup

	mu   sync.Mutex
	seqs []uint32
}

func newUDPSink(t *testing.T, echo bool) *udpSink {
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := &udpSink{pc: pc, echo: echo}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFromUDP(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.seqs = append(s.seqs, binary.BigEndian.Uint32(buf[:4]))
			s.mu.Unlock()
			if echo {
				pc.WriteToUDP(buf[:n], from)
			}
		}
	}()
	t.Cleanup(func() { pc.Close(); s.wg.Wait() })
	return s
}

func (s *udpSink) addr() string { return s.pc.LocalAddr().String() }

// received returns a copy of the sequence numbers received so far, in arrival order.
func (s *udpSink) received() []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seqs)
}

// newUDPRelay starts a relay to server that is closed when the test ends.
func newUDPRelay(t *testing.T, server string, seed uint64) *UDPRelay {
	t.Helper()
	r, err := NewUDPRelay(server, seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// udpClient is one client socket sending numbered packets to a relay.
type udpClient struct {
	c    *net.UDPConn
	next uint32
}

func newUDPClient(t *testing.T, relay string) *udpClient {
	ra, err := net.ResolveUDPAddr("udp", relay)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialUDP("udp", nil, ra)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &udpClient{c: c}
}

// send sends n packets numbered from the last one sent.
func (u *udpClient) send(t *testing.T, n int) {
	t.Helper()
	for range n {
		p := binary.BigEndian.AppendUint32(nil, u.next)
		u.next++
		if _, err := u.c.Write(append(p, "payload"...)); err != nil {
			t.Fatal(err)
		}
	}
}

// pump sends total packets through r to s in batches, waiting after each batch until the relay
// has read it and the sink has received what the relay sent on, so that no socket buffer
// overflows (a loss the relay did not decide) and the relay reads packets in the order sent.
func pump(t *testing.T, u *udpClient, r *UDPRelay, s *udpSink, total int) {
	t.Helper()
	const batch = 25
	base := r.Stats().Packets
	for sent := 0; sent < total; {
		n := min(batch, total-sent)
		u.send(t, n)
		sent += n
		Wait(t, 10*time.Second, fmt.Sprintf("%d more packets through the relay", sent), func() (bool, string) {
			st, got := r.Stats(), len(s.received())
			return st.Packets == base+int64(sent) && int64(got) == st.Packets-st.Dropped-st.Down+st.Duplicated,
				fmt.Sprintf("%+v, sink got %d", st, got)
		})
	}
}

// TestUDPRelayDropDuplicate: loss and duplication happen at about the configured rates, the
// sink receives exactly what the relay counts, and the same seed with the same traffic makes the
// same decisions for every packet.
func TestUDPRelayDropDuplicate(t *testing.T) {
	const total = 400
	run := func(seed uint64) (UDPStats, []uint32) {
		sink := newUDPSink(t, false)
		r := newUDPRelay(t, sink.addr(), seed)
		r.SetFaults(0.2, 0.1, 0)
		pump(t, newUDPClient(t, r.Addr()), r, sink, total)
		got := sink.received()
		slices.Sort(got)
		return r.Stats(), got
	}
	st, got := run(42)
	// Binomial bounds far (over 4 standard deviations) from the expected 80 lost and ~32 sent
	// twice, so only a relay ignoring the rates fails them.
	if st.Dropped < 40 || st.Dropped > 120 || st.Duplicated < 10 || st.Duplicated > 60 || st.Down != 0 {
		t.Fatalf("%d packets with drop 0.2, dup 0.1: %+v", total, st)
	}
	st2, got2 := run(42)
	if st2 != st || !slices.Equal(got, got2) {
		t.Fatalf("seed 42 twice: %+v then %+v, or other packets lost or doubled", st, st2)
	}
	if st3, got3 := run(43); st3 == st && slices.Equal(got, got3) {
		t.Fatalf("seeds 42 and 43 made the same %d decisions: %+v", total, st3)
	}
}

// TestUDPRelayDown: during an outage every packet is lost; after it packets flow again.
func TestUDPRelayDown(t *testing.T) {
	sink := newUDPSink(t, false)
	r := newUDPRelay(t, sink.addr(), 1)
	u := newUDPClient(t, r.Addr())
	r.SetDown(true)
	pump(t, u, r, sink, 20)
	if st := r.Stats(); st.Down != 20 || st.Dropped != 0 || len(sink.received()) != 0 {
		t.Fatalf("during an outage: %+v, sink got %v", st, sink.received())
	}
	r.SetDown(false)
	pump(t, u, r, sink, 1)
	if got := sink.received(); !slices.Equal(got, []uint32{20}) {
		t.Fatalf("after the outage the sink got %v, want only packet 20", got)
	}
}

// TestUDPRelayDelayReorders: delayed packets all arrive, out of order, and the server's replies
// find their way back to the client.
func TestUDPRelayDelayReorders(t *testing.T) {
	sink := newUDPSink(t, true)
	r := newUDPRelay(t, sink.addr(), 1)
	r.SetFaults(0, 0, 20*time.Millisecond)
	u := newUDPClient(t, r.Addr())
	const n = 50 // sent well within 20 ms, and few enough for the socket buffers
	u.send(t, n)
	WaitTrue(t, 10*time.Second, "every delayed packet at the sink", func() bool { return len(sink.received()) == n })
	got := sink.received()
	if slices.IsSorted(got) {
		t.Fatalf("%d packets delayed by up to 20 ms arrived in order", n)
	}
	slices.Sort(got)
	if len(slices.Compact(got)) != n {
		t.Fatalf("the sink got duplicates: %v", got)
	}
	u.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	for range n {
		if _, err := u.c.Read(buf); err != nil {
			t.Fatalf("an echo did not come back through the relay: %v", err)
		}
	}
}
