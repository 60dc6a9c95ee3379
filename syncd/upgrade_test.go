package syncd

import (
	"context"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
)

// TestNewerClientGetsTheServersRevision: the wire's part of the upgrade policy (OPERATIONS,
// "Upgrades"). A client of a later revision than the server's — an app updated before the
// cluster — is welcomed at the server's revision (the lower of the two, PROTOCOL §6 Welcome and §9), and its
// requests are served at that revision; the server does not refuse it, nor speak a revision it
// does not know.
func TestNewerClientGetsTheServersRevision(t *testing.T) {
	ts := startServer(t, nil)
	conn := dialRaw(t, ts)
	control, err := conn.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	later := uint32(proto.ProtoVersion + 1)
	if err := proto.WriteFrame(control, &proto.Hello{Token: mustToken(t, ts, "alice", "phone"), Device: "phone", ProtoVersion: later}); err != nil {
		t.Fatal(err)
	}
	control.SetReadDeadline(time.Now().Add(prototest.Timeout))
	f, err := proto.NewReader(control, proto.DefaultMaxFrame).Next()
	w, ok := f.(*proto.Welcome)
	if err != nil || !ok || w.ProtoVersion != proto.ProtoVersion {
		t.Fatalf("hello at revision %d: %#v, %v; want Welcome at the server's %d", later, f, err, proto.ProtoVersion)
	}
	c := &prototest.Conn{T: t, QUIC: conn, Control: control}
	if c.Req, err = conn.OpenStreamSync(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.ReqR = proto.NewReader(c.Req, proto.DefaultMaxFrame)
	if a := c.Ack(&proto.Send{ID: c.ID(), Conv: "d:alice:bob", ClientMsgID: "m1", Body: []byte("hi"), Peer: "bob"}); a.ConvSeq != 1 {
		t.Fatalf("a send on the negotiated revision: %+v", a)
	}
}
