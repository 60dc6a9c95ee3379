package syncd

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// ack stores c's cursor at pos on its sync stream, as a device does once it has stored the
// entries up to pos.
func ack(t *testing.T, c *prototest.Conn, pos proto.Position) {
	t.Helper()
	if err := proto.WriteFrame(c.Sync, &proto.CursorAck{Epoch: c.Epoch, Pos: pos}); err != nil {
		t.Fatal(err)
	}
}

// TestDeliveryStatesDirect: alice's two devices learn, as entries of her own log, that bob's
// devices stored her messages (one device is enough) and then that he read them; the steps are
// never repeated nor backwards when bob's second device acks older positions, and ConvState
// shows both members' marks.
func TestDeliveryStatesDirect(t *testing.T) {
	ts := startServer(t, nil)
	phone, tablet := connect(t, ts, "alice", "phone"), connect(t, ts, "alice", "tablet")
	laptop, bobPhone := connect(t, ts, "bob", "laptop"), connect(t, ts, "bob", "phone")
	for _, c := range []*prototest.Conn{phone, tablet, laptop, bobPhone} {
		c.StartSync(0, 0)
	}
	const conv = "d:alice:bob"
	phone.Ack(&proto.Send{ID: phone.ID(), Conv: conv, ClientMsgID: "m1", Body: []byte("one"), Peer: "bob"})
	phone.Ack(&proto.Send{ID: phone.ID(), Conv: conv, ClientMsgID: "m2", Body: []byte("two")})

	// Before any device of bob acks, nothing says delivered.
	got := laptop.Entries(0, 2)
	if got[1].ConvSeq != 2 {
		t.Fatalf("bob's laptop: %+v", got)
	}
	ack(t, laptop, 2)
	for _, c := range []*prototest.Conn{phone, tablet} {
		es := c.Entries(0, 3)
		if d := es[2]; d.Kind != proto.KindDelivered || d.Sender != "bob" || d.UpTo != 2 || d.ConvSeq != 3 || d.Conv != conv {
			t.Fatalf("alice's device learns delivered: %+v", d)
		}
	}
	// Bob's other device stored less: his mark does not move back, and no step is repeated.
	bobPhone.Entries(0, 3)
	ack(t, bobPhone, 1)
	bob := laptop.Entries(2, 1)[0]
	if bob.Kind != proto.KindDelivered || bob.UpTo != 2 {
		t.Fatalf("bob's own log holds the step too (each member keeps every conv_seq): %+v", bob)
	}

	// Read: the receipt is the step, and it also covers delivered.
	laptop.Ack(&proto.MarkRead{ID: laptop.ID(), Conv: conv, ClientMsgID: "r1", UpTo: 2})
	for _, c := range []*prototest.Conn{phone, tablet} {
		if r := c.Entries(3, 1)[0]; r.Kind != proto.KindReceipt || r.Sender != "bob" || r.UpTo != 2 {
			t.Fatalf("alice's device learns read: %+v", r)
		}
	}
	st, ok := phone.Do(&proto.ConvState{ID: phone.ID(), Conv: conv}).(*proto.ConvStateResult)
	if !ok || st.Conv.PeerDelivered != 2 || st.Conv.PeerRead != 2 || st.Conv.Head != 4 {
		t.Fatalf("alice's view of the conversation: %#v", st)
	}
	// Nothing more comes: bob's phone acking an older position reported nothing.
	time.Sleep(4 * ts.cfg.DeliveryReportInterval)
	if h, ok := phone.Do(&proto.HeadCheck{ID: phone.ID()}).(*proto.Head); !ok || h.Head != 4 {
		t.Fatalf("alice's head: %#v, want 4 (two messages, delivered, read)", h)
	}
	metrics := scrape(t, "http://"+ts.AdminAddr().String()+"/metrics")
	if !strings.Contains(metrics, `syncd_delivery_reports_total{result="advanced"} 1`) {
		t.Errorf("metrics: want one advanced report:\n%s", grepLines(metrics, "syncd_delivery_reports_total"))
	}
}

