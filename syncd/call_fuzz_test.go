package syncd

import (
	"context"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/peer"
)

// Another node's read of a replica hosted here is input from the network: whatever its payload,
// the call plane answers with a decodable answer or an error, and never panics.
func FuzzServeRead(f *testing.F) {
	for _, seed := range []struct {
		op   peer.Op
		args peer.ReadArgs
	}{
		{peer.OpUserInfo, peer.ReadArgs{UID: "alice"}},
		{peer.OpReadUser, peer.ReadArgs{UID: "bob", Epoch: 1, Pos: 1, LimitCount: 10}},
		{peer.OpReadUserWait, peer.ReadArgs{UID: "bob", WaitMS: 5}},
		{peer.OpReadConvBefore, peer.ReadArgs{Conv: "g:x", Pos: 99}},
		{peer.OpConversation, peer.ReadArgs{Conv: "g:x", UID: "alice"}},
		{peer.OpUserConvs, peer.ReadArgs{UID: "alice", Count: 3}},
	} {
		b, err := peer.EncodeRequest(seed.op, 1, false, seed.args)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	node := startMetricsNode(f)
	s := &Server{node: node, notes: newNotifier()}
	p := peer.New(node)
	s.handleReads(p)
	f.Fuzz(func(t *testing.T, payload []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond) // bounds long polls
		defer cancel()
		b, err := p.Serve(ctx, peer.Method, payload)
		if err == nil {
			var a peer.ReadAnswer
			if err := peer.DecodeAnswer(b, &a); err != nil {
				t.Fatalf("%x: the answer does not decode: %v", payload, err)
			}
		}
	})
}

// TestServeReadBounded: another node asking a replica for a read of any size gets at most
// peer.MaxReadCount entries (a page), contiguous from where it asked: one call cannot make a node
// read or hold an unbounded part of a log.
func TestServeReadBounded(t *testing.T) {
	node := startMetricsNode(t)
	s := &Server{node: node, notes: newNotifier()}
	p := peer.New(node)
	s.handleReads(p)
	const n = peer.MaxReadCount + 200
	b := &log.DeliveryBatch{Source: 9, Last: n}
	for i := range n {
		pos := uint64(i + 1)
		b.Items = append(b.Items, log.Delivery{Pos: pos, Users: []string{"bob"}, Entry: log.Entry{Kind: log.KindMessage,
			MsgID: log.MsgID{Shard: 9, Index: pos}, Conv: "g:x", ConvSeq: log.Position(pos), Sender: "alice", Body: []byte("hi")}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := node.Propose(ctx, 1, raftstore.DeliverCommand(b)); err != nil {
		t.Fatal(err)
	}
	req, err := peer.EncodeRequest(peer.OpReadUser, 1, false, peer.ReadArgs{UID: "bob", Pos: 1, LimitCount: 1 << 30, LimitBytes: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	ans, err := p.Serve(ctx, peer.Method, req)
	var a peer.ReadAnswer
	if err == nil {
		err = peer.DecodeAnswer(ans, &a)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := len(a.Read.Entries); got != peer.MaxReadCount || a.Read.Entries[0].Seq != 1 || a.Read.Entries[got-1].Seq != uint64(got) {
		t.Fatalf("a read asking for everything answered %d entries (%d..%d), want %d from 1", got,
			a.Read.Entries[0].Seq, a.Read.Entries[got-1].Seq, peer.MaxReadCount)
	}
}
