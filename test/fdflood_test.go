package test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/nodecert"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/admin"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// The descriptor floods of issue #21 (§3). Each test lowers the process's soft RLIMIT_NOFILE so
// that a few hundred held connections reach it (the audit needed 19,990 against a limit of
// 20,000; the arithmetic is the same, the test only faster), floods one port from three
// loopback addresses other than 127.0.0.1 (the operator's and the peers' source), and checks,
// while the flood goes on, that the node serves what it must and that what it holds for the
// flood stays within the caps. Before the caps the server kept every connection, the process
// ran out of descriptors, and the checks failed.

// floodSources are the addresses the floods come from: loopback, but not 127.0.0.1.
var floodSources = []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}

// floodSlack is how many descriptors of the flood's connections the server may hold beyond its
// caps when sampled: a connection is counted from accept(2), before it is refused, and a closed
// one until the runtime has released its descriptor (after a blocked read returns), which a
// wave of closes at one deadline makes visible on a loaded machine. Without the caps the server
// held all 600. 64 was exceeded (172 sampled against a bound of 160) while the browser journeys
// ran beside this package in CI, two browsers and several syncd processes on two cores; with 128
// the bound (224 for the admin flood, 320 for the node plane's) is still far below the 600 of a
// server without caps.
const floodSlack = 128

// TestAdminFloodKeepsNodeServing: 600 connections to the admin port, from three addresses, half
// sending complete headers of a POST with "Content-Length: 200000" and then a byte of body every
// half second (no token), half sending a request line and never finishing the headers, each
// redialled a second after the server closes it. Meanwhile an operator's request from 127.0.0.1
// is answered, a device's send is acked, the store takes a Raft snapshot (new files), and the
// server never holds more flood connections open than admin.DefaultMaxConnsPerSource from each
// address.
func TestAdminFloodKeepsNodeServing(t *testing.T) {
	skipShort(t)
	lowerFDLimit(t, 1024)
	srv := syncdtest.Start(t, nil)
	token, err := srv.MintToken("alice", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	alice := prototest.Connect(t, srv.Addr().String(), srv.Fingerprint(), token, "alice", "phone")
	adminURL := "http://" + srv.AdminAddr().String()

	slowBody := []byte("POST /v1/moves HTTP/1.1\r\nHost: syncd\r\nContent-Type: application/json\r\n" +
		"Content-Length: 200000\r\n\r\n{")
	slowHeader := []byte("GET /v1/cluster HTTP/1.1\r\nHost: syncd\r\n")
	f := startFlood(t, srv.AdminAddr().String(), 600, func(i int) []byte {
		if i%2 == 0 {
			return slowBody
		}
		return slowHeader
	})
	f.waitDialled(t, 600)

	for round := range 3 {
		// The operator: a new connection from 127.0.0.1, with the token.
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		req, _ := http.NewRequest(http.MethodGet, adminURL+"/v1/cluster", nil)
		req.Header.Set("Authorization", "Bearer "+srv.AdminToken())
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("round %d: the operator's request under the flood: %v (%s)", round, err, f)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("round %d: the operator's request under the flood: %s (%s)", round, resp.Status, f)
		}
		// A device's send.
		alice.Ack(&proto.Send{ID: alice.ID(), Conv: proto.DirectConv("alice", "bob"), Peer: "bob", ClientMsgID: fmt.Sprint("m", round),
			Body: []byte("under the flood")})
		// The store's own files: a snapshot of every shard writes new ones.
		for _, sh := range srv.Node().Shards() {
			if err := srv.Node().Snapshot(sh); err != nil && !isNothingNew(err) {
				t.Fatalf("round %d: snapshot of shard %d under the flood: %v (%s)", round, sh, err, f)
			}
		}
		time.Sleep(time.Second)
	}
	if max := f.maxHeld.Load(); max > int64(len(floodSources)*admin.DefaultMaxConnsPerSource+floodSlack) {
		t.Errorf("the admin server held %d flood connections at once, more than %d per address (%s)", max,
			admin.DefaultMaxConnsPerSource, f)
	}
	t.Logf("flood: %s", f)
}

