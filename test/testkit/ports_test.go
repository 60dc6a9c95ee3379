package testkit

import (
	"net"
	"strconv"
	"testing"
)

// TestFreeAddr: every address is on loopback, bindable for TCP and UDP, handed out once, and
// below the ephemeral range (where the kernel says what that is).
func TestFreeAddr(t *testing.T) {
	lo := ephemeralLow()
	if lo < portFloor+1000 {
		t.Skipf("ephemeral range starts at %d: FreeAddr falls back to ephemeral ports here", lo)
	}
	seen := map[string]bool{}
	for range 50 {
		addr := FreeAddr(t)
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
		host, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if host != "127.0.0.1" || port < portFloor || port >= lo {
			t.Fatalf("%s: want 127.0.0.1 and a port in [%d, %d)", addr, portFloor, lo)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("TCP on %s: %v", addr, err)
		}
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			l.Close()
			t.Fatalf("UDP on %s: %v", addr, err)
		}
		l.Close()
		pc.Close()
	}
}
