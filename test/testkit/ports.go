package testkit

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// portFloor is the lowest port FreeAddr hands out: below it live well-known and registered
// services a developer machine may run.
const portFloor = 10000

// ports remembers what this process handed out, so two callers never get the same port even if
// the first has not bound it yet.
var ports struct {
	sync.Mutex
	used map[int]bool
}

// FreeAddr returns a loopback address whose port is free for both TCP and UDP and lies below the
// kernel's ephemeral range, and that this process has not handed out before. A port from the
// ephemeral range (what ":0" gives) can be taken by any outgoing connection between the moment
// it is picked and the moment a node binds it — or while a stopped node is down — which fails
// the start with "address already in use". Ports below the range are taken only by an explicit
// bind. Where the range cannot be read (or leaves too little room below it), it falls back to
// an ephemeral port. It is safe for concurrent use; it fails t if no port is free.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := PickAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// PickAddr is FreeAddr for code outside a test (a command starting a cluster of processes): it
// returns an error where FreeAddr fails the test.
func PickAddr() (string, error) {
	lo := ephemeralLow()
	if lo < portFloor+1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		defer l.Close()
		return l.Addr().String(), nil
	}
	ports.Lock()
	defer ports.Unlock()
	if ports.used == nil {
		ports.used = map[int]bool{}
	}
	// Start at a time-dependent offset so parallel test processes (go test runs packages in
	// parallel) rarely probe the same ports in the same order.
	span := lo - portFloor
	start := int(time.Now().UnixNano() % int64(span))
	for i := range span {
		port := portFloor + (start+i)%span
		if ports.used[port] {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		pc, err := net.ListenPacket("udp", addr)
		l.Close()
		if err != nil {
			continue
		}
		pc.Close()
		ports.used[port] = true
		return addr, nil
	}
	return "", errors.New("testkit: no free loopback port below the ephemeral range")
}

// ephemeralLow returns the first port of the kernel's ephemeral range, or 0 if it is unknown.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	lo, _ := strconv.Atoi(f[0])
	return lo
}
