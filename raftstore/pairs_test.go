package raftstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/syncd-dev/syncd/test/testkit"
)

// The node-pair transport's tests run real muxes, node nets and mutual TLS on loopback. Where a
// case needs a shard that does not answer (stuck on its disk) or a peer that reads nothing, the
// test plays that shard's raft or that peer; the rest is the real transport.

// pairNode is one node's mux and node net, closed at the end of the test.
type pairNode struct {
	id  string
	tls *TLS
	mux *Mux
	net *nodeNet
}

func startPairNode(t *testing.T, id string, c *TLS) *pairNode {
	t.Helper()
	logger := testSlog(t).With("node", id)
	p := &pairNode{id: id, tls: c, mux: newMux(listenLoopback(t), c, logger)}
	p.net = newNodeNet(c, logger, func(_, addr string) string { return addr })
	p.mux.handle(pairMagic, p.net.serve)
	t.Cleanup(func() {
		p.net.close()
		p.mux.Close()
	})
	return p
}

// addr is the node's raft address, as raft's configuration names it.
func (p *pairNode) addr() raft.ServerAddress { return raft.ServerAddress(p.mux.Addr().String()) }

// shard registers shard on the node (closed at the end of the test, before the node).
func (p *pairNode) shard(t *testing.T, shard ShardID) *shardTransport {
	t.Helper()
	layer, err := p.mux.Layer(shard)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := p.net.shard(shard, newShardTransport(layer, testSlog(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// answer plays tr's raft until the end of the test: it answers every RPC with a response of its
// type naming the node and the request's term.
func answer(t *testing.T, tr *shardTransport, id string) {
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		for {
			select {
			case rpc := <-tr.Consumer():
				hdr := raft.RPCHeader{ID: []byte(id), Addr: []byte(id)}
				switch cmd := rpc.Command.(type) {
				case *raft.AppendEntriesRequest:
					rpc.Respond(&raft.AppendEntriesResponse{RPCHeader: hdr, Term: cmd.Term, Success: true, LastLog: cmd.PrevLogEntry + uint64(len(cmd.Entries))}, nil)
				case *raft.RequestVoteRequest:
					rpc.Respond(&raft.RequestVoteResponse{RPCHeader: hdr, Term: cmd.Term, Granted: true}, nil)
				default:
					rpc.Respond(nil, fmt.Errorf("unexpected %T", cmd))
				}
			case <-stop:
				return
			}
		}
	}()
}

func appendReq(from string, term uint64, data string) *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{
		RPCHeader:    raft.RPCHeader{ID: []byte(from), Addr: []byte(from)},
		Term:         term,
		PrevLogEntry: 1, PrevLogTerm: 1, LeaderCommitIndex: 1,
		Entries: []*raft.Log{{Index: 2, Term: term, Type: raft.LogCommand, Data: []byte(data), AppendedAt: time.Now()}},
	}
}

func heartbeatReq(from string, term uint64) *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte(from), Addr: []byte(from)}, Term: term}
}

// Three nodes host eight shards each, real raft instances over the node nets: every shard
// commits, and each node has exactly one connection to each peer and one from each (not one per
// shard and peer, nor per pipeline).
func TestPairsOneConnectionPerPeer(t *testing.T) {
	const nodes = 3
	shards := []ShardID{1, 2, 3, 4, 5, 6, 7, 8}
	ids := []string{"n1", "n2", "n3"}
	certs := testTLS(t, t.TempDir(), ids...)
	var pn []*pairNode
	var servers []raft.Server
	for _, id := range ids {
		p := startPairNode(t, id, certs[id])
		pn = append(pn, p)
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: p.addr()})
	}
	groups := map[ShardID][]*raft.Raft{}
	fsms := map[ShardID][]*recordingFSM{}
	for _, shard := range shards {
		for i, p := range pn {
			tr := p.shard(t, shard)
			store := raft.NewInmemStore()
			fsm := &recordingFSM{}
			r, err := raft.NewRaft(testRaftConfig(ids[i], newRaftLogger(testSlog(t), shard)), fsm, store, store, raft.NewInmemSnapshotStore(), tr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Shutdown().Error() }) // before the transport closes
			if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
				t.Fatal(err)
			}
			groups[shard] = append(groups[shard], r)
			fsms[shard] = append(fsms[shard], fsm)
		}
	}
	for _, shard := range shards {
		leader := groups[shard][waitLeader(t, groups[shard])]
		for i := range 20 {
			if err := leader.Apply(fmt.Appendf(nil, "shard %d cmd %d", shard, i), 5*time.Second).Error(); err != nil {
				t.Fatalf("shard %d: %v", shard, err)
			}
		}
	}
	for _, shard := range shards {
		for i, fsm := range fsms[shard] {
			testkit.WaitTrue(t, 15*time.Second, fmt.Sprintf("shard %d on %s to apply 20", shard, ids[i]), func() bool { return len(fsm.entries()) >= 20 })
			if got := fsm.entries(); !slices.Equal(got, fsms[shard][0].entries()) {
				t.Errorf("shard %d on %s applied %q", shard, ids[i], got)
			}
		}
	}
	for i, p := range pn {
		if out, in := p.net.connections(); out != nodes-1 || in != nodes-1 {
			t.Errorf("%s: %d connections dialled and %d accepted, want %d each", ids[i], out, in, nodes-1)
		}
	}
}