// TestNodePlaneFloodKeepsLeaderships: 600 raw TCP connections to one node's Raft port, from three
// addresses, that never start TLS, each redialled a second after the node closes it. Through the
// flood (longer than the 5 s handshake deadline) a peer's new mutual-TLS connection to that port
// completes its handshake (before the caps the node could not accept it: out of descriptors, it
// could not have recovered from the smallest blip of its Raft links, and lost its leaderships),
// every shard keeps its leader, sends through the flooded node and through another node are
// acked, and the flooded node never has more of the flood's connections pending than
// raftstore.MaxPendingHandshakesPerSource from each address.
func TestNodePlaneFloodKeepsLeaderships(t *testing.T) {
	skipShort(t)
	lowerFDLimit(t, 1024)
	dirs := make([]string, 3)
	c := syncdtest.StartCluster(t, 3, func(i int, cfg *syncd.Config) { dirs[i] = cfg.Dir })
	// Leaderships once the balancer (raftstore/balance.go) has spread them, within one of each
	// other: it moves none after that, so a change under the flood is the flood's.
	var leaders map[raftstore.ShardID]int
	var leads []int
	testkit.Wait(t, time.Minute, "the leaderships to be balanced", func() (bool, string) {
		leaders, leads = map[raftstore.ShardID]int{}, make([]int, c.Size())
		for i := range c.Size() {
			for _, st := range c.Server(i).Node().Status() {
				if st.State == "leader" {
					leaders[st.Shard] = i
					leads[i]++
				}
			}
		}
		return len(leaders) == len(c.Server(0).Node().Shards()) && slices.Max(leads)-slices.Min(leads) <= 1, fmt.Sprint(leads)
	})
	victim := slices.Index(leads, slices.Max(leads)) // the flooded node: one that leads the most
	other := (victim + 1) % c.Size()
	connect := func(i int, user string) *prototest.Conn {
		srv := c.Server(i)
		token, err := srv.MintToken(user, "phone", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return prototest.Connect(t, srv.Addr().String(), srv.Fingerprint(), token, user, "phone")
	}
	devices := []*prototest.Conn{connect(victim, "alice"), connect(other, "bob")}
	// A new node-plane connection to the flooded node, as another node's Raft opens one after
	// any blip of its links: mutual TLS with the other node's certificate (as syncdtest leaves it
	// in the data directory). Only the server's side is under test, so the client does not check
	// the node's certificate.
	peerCerts, err := nodecert.Load(filepath.Join(dirs[other], nodecert.CAFile),
		filepath.Join(dirs[other], nodecert.CertFile), filepath.Join(dirs[other], nodecert.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	raftAddr := c.Server(victim).Node().Addr()
	dialAsPeer := func() error {
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second},
			Config: &tls.Config{Certificates: []tls.Certificate{peerCerts.Cert}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		conn, err := d.DialContext(ctx, "tcp", raftAddr)
		if err != nil {
			return err
		}
		return conn.Close()
	}
	if err := dialAsPeer(); err != nil {
		t.Fatalf("a node-plane connection before the flood: %v", err)
	}
	t.Logf("flooding node %d, leader of %d shards: %v", victim, leads[victim], leaders)

	f := startFlood(t, c.Server(victim).Node().Addr(), 600, nil)
	f.waitDialled(t, 600)
	deadline := time.Now().Add(8 * time.Second) // beyond the 5 s handshake deadline: pending ones expire and redial
	for round := 0; time.Now().Before(deadline); round++ {
		for k, d := range devices {
			to := []string{"bob", "alice"}[k]
			d.Ack(&proto.Send{ID: d.ID(), Conv: proto.DirectConv(d.Welcome.User, to), Peer: to,
				ClientMsgID: fmt.Sprint("m", round), Body: []byte("under the flood")})
		}
		if err := dialAsPeer(); err != nil {
			t.Fatalf("round %d: a new node-plane connection from a peer under the flood: %v (%s)", round, err, f)
		}
		for sh, want := range leaders {
			if st, err := c.Server(want).Node().ShardStatus(sh); err != nil || st.State != "leader" {
				got := c.LeaderOf(sh)
				t.Fatalf("round %d: shard %d is led by node %d, was %d before the flood (%s)", round, sh, got, want, f)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if max := f.maxHeld.Load(); max > int64(len(floodSources)*raftstore.MaxPendingHandshakesPerSource+floodSlack) {
		t.Errorf("the node held %d flood connections at once, more than %d per address (%s)", max,
			raftstore.MaxPendingHandshakesPerSource, f)
	}
	t.Logf("flood: %s", f)
}

// isNothingNew reports a snapshot refused for want of new entries, which is no failure here.
func isNothingNew(err error) bool { return errors.Is(err, hraft.ErrNothingNewToSnapshot) }

// lowerFDLimit sets the process's soft RLIMIT_NOFILE to n until the test ends. Tests of this
// package that run at the same time share it: only sequential tests call this.
func lowerFDLimit(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("no RLIMIT_NOFILE here: %v", err)
	}
	if lim.Cur < n {
		t.Skipf("the descriptor limit is already %d, below the %d this test sets", lim.Cur, n)
	}
	old := lim
	lim.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}

// flood holds TCP connections to one address from floodSources: each of its goroutines dials,
// writes its opening bytes, writes one byte more every half second, and when the server closes
// the connection (or a dial fails) waits a second and dials again, until stop. Meanwhile it
// samples how many of them the server holds: accepted sockets of the port in the process's own
// descriptor table (serverConns), which is what the flood costs the node; connections still in
// the kernel's accept queue cost it none.
type flood struct {
	dials   atomic.Int64 // dial attempts
	failed  atomic.Int64 // dials that failed (the server's backlog full, or the test out of descriptors)
	held    atomic.Int64 // the server's accepted connections of the port at the last sample
	maxHeld atomic.Int64 // the most at once
	stop    chan struct{}
	wg      sync.WaitGroup
}

// startFlood starts n goroutines flooding addr; opening(i) gives goroutine i's opening bytes (nil:
// none). It stops when the test ends.
func startFlood(t *testing.T, addr string, n int, opening func(i int) []byte) *flood {
	t.Helper()
	probe, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(floodSources[1])}, Timeout: time.Second}).Dial("tcp", addr)
	if err != nil {
		t.Skipf("cannot dial from %s (loopback aliases are Linux's): %v", floodSources[1], err)
	}
	probe.Close()
	_, port, _ := net.SplitHostPort(addr)
	if serverConns(port) < 0 {
		t.Skip("no /proc/net/tcp here to count the server's connections")
	}
	f := &flood{stop: make(chan struct{})}
	for i := range n {
		var first []byte
		if opening != nil {
			first = opening(i)
		}
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(floodSources[i%len(floodSources)])}, Timeout: 2 * time.Second}
		f.wg.Add(1)
		go f.run(d, addr, first)
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-f.stop:
				return
			case <-tick.C:
			}
			if n := int64(serverConns(port)); n >= 0 { // < 0: out of descriptors to look
				f.held.Store(n)
				f.maxHeld.Store(max(f.maxHeld.Load(), n))
			}
		}
	}()
	t.Cleanup(func() {
		close(f.stop)
		f.wg.Wait()
	})
	return f
}