// TestDeliveryCountsInAGroup: a group's senders learn delivered steps from each member, and
// anyone in the group can ask how many members have a message delivered and read, and who.
func TestDeliveryCountsInAGroup(t *testing.T) {
	ts := startServer(t, nil)
	alice := connect(t, ts, "alice", "phone")
	alice.StartSync(0, 0)
	members := []string{"bob", "carol", "dave"}
	alice.Ack(&proto.CreateGroup{ID: alice.ID(), Conv: "team", ClientMsgID: "g", Members: members})
	alice.Ack(&proto.Send{ID: alice.ID(), Conv: "team", ClientMsgID: "m1", Body: []byte("hello team")})
	conns := map[string]*prototest.Conn{}
	for _, u := range members {
		c := connect(t, ts, u, "phone")
		c.StartSync(0, 0)
		c.Entries(0, 2)
		conns[u] = c
	}
	ack(t, conns["bob"], 2)
	ack(t, conns["carol"], 2)

	// Alice learns a step per member, in the order of the reports.
	seen := map[string]bool{}
	for _, e := range alice.Entries(0, 4)[2:] {
		seen[fmt.Sprint(e.Sender, " ", e.Kind)] = true
	}
	// A receipt is the read step, and covers delivered too.
	conns["bob"].Ack(&proto.MarkRead{ID: conns["bob"].ID(), Conv: "team", ClientMsgID: "r", UpTo: 2})
	for _, e := range alice.Entries(4, 1) {
		seen[fmt.Sprint(e.Sender, " ", e.Kind)] = true
	}
	for _, want := range []string{"bob delivered", "carol delivered", "bob receipt"} {
		if !seen[want] {
			t.Fatalf("alice's steps: %v, want %q", seen, want)
		}
	}
	testkit.WaitTrue(t, 5*time.Second, "the counts of alice's message", func() bool {
		r, ok := conns["dave"].Do(&proto.Receipts{ID: conns["dave"].ID(), Conv: "team", Seqs: []proto.Position{2}}).(*proto.ReceiptsResult)
		return ok && len(r.Counts) == 1 && r.Counts[0] == proto.ReceiptCount{ConvSeq: 2, Members: 4, Delivered: 2, Read: 1}
	})
	rd, ok := conns["dave"].Do(&proto.Readers{ID: conns["dave"].ID(), Conv: "team", ConvSeq: 2, State: proto.KindDelivered}).(*proto.ReadersResult)
	if !ok || fmt.Sprint(rd.Users) != "[bob carol]" || rd.More {
		t.Fatalf("who has it delivered: %#v", rd)
	}
	rd, ok = conns["dave"].Do(&proto.Readers{ID: conns["dave"].ID(), Conv: "team", ConvSeq: 2, State: proto.KindReceipt, Limit: 1}).(*proto.ReadersResult)
	if !ok || fmt.Sprint(rd.Users) != "[bob]" {
		t.Fatalf("who read it: %#v", rd)
	}
	outsider := connect(t, ts, "erin", "phone")
	outsider.WantCode(&proto.Receipts{ID: outsider.ID(), Conv: "team", Seqs: []proto.Position{2}}, proto.CodeNotMember)
	outsider.WantCode(&proto.Readers{ID: outsider.ID(), Conv: "team", ConvSeq: 2, State: proto.KindReceipt}, proto.CodeNotMember)
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}

// TestNoDeliveryReportsWhenOff: with delivery_reports off (a cluster in a rolling upgrade from a
// version without them), a device's ack moves no mark and writes nothing.
func TestNoDeliveryReportsWhenOff(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.DisableDeliveryReports = true })
	alice, bob := connect(t, ts, "alice", "phone"), connect(t, ts, "bob", "laptop")
	alice.StartSync(0, 0)
	bob.StartSync(0, 0)
	alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "m1", Body: []byte("one"), Peer: "bob"})
	bob.Entries(0, 1)
	ack(t, bob, 1)
	time.Sleep(4 * ts.cfg.DeliveryReportInterval)
	st, ok := alice.Do(&proto.ConvState{ID: alice.ID(), Conv: "d:alice:bob"}).(*proto.ConvStateResult)
	if !ok || st.Conv.Head != 1 || st.Conv.PeerDelivered != 0 {
		t.Fatalf("alice's view with reports off: %#v", st)
	}
}
