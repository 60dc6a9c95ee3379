package raftstoretest

import (
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var ports struct {
	sync.Mutex
	used map[int]bool
}

// FreeAddr returns a loopback address whose port is free for both TCP and UDP and lies below the
// kernel's ephemeral range, and that this process has not handed out before. A port from the
// ephemeral range (what ":0" gives) can be taken by any outgoing connection between the moment
// it is picked and the moment a node binds it — or while a stopped node is down — which fails
// the start with "address already in use". Ports below the range are taken only by an explicit
// bind. Where the range cannot be read, it falls back to an ephemeral port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	lo := 0
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			lo, _ = strconv.Atoi(f[0])
		}
	}
	const floor = 10000
	if lo < floor+1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	ports.Lock()
	defer ports.Unlock()
	if ports.used == nil {
		ports.used = map[int]bool{}
	}
	span := lo - floor
	start := int(time.Now().UnixNano() % int64(span))
	for i := range span {
		port := floor + (start+i)%span
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
		return addr
	}
	t.Fatal("no free loopback port below the ephemeral range")
	return ""
}
