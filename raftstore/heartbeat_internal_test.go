package raftstore

import (
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestCloseHeartbeatsWaitsForTheOneInFlight: the NetworkTransport runs raft's heartbeat handler
// on the connection's goroutine, so a heartbeat can still be storing a term when raft's Shutdown
// has returned; on the node's closed store that panicked ("pebble: closed", seen in CI).
// closeHeartbeats must wait for a heartbeat being handled, and turn away every later one without
// calling raft.
func TestCloseHeartbeatsWaitsForTheOneInFlight(t *testing.T) {
	server, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	client, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		client.CloseStreams()
		client.Close()
	}()

	pt := &peerTransport{NetworkTransport: server}
	entered, release := make(chan struct{}), make(chan struct{})
	calls := 0
	pt.SetHeartbeatHandler(func(rpc raft.RPC) { // as raft's processHeartbeat, held in the middle
		calls++
		entered <- struct{}{}
		<-release
		rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: true}, nil)
	})
	heartbeat := func() error {
		req := &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("leader"), Addr: []byte(client.LocalAddr())},
			Term:      1,
		}
		var resp raft.AppendEntriesResponse
		return client.AppendEntries("server", server.LocalAddr(), req, &resp)
	}

	first := make(chan error, 1)
	go func() { first <- heartbeat() }()
	<-entered // raft is handling it
	closed := make(chan struct{})
	go func() {
		pt.closeHeartbeats()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("closeHeartbeats returned while a heartbeat was being handled")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("the heartbeat in flight: %v", err)
	}
	<-closed

	// Later heartbeats get an error and never reach raft.
	if err := heartbeat(); err == nil {
		t.Fatal("a heartbeat after closeHeartbeats was answered as handled")
	}
	if calls != 1 {
		t.Fatalf("raft's handler ran %d times, want 1", calls)
	}
}
