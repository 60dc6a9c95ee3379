package syncd

import (
	"maps"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestFormatGate: while a node of the cluster publishes an older format level (a node still on
// the previous build during a rolling upgrade; here the node itself, made to publish level 1), a
// device's cursor is stored without its sighting — a v1 record, what the older build writes from
// the same command — and a dead letter's process stays off; once every node publishes this
// build's level, the next cursor store records the sighting.
func TestFormatGate(t *testing.T) {
	ts := startServer(t, nil)
	testkit.WaitTrue(t, 10*time.Second, "the node's level in the cluster map", ts.formats.ready)
	ours := *ts.app.attrs.Load()
	older := maps.Clone(ours)
	older[adminapi.AttrFormat] = "1"
	ts.app.attrs.Store(&older)
	testkit.WaitTrue(t, 10*time.Second, "the older level in the cluster map", func() bool { return !ts.formats.ready() })
	if p := deadLetterPolicy(ts.cfg, &ts.formats); p.Ready() {
		t.Error("the dead-letter process is ready while a node publishes level 1")
	}

	alice, bob := connect(t, ts, "alice", "phone"), connect(t, ts, "bob", "phone")
	state, _ := ts.Node().State(ts.slots.UserShard("bob"))
	cursorOf := func() (log.DeviceCursor, bool) {
		cs, err := state.Cursors("bob")
		if err != nil || len(cs) != 1 {
			return log.DeviceCursor{}, false
		}
		return cs[0], true
	}
	bob.StartSync(0, 0)
	sendAndAck := func(id string, after log.Position) log.Position {
		t.Helper()
		alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: id, Body: []byte(id), Peer: "bob"})
		got := bob.Entries(proto.Position(after), 1)
		last := got[len(got)-1].Seq
		if err := proto.WriteFrame(bob.Sync, &proto.CursorAck{Epoch: bob.Epoch, Pos: last}); err != nil {
			t.Fatal(err)
		}
		return log.Position(last)
	}
	first := sendAndAck("m1", 0)
	testkit.WaitTrue(t, 10*time.Second, "bob's cursor stored", func() bool { c, ok := cursorOf(); return ok && c.Cursor.Pos >= first })
	if c, _ := cursorOf(); c.Seen != 0 {
		t.Errorf("with a node at level 1 the cursor was stored with a sighting (%d): a v2 record the older node does not write", c.Seen)
	}

	ts.app.attrs.Store(&ours)
	testkit.WaitTrue(t, 10*time.Second, "every node at this build's level", ts.formats.ready)
	second := sendAndAck("m2", first)
	testkit.WaitTrue(t, 10*time.Second, "bob's cursor stored with its sighting", func() bool {
		c, ok := cursorOf()
		return ok && c.Cursor.Pos >= second && c.Seen != 0
	})
}
