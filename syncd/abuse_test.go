package syncd

import (
	"testing"

	"github.com/syncd-dev/syncd/proto"
)

// Tests that no user can harm another through the client protocol (docs/SECURITY.md, the abuse
// table). Each ends by showing the victim is served as before.

// TestDirectConversationCannotBeSquatted: mallory can neither create alice and bob's direct
// conversation nor take its id for a group; alice then creates it as usual.
func TestDirectConversationCannotBeSquatted(t *testing.T) {
	ts := startServer(t, nil)
	mallory := connect(t, ts, "mallory", "laptop")
	conv := proto.DirectConv("alice", "bob")
	mallory.WantCode(&proto.Send{ID: mallory.ID(), Conv: conv, ClientMsgID: "m1", Body: []byte("x"), Peer: "bob"}, proto.CodeInvalidArgument)
	mallory.WantCode(&proto.CreateGroup{ID: mallory.ID(), Conv: conv, ClientMsgID: "m2", Members: []string{"alice", "bob"}}, proto.CodeInvalidArgument)
	mallory.WantCode(&proto.CreateGroup{ID: mallory.ID(), Conv: "dh:x", ClientMsgID: "m3"}, proto.CodeInvalidArgument)
	// Her own direct conversation with bob is under its own id only.
	mallory.WantCode(&proto.Send{ID: mallory.ID(), Conv: "dm-bob", ClientMsgID: "m4", Body: []byte("x"), Peer: "bob"}, proto.CodeInvalidArgument)
	mallory.Ack(&proto.Send{ID: mallory.ID(), Conv: proto.DirectConv("mallory", "bob"), ClientMsgID: "m5", Body: []byte("x"), Peer: "bob"})

	alice := connect(t, ts, "alice", "phone")
	if ack := alice.Ack(&proto.Send{ID: alice.ID(), Conv: conv, ClientMsgID: "a1", Body: []byte("hi"), Peer: "bob"}); ack.ConvSeq != 1 {
		t.Fatalf("alice's first message: %+v", ack)
	}
	mallory.WantCode(&proto.Send{ID: mallory.ID(), Conv: conv, ClientMsgID: "m6", Body: []byte("x")}, proto.CodeNotMember)
}
