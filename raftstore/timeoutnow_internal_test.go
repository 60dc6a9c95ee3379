package raftstore

import (
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/syncd-dev/syncd/test/testkit"
)

// tcpLayer is a raft.StreamLayer on loopback TCP that dials the address of a raftTarget, as the
// node's shard layers do.
type tcpLayer struct{ net.Listener }

func (l tcpLayer) Dial(a raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	_, addr, _ := splitRaftTarget(a)
	return net.DialTimeout("tcp", addr, timeout)
}

func (l tcpLayer) Addr() net.Addr { return l.Listener.Addr() }

// TestTimeoutNowOutlivesStaleConnections: a leadership transfer is one TimeoutNow, sent on a
// pooled connection. After a link was cut and healed, every idle connection in the pool is dead;
// the transfer must still reach the peer (CI saw it fail with "EOF" right after a partition
// healed).
func TestTimeoutNowOutlivesStaleConnections(t *testing.T) {
	newTransport := func() *raft.NetworkTransport {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream: tcpLayer{ln}, MaxPool: raftConnPool, Timeout: 5 * time.Second, Logger: newHclog(slog.New(slog.DiscardHandler)),
		})
	}
	server, client := newTransport(), newTransport()
	defer server.Close()
	defer func() {
		client.CloseStreams()
		client.Close()
	}()
	relay, err := testkit.NewRelay(string(server.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()

	// The peer answers every TimeoutNow; the first raftConnPool wait for each other, so that
	// each takes a connection of its own and the pool ends up full.
	var filling sync.WaitGroup
	filling.Add(raftConnPool)
	done, answered := make(chan struct{}), make(chan struct{})
	defer func() {
		close(done)
		<-answered
	}()
	go func() {
		defer close(answered)
		for n := 1; ; n++ {
			var rpc raft.RPC
			select {
			case rpc = <-server.Consumer():
			case <-done:
				return
			}
			if n <= raftConnPool {
				go func() {
					filling.Done()
					filling.Wait()
					rpc.Respond(&raft.TimeoutNowResponse{}, nil)
				}()
				continue
			}
			rpc.Respond(&raft.TimeoutNowResponse{}, nil)
		}
	}()
	pt := &peerTransport{NetworkTransport: client, node: &Node{}}
	timeoutNow := func() error {
		req := &raft.TimeoutNowRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("leader")}}
		return pt.TimeoutNow("peer", raft.ServerAddress(relay.Addr()), req, &raft.TimeoutNowResponse{})
	}
	errs := make(chan error, raftConnPool)
	for range raftConnPool {
		go func() { errs <- timeoutNow() }()
	}
	for range raftConnPool {
		if err := <-errs; err != nil {
			t.Fatalf("filling the pool: %v", err)
		}
	}

	relay.Block() // the pooled connections are cut...
	relay.Unblock()
	for range 3 { // ...and stay in the pool; every transfer after must still get through
		if err := timeoutNow(); err != nil {
			t.Fatalf("a TimeoutNow after the link healed: %v", err)
		}
	}
	if got := relay.Stats().Accepted; got != raftConnPool+1 {
		t.Fatalf("the relay took %d connections, want %d: the pool's and one fresh", got, raftConnPool+1)
	}
}
