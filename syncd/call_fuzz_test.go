package syncd

import (
	"context"
	"testing"
	"time"

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
