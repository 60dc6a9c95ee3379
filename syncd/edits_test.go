package syncd

import (
	"bytes"
	"crypto/sha256"
	"testing"

	"github.com/syncd-dev/syncd/proto"
)

// TestEditsAndReactions: through QUIC, alice edits her message and bob reacts to it; a device
// following live gets every entry whole, a device that syncs afterwards gets the superseded
// ones folded at their positions, and both devices' digests of the log equal the server's.
// Only the author edits, nothing edits a recalled message, and a bad reaction is refused.
func TestEditsAndReactions(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.DisableDeliveryReports = true }) // exact positions
	alice, laptop := connect(t, ts, "alice", "phone"), connect(t, ts, "bob", "laptop")
	laptop.StartSync(0, 0)
	const conv = "d:alice:bob"
	m := alice.Ack(&proto.Send{ID: alice.ID(), Conv: conv, ClientMsgID: "m1", Body: []byte("helo"), Peer: "bob"})
	laptop.WantCode(&proto.Edit{ID: laptop.ID(), Conv: conv, ClientMsgID: "e0", Target: m.MsgID, Body: []byte("mine now")}, proto.CodeNotSender)
	laptop.WantCode(&proto.React{ID: laptop.ID(), Conv: conv, ClientMsgID: "x0", Target: m.MsgID, Reaction: "a b"}, proto.CodeInvalidArgument)
	laptop.WantCode(&proto.React{ID: laptop.ID(), Conv: conv, ClientMsgID: "x0", Target: "9.9.0", Reaction: "👍"}, proto.CodeNoMessage)

	e1 := alice.Ack(&proto.Edit{ID: alice.ID(), Conv: conv, ClientMsgID: "e1", Target: m.MsgID, Body: []byte("hello")})
	if e1.ConvSeq != 2 || e1.NoOp {
		t.Fatalf("the edit's ack: %+v", e1)
	}
	if again := alice.Ack(&proto.Edit{ID: alice.ID(), Conv: conv, ClientMsgID: "e1", Target: m.MsgID, Body: []byte("hello")}); !again.Duplicate || again.MsgID != e1.MsgID {
		t.Fatalf("the edit's resend: %+v", again)
	}
	laptop.Ack(&proto.React{ID: laptop.ID(), Conv: conv, ClientMsgID: "x1", Target: m.MsgID, Reaction: "👍"})
	laptop.Ack(&proto.React{ID: laptop.ID(), Conv: conv, ClientMsgID: "x2", Target: m.MsgID, Reaction: "👍", Remove: true})
	alice.Ack(&proto.Edit{ID: alice.ID(), Conv: conv, ClientMsgID: "e2", Target: m.MsgID, Body: []byte("hello!")})

	live := laptop.Entries(0, 5)
	want := []struct {
		kind proto.Kind
		body string
	}{{proto.KindMessage, "helo"}, {proto.KindEdit, "hello"}, {proto.KindReaction, ""}, {proto.KindReaction, ""}, {proto.KindEdit, "hello!"}}
	for i, e := range live {
		if e.Kind != want[i].kind || string(e.Body) != want[i].body || e.Folded != 0 {
			t.Fatalf("live entry %d: %+v, want kind %v body %q", i+1, e, want[i].kind, want[i].body)
		}
	}
	if r := live[2]; r.Reaction != "👍" || r.Remove || r.Target != m.MsgID || r.Sender != "bob" {
		t.Errorf("the reaction: %+v", r)
	}
	if r := live[3]; !r.Remove {
		t.Errorf("the reaction's removal: %+v", r)
	}

	// A device that syncs now gets the superseded entries folded, at their positions.
	phone := connect(t, ts, "bob", "phone")
	phone.StartSync(0, 0)
	later := phone.Entries(0, 5)
	if e := later[1]; e.Folded != 5 || e.Body != nil || e.Kind != proto.KindEdit || e.MsgID != live[1].MsgID || e.Target != m.MsgID {
		t.Errorf("the first edit, synced later: %+v, want it folded by 5", e)
	} else if h := sha256.Sum256([]byte("hello")); !bytes.Equal(e.BodyHash, h[:]) {
		t.Errorf("the folded edit's body_hash: %x", e.BodyHash)
	}
	if e := later[2]; e.Folded != 4 || e.Reaction != "" {
		t.Errorf("the reaction, synced later: %+v, want it folded by 4", e)
	}
	for _, i := range []int{0, 3, 4} {
		if later[i].Folded != 0 || !bytes.Equal(later[i].Body, live[i].Body) {
			t.Errorf("entry %d synced later: %+v, want it whole", i+1, later[i])
		}
	}
	// Both devices hold what the server holds.
	res, ok := phone.Do(&proto.Digest{ID: phone.ID(), Epoch: phone.Epoch, From: 1, To: 5}).(*proto.DigestResult)
	if !ok || res.Count != 5 {
		t.Fatalf("digest: %#v", res)
	}
	for name, es := range map[string][]proto.Entry{"live": live, "later": later} {
		var d proto.Digester
		for i := range es {
			d.Add(&es[i])
		}
		if got := d.Sum(); !bytes.Equal(got, res.Digest) {
			t.Errorf("the %s device's digest %x, the server's %x", name, got, res.Digest)
		}
	}

	// The recall folds the last edit in bob's log; nothing edits or reacts to it afterwards.
	alice.Ack(&proto.Recall{ID: alice.ID(), Conv: conv, ClientMsgID: "rc", Target: m.MsgID})
	alice.WantCode(&proto.Edit{ID: alice.ID(), Conv: conv, ClientMsgID: "e3", Target: m.MsgID, Body: []byte("again")}, proto.CodeAlreadyRecalled)
	laptop.WantCode(&proto.React{ID: laptop.ID(), Conv: conv, ClientMsgID: "x3", Target: m.MsgID, Reaction: "🎉"}, proto.CodeAlreadyRecalled)
	tablet := connect(t, ts, "bob", "tablet")
	tablet.StartSync(0, 0)
	if e := tablet.Entries(0, 6)[4]; e.Folded != 6 || e.Body != nil {
		t.Errorf("the last edit after the recall: %+v, want it folded by the recall", e)
	}
}
