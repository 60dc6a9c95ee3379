package syncd

import (
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestDeviceAckLatency: the time from a message's append to the cursor ack of a device it was
// pushed to live is recorded once per entry acked (syncd_device_ack_seconds, the "delivered to a
// device" stage), and entries a device catches up on are not (they are old by design).
func TestDeviceAckLatency(t *testing.T) {
	ts := startServer(t, nil)
	alice, bob := connect(t, ts, "alice", "phone"), connect(t, ts, "bob", "phone")
	alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "old", Body: []byte("before"), Peer: "bob"})
	state, _ := ts.Node().State(ts.slots.UserShard("bob"))
	testkit.WaitTrue(t, 5*time.Second, "the first message to reach bob's log", func() bool {
		info, err := state.UserInfo("bob")
		return err == nil && info.Head == 1
	})
	bob.StartSync(0, 0)
	bob.Entries(0, 1) // caught up on the first: not timed
	for _, id := range []string{"m1", "m2"} {
		alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: id, Body: []byte("live"), Peer: "bob"})
	}
	got := bob.Entries(1, 1)
	if len(got) == 1 && got[0].Seq == 2 {
		got = append(got, bob.Entries(2, 1)...)
	}
	last := got[len(got)-1].Seq
	if err := proto.WriteFrame(bob.Sync, &proto.CursorAck{Epoch: bob.Epoch, Pos: last}); err != nil {
		t.Fatal(err)
	}
	url := "http://" + ts.AdminAddr().String() + "/metrics"
	testkit.WaitTrue(t, 5*time.Second, "the two live entries' acks to be timed", func() bool {
		return strings.Contains(scrape(t, url), "syncd_device_ack_seconds_count 2\n")
	})
	if err := proto.WriteFrame(bob.Sync, &proto.CursorAck{Epoch: bob.Epoch, Pos: last}); err != nil { // again: nothing new
		t.Fatal(err)
	}
	// A second device catches up on all three and acks them: not timed.
	tablet := connect(t, ts, "bob", "tablet")
	tablet.StartSync(0, 0)
	tablet.Entries(0, 3)
	if err := proto.WriteFrame(tablet.Sync, &proto.CursorAck{Epoch: tablet.Epoch, Pos: 3}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitTrue(t, 5*time.Second, "the tablet's cursor to be stored", func() bool {
		cs, err := state.Cursors("bob")
		return err == nil && len(cs) == 2
	})
	if m := scrape(t, url); !strings.Contains(m, "syncd_device_ack_seconds_count 2\n") {
		t.Fatalf("after a catch-up's ack and a repeated ack: %s", grepLines(m, "syncd_device_ack_seconds_count"))
	}
}

// TestAckClockBounds: the clock holds at most ackClockMax entries (the oldest forgotten first),
// starts over when pushes are not contiguous (a stream that moved on without them), and an ack
// below what it holds, or repeated, returns nothing.
func TestAckClockBounds(t *testing.T) {
	var c ackClock
	times := make([]int64, ackClockMax+10)
	for i := range times {
		times[i] = int64(i)
	}
	c.sent(1, times)
	if got := c.acked(10); got != nil {
		t.Fatalf("ack of forgotten positions: %v", got)
	}
	if got := c.acked(12); len(got) != 2 || got[0] != 10 || got[1] != 11 {
		t.Fatalf("ack of the two oldest held: %v, want the times of positions 11 and 12", got)
	}
	if got := c.acked(12); got != nil {
		t.Fatalf("a repeated ack: %v", got)
	}
	c.sent(100_000, []int64{7})
	if got := c.acked(100_000); len(got) != 1 || got[0] != 7 {
		t.Fatalf("after a jump: %v, want only the new entry", got)
	}
}

// TestReadAfter: a read receipt records how long after its append the newest message it marks
// read was read (syncd_read_after_seconds), once: a resent receipt is not counted again.
func TestReadAfter(t *testing.T) {
	ts := startServer(t, nil)
	alice, bob := connect(t, ts, "alice", "phone"), connect(t, ts, "bob", "phone")
	for _, id := range []string{"m1", "m2"} {
		alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: id, Body: []byte("hi"), Peer: "bob"})
	}
	url := "http://" + ts.AdminAddr().String() + "/metrics"
	for range 2 { // the second is a resend of the first: a duplicate
		bob.Ack(&proto.MarkRead{ID: bob.ID(), Conv: "d:alice:bob", ClientMsgID: "r1", UpTo: 2})
	}
	if m := scrape(t, url); !strings.Contains(m, "syncd_read_after_seconds_count 1\n") || !strings.Contains(m, `syncd_read_after_seconds_bucket{le="1"} 1`) {
		t.Fatalf("after one receipt, resent: %s", grepLines(m, "syncd_read_after_seconds"))
	}
}