// A shard whose raft does not take its requests (stuck on its disk, say) holds up nothing but
// its own appends: another shard's AppendEntries on the same connection is answered at once, and
// so are the stuck shard's heartbeats (their fast path). Closing the stuck shard answers its
// queued requests with an error instead of leaving them hanging.
func TestPairsStalledShardDoesNotBlockOthers(t *testing.T) {
	certs := testTLS(t, t.TempDir(), "n1", "n2")
	a, b := startPairNode(t, "n1", certs["n1"]), startPairNode(t, "n2", certs["n2"])
	a1, a2 := a.shard(t, 1), a.shard(t, 2)
	stuck := b.shard(t, 1) // nobody reads its consumer
	answer(t, b.shard(t, 2), "n2")
	stuck.SetHeartbeatHandler(func(rpc raft.RPC) {
		rpc.Respond(&raft.AppendEntriesResponse{RPCHeader: raft.RPCHeader{ID: []byte("n2")}, Term: 7, Success: true}, nil)
	})

	const held = 3
	errs := make(chan error, held)
	for i := range held {
		go func() {
			var resp raft.AppendEntriesResponse
			errs <- a1.AppendEntries("n2", b.addr(), appendReq("n1", 7, fmt.Sprint("stuck ", i)), &resp)
		}()
	}
	// The stuck shard's appends are on the connection before the other shard's.
	testkit.WaitTrue(t, 5*time.Second, "the stuck shard's appends in flight", func() bool {
		a.net.mu.Lock()
		defer a.net.mu.Unlock()
		c := a.net.out[nodeAt{"n2", string(b.addr())}]
		if c == nil {
			return false
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.pending) == held
	})
	pipe, err := a2.AppendEntriesPipeline("n2", b.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer pipe.Close()
	for i := range 5 {
		start := time.Now()
		var resp raft.AppendEntriesResponse
		if _, err := pipe.AppendEntries(appendReq("n1", 7, fmt.Sprint("free ", i)), &resp); err != nil {
			t.Fatal(err)
		}
		select {
		case f := <-pipe.Consumer():
			if err := f.Error(); err != nil || !f.Response().Success {
				t.Fatalf("shard 2 append %d: %v, %+v", i, err, f.Response())
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("shard 2 append %d unanswered after %v behind the stuck shard", i, time.Since(start))
		}
		var hb raft.AppendEntriesResponse
		if err := a1.AppendEntries("n2", b.addr(), heartbeatReq("n1", 7), &hb); err != nil || hb.Term != 7 {
			t.Fatalf("stuck shard's heartbeat: %v, %+v", err, hb)
		}
	}
	select {
	case err := <-errs:
		t.Fatalf("a stuck append was answered: %v", err)
	default:
	}
	stuck.Close()
	for range held {
		select {
		case err := <-errs:
			if err == nil || !strings.Contains(err.Error(), raft.ErrTransportShutdown.Error()) {
				t.Errorf("stuck append after its shard closed: %v, want the transport's shutdown", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("stuck appends still unanswered after their shard closed")
		}
	}
}

// A request for a shard the node does not host is answered with an error naming it, and the
// connection goes on serving the shards it does host.
func TestPairsUnknownShardIsAnswered(t *testing.T) {
	certs := testTLS(t, t.TempDir(), "n1", "n2")
	a, b := startPairNode(t, "n1", certs["n1"]), startPairNode(t, "n2", certs["n2"])
	a9, a2 := a.shard(t, 9), a.shard(t, 2)
	answer(t, b.shard(t, 2), "n2")
	var resp raft.RequestVoteResponse
	req := &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ID: []byte("n1")}, Term: 3}
	err := a9.RequestVote("n2", b.addr(), req, &resp)
	if err == nil || !strings.Contains(err.Error(), "shard 9 is not hosted here") {
		t.Fatalf("vote for an unknown shard: %v, want the node to say it does not host it", err)
	}
	if err := a2.RequestVote("n2", b.addr(), req, &resp); err != nil || !resp.Granted || resp.Term != 3 {
		t.Fatalf("vote for a hosted shard on the same connection: %v, %+v", err, resp)
	}
	if out, _ := a.net.connections(); out != 1 {
		t.Errorf("%d connections to n2, want the one", out)
	}
}

// A connection that breaks fails every request in flight on it at once, whatever their shard;
// the next request redials and is answered.
func TestPairsBrokenConnectionFailsInFlight(t *testing.T) {
	certs := testTLS(t, t.TempDir(), "n1", "n2")
	a, b := startPairNode(t, "n1", certs["n1"]), startPairNode(t, "n2", certs["n2"])
	a1, a2 := a.shard(t, 1), a.shard(t, 2)
	b.shard(t, 1) // stuck: its requests stay in flight
	answer(t, b.shard(t, 2), "n2")
	var resp raft.AppendEntriesResponse
	if err := a2.AppendEntries("n2", b.addr(), appendReq("n1", 1, "first"), &resp); err != nil {
		t.Fatal(err)
	}
	const held = 4
	errs := make(chan error, held)
	for i := range held {
		go func() {
			var resp raft.AppendEntriesResponse
			errs <- a1.AppendEntries("n2", b.addr(), appendReq("n1", 1, fmt.Sprint(i)), &resp)
		}()
	}
	testkit.WaitTrue(t, 5*time.Second, "appends in flight", func() bool {
		b.net.mu.Lock()
		defer b.net.mu.Unlock()
		for in := range b.net.in {
			in.mu.Lock()
			n := 0
			for _, q := range in.queues {
				n += len(q.reqs)
			}
			in.mu.Unlock()
			if n == held-1 { // one is with the shard's (absent) raft, the others queued
				return true
			}
		}
		return false
	})
	start := time.Now()
	b.net.mu.Lock()
	for in := range b.net.in {
		in.conn.Close() // the connection breaks
	}
	b.net.mu.Unlock()
	for range held {
		select {
		case err := <-errs:
			if err == nil {
				t.Error("an append in flight on the broken connection succeeded")
			}
		case <-time.After(3 * time.Second):
			t.Fatal("appends in flight not failed with the connection")
		}
	}
	t.Logf("in-flight requests failed %v after the break", time.Since(start))
	if err := a2.AppendEntries("n2", b.addr(), appendReq("n1", 1, "again"), &resp); err != nil || !resp.Success {
		t.Fatalf("after the break: %v, %+v", err, resp)
	}
	if out, in := a.net.connections(); out != 1 || in != 0 {
		t.Errorf("n1: %d dialled, %d accepted after the redial, want 1 and 0", out, in)
	}
}

// A peer that takes the connection but never answers is taken for dead within the transport
// timeout: the request fails and the connection is dropped, so the next request redials.
func TestPairsSilentPeerIsDropped(t *testing.T) {
	certs := testTLS(t, t.TempDir(), "n1", "n2")
	a, b := startPairNode(t, "n1", certs["n1"]), startPairNode(t, "n2", certs["n2"])
	var mu sync.Mutex
	var held []net.Conn
	b.mux.handle(pairMagic, func(c net.Conn) { mu.Lock(); held = append(held, c); mu.Unlock() }) // reads nothing
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	a.net.timeout = 300 * time.Millisecond
	a1 := a.shard(t, 1)
	start := time.Now()
	var resp raft.RequestVoteResponse
	err := a1.RequestVote("n2", b.addr(), &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ID: []byte("n1")}, Term: 1}, &resp)
	if err == nil || !strings.Contains(err.Error(), "sent nothing") {
		t.Fatalf("vote to a silent peer: %v, want it taken for dead", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("silent peer detected after %v, want about the timeout (300ms)", d)
	}
	if out, _ := a.net.connections(); out != 0 {
		t.Errorf("%d connections kept to the silent peer, want it dropped", out)
	}
}

// The node-pair header gets a stranger nowhere: plain TCP, TLS without a certificate and a
// certificate of another CA are refused before any request is read, and the shard sees nothing. A
// certificate of the cluster CA is a node, but it cannot speak for another: a request whose
// header claims another node is answered with an error. And the dialler checks whom it reached.
func TestPairsRefuseStrangers(t *testing.T) {
	certs := testTLS(t, t.TempDir(), "n1", "n2", "n9")
	foreign := testTLS(t, t.TempDir(), "n1")["n1"]
	b := startPairNode(t, "n2", certs["n2"])
	tr := b.shard(t, 1)
	seen := make(chan raft.RPC, 10)
	go func() {
		for {
			select {
			case rpc := <-tr.Consumer():
				seen <- rpc
				rpc.Respond(&raft.RequestVoteResponse{Granted: true}, nil)
			case <-tr.shutdown:
				return
			}
		}
	}()
	t.Cleanup(func() {
		tr.Close()
		select {
		case rpc := <-seen:
			t.Errorf("the shard was handed %+v", rpc.Command)
		default:
		}
	})
	frame, err := appendPairRequest([]byte(pairMagic+"\x00\x00\x00\x00"), 1, 1,
		&raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ID: []byte("n1")}, Term: 5})
	if err != nil {
		t.Fatal(err)
	}
	addr := b.mux.Addr().String()
	for _, tc := range []struct {
		name string
		cert *tls.Certificate
	}{
		{"plain TCP", nil},
		{"TLS without a certificate", &tls.Certificate{}},
		{"TLS with another CA's n1", &foreign.Cert},
	} {
		var c net.Conn
		if tc.cert == nil {
			c, err = net.Dial("tcp", addr)
		} else {
			cfg := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}
			if len(tc.cert.Certificate) > 0 {
				cfg.Certificates = []tls.Certificate{*tc.cert}
			}
			c, err = tls.Dial("tcp", addr, cfg)
		}
		if err != nil {
			t.Logf("%s: refused at dial: %v", tc.name, err)
			continue
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(frame)
		var buf [64]byte
		n, err := c.Read(buf[:])
		if err == nil || isTimeoutErr(err) {
			t.Errorf("%s: read %d bytes, %v; want the connection refused", tc.name, n, err)
		}
		c.Close()
	}

	// A node of the cluster (n9) claiming to be n1.
	n9 := startPairNode(t, "n9", certs["n9"])
	as9 := n9.shard(t, 1)
	var resp raft.RequestVoteResponse
	err = as9.RequestVote("n2", b.addr(), &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ID: []byte("n1")}, Term: 5}, &resp)
	if err == nil || !strings.Contains(err.Error(), `request from node "n9" claims to come from "n1"`) {
		t.Errorf("n9 speaking for n1: %v, want a refusal", err)
	}
	// The dialler expects the node it means: n2's certificate does not name n3.
	err = as9.RequestVote("n3", b.addr(), &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ID: []byte("n9")}, Term: 5}, &resp)
	if err == nil || !strings.Contains(err.Error(), `names node "n2", but node "n3" was dialled`) {
		t.Errorf("n3 dialled, n2 reached: %v, want the dial refused", err)
	}
	// n9 as itself is served (a node certificate of the cluster CA is a node, docs/DECISIONS.md).
	if err := as9.RequestVote("n2", b.addr(), &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ID: []byte("n9")}, Term: 5}, &resp); err != nil || !resp.Granted {
		t.Errorf("n9 as itself: %v, %+v", err, resp)
	}
	<-seen
}

func isTimeoutErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