func (f *flood) run(d *net.Dialer, addr string, first []byte) {
	defer f.wg.Done()
	for {
		select {
		case <-f.stop:
			return
		default:
		}
		f.dials.Add(1)
		if conn, err := d.Dial("tcp", addr); err != nil {
			f.failed.Add(1)
		} else {
			f.hold(conn, first)
		}
		select {
		case <-f.stop:
			return
		case <-time.After(time.Second):
		}
	}
}

// hold writes first to conn and trickles a byte a half second until the server closes conn or
// the flood stops.
func (f *flood) hold(conn net.Conn, first []byte) {
	defer conn.Close()
	closed := make(chan struct{})
	go func() {
		buf := make([]byte, 512)
		for {
			if _, err := conn.Read(buf); err != nil {
				close(closed)
				return
			}
		}
	}()
	if first != nil {
		conn.SetWriteDeadline(time.Now().Add(time.Second))
		conn.Write(first)
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-f.stop:
			conn.Close()
			<-closed
			return
		case <-closed:
			return
		case <-tick.C:
			if first != nil {
				conn.SetWriteDeadline(time.Now().Add(time.Second))
				conn.Write([]byte(" "))
			}
		}
	}
}

// waitDialled waits until the flood has dialled n times, and a second more for the server to
// take or refuse them.
func (f *flood) waitDialled(t *testing.T, n int64) {
	t.Helper()
	testkit.WaitTrue(t, 30*time.Second, fmt.Sprintf("the flood to dial %d times", n), func() bool { return f.dials.Load() >= n })
	time.Sleep(time.Second)
}

func (f *flood) String() string {
	return fmt.Sprintf("%d dials, %d failed; the server holds %d of them, at most %d at once; %d descriptors open",
		f.dials.Load(), f.failed.Load(), f.held.Load(), f.maxHeld.Load(), openFDs())
}

// serverConns counts the TCP sockets of this process whose local port is port and whose peer is
// one of floodSources: the flood's connections a server of the process accepted there and has not
// closed (the node's own peers, from 127.0.0.1, are not counted). It returns -1 when it cannot
// tell (no /proc, or no descriptor left to read it with).
func serverConns(port string) int {
	want, err := strconv.Atoi(port)
	if err != nil {
		return -1
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	mine := map[string]bool{} // socket inodes of this process
	for _, e := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:[") {
			mine[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	raw, err := os.ReadFile("/proc/net/tcp") // the servers listen on 127.0.0.1: IPv4 sockets
	if err != nil {
		return -1
	}
	n := 0
	for _, line := range strings.Split(string(raw), "\n")[1:] {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode;
		// an address is the IPv4 address as a little-endian hex word, a colon, the port in hex.
		fs := strings.Fields(line)
		if len(fs) < 10 || !mine[fs[9]] {
			continue
		}
		_, hexPort, _ := strings.Cut(fs[1], ":")
		hexIP, _, _ := strings.Cut(fs[2], ":")
		p, err1 := strconv.ParseUint(hexPort, 16, 16)
		ip, err2 := strconv.ParseUint(hexIP, 16, 32)
		if err1 != nil || err2 != nil || int(p) != want {
			continue
		}
		remote := net.IPv4(byte(ip), byte(ip>>8), byte(ip>>16), byte(ip>>24)).String()
		if slices.Contains(floodSources, remote) {
			n++
		}
	}
	return n
}

// openFDs counts the process's open descriptors (-1 where /proc is not there).
func openFDs() int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(es)
}
