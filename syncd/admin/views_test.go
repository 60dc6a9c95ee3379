package admin_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/admin"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestInspectCursorsAndTrace: a group of three users whose logs live on different shards; one
// user's devices stored cursors past the message, before it, or none at all. /v1/cursors and
// /v1/trace, over real HTTP, show each log, each cursor and where the message went.
func TestInspectCursorsAndTrace(t *testing.T) {
	// Delivery reports off: erin's acks would append a delivered entry to alice's log, and the
	// heads and scans this test reads must not depend on when the report round runs.
	ts := startServer(t, func(c *syncd.Config) { c.DisableDeliveryReports = true })
	base := "http://" + ts.AdminAddr().String()
	bearer := testkit.Bearer(ts.AdminToken())
	users := []string{"alice", "erin", "dave"}
	shards := map[raftstore.ShardID]bool{}
	for _, u := range users {
		shards[ts.slots.UserShard(u)] = true
	}
	if len(shards) < 2 {
		t.Fatalf("the users' logs share one shard (%v): pick users on different shards", shards)
	}

	alice := connect(t, ts, "alice", "phone")
	alice.Ack(&proto.CreateGroup{ID: alice.ID(), Conv: "team", ClientMsgID: "g", Members: []string{"erin", "dave"}})
	msg := alice.Ack(&proto.Send{ID: alice.ID(), Conv: "team", ClientMsgID: "m1", Body: []byte("hello")})

	// erin's phone stores both entries, her laptop only the first, her tablet acks nothing.
	var epoch proto.Epoch
	for _, d := range []struct {
		device string
		ack    proto.Position
	}{{"phone", 2}, {"laptop", 1}, {"tablet", 0}} {
		c := connect(t, ts, "erin", d.device)
		c.StartSync(0, 0)
		if got := c.Entries(0, 2); got[1].MsgID != msg.MsgID {
			t.Fatalf("erin's %s got %+v", d.device, got)
		}
		epoch = c.Epoch
		if d.ack > 0 {
			if err := proto.WriteFrame(c.Sync, &proto.CursorAck{Epoch: c.Epoch, Pos: d.ack}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// /v1/cursors: erin's log and the two stored cursors (acks are written asynchronously).
	var cur adminapi.CursorReport
	testkit.WaitTrue(t, 10*time.Second, "erin's two cursors to be stored", func() bool {
		var code int
		cur, code = testkit.GetJSON[adminapi.CursorReport](t, base+"/v1/cursors?user=erin", bearer)
		return code == http.StatusOK && len(cur.Devices) == 2
	})
	if cur.User != "erin" || cur.Shard != uint32(ts.slots.UserShard("erin")) || !cur.Exists ||
		cur.Epoch != uint64(epoch) || cur.First != 1 || cur.Head != 2 || cur.Node == "" {
		t.Errorf("cursors of erin: %+v", cur)
	}
	laptop, phone := cur.Devices[0], cur.Devices[1]
	if laptop.Device != "laptop" || laptop.Pos != 1 || laptop.Epoch != uint64(epoch) || laptop.Behind == nil || *laptop.Behind != 1 || laptop.EpochChanged {
		t.Errorf("laptop: %+v", laptop)
	}
	if phone.Device != "phone" || phone.Pos != 2 || phone.Behind == nil || *phone.Behind != 0 {
		t.Errorf("phone: %+v", phone)
	}
	// The wire names, as syncctl -json and scripts see them.
	raw, _ := testkit.GetJSON[map[string]any](t, base+"/v1/cursors?user=erin", bearer)
	for _, key := range []string{"user", "shard", "epoch", "first", "head", "devices"} {
		if _, ok := raw[key]; !ok {
			t.Errorf("cursors JSON lacks %q: %v", key, raw)
		}
	}
	if d := raw["devices"].([]any)[0].(map[string]any); d["device"] != "laptop" || d["pos"] != 1.0 || d["behind"] != 1.0 {
		t.Errorf("cursors JSON device: %v", d)
	}
	// A user nothing was delivered to has no log yet.
	if nobody, code := testkit.GetJSON[adminapi.CursorReport](t, base+"/v1/cursors?user=nobody", bearer); code != http.StatusOK || nobody.Exists ||
		nobody.Epoch != 0 || nobody.Devices == nil || len(nobody.Devices) != 0 {
		t.Errorf("cursors of nobody: HTTP %d %+v", code, nobody)
	}

	// /v1/trace once fan-out has delivered everywhere and trimmed the outbox.
	var tr adminapi.TraceReport
	url := base + "/v1/trace?msg_id=" + string(msg.MsgID)
	testkit.WaitTrue(t, 10*time.Second, "the message in every log and out of the outbox", func() bool {
		var code int
		if tr, code = testkit.GetJSON[adminapi.TraceReport](t, url, bearer); code != http.StatusOK || tr.Outbox.Retained || len(tr.Users) != 3 {
			return false
		}
		for _, u := range tr.Users {
			if u.Status != adminapi.TraceDelivered {
				return false
			}
		}
		return true
	})
	if tr.MsgID != string(msg.MsgID) || tr.HomeShard != uint32(ts.slots.ConvShard("team")) || tr.Conv != "team" ||
		tr.ConvKind != "group" || tr.ConvSeq != 2 || tr.Recalled || tr.Scan != adminapi.DefaultTraceScan {
		t.Errorf("trace: %+v", tr)
	}
	if e := tr.Entry; e == nil || e.Source != "history" || e.Kind != "message" || e.Sender != "alice" || e.BodyBytes != 5 || e.Time != msg.Time {
		t.Errorf("trace entry: %+v", tr.Entry)
	}
	for i, u := range tr.Users { // sorted: alice, dave, erin
		if u.User != []string{"alice", "dave", "erin"}[i] || u.Shard != uint32(ts.slots.UserShard(u.User)) ||
			!u.Member || u.Recipient != nil || u.Pos != 2 || u.Scanned != 1 || u.Head != 2 || u.SourceMark == 0 || u.Node != tr.Node {
			t.Errorf("trace of %s: %+v", u.User, u)
		}
	}
	erin := tr.Users[2]
	var past []string
	for _, d := range erin.Devices {
		past = append(past, fmt.Sprintf("%s:%d:%v", d.Device, d.Pos, d.Past))
	}
	if got := strings.Join(past, " "); got != "laptop:1:false phone:2:true" {
		t.Errorf("erin's devices past the message: %s", got)
	}
	if len(tr.Users[1].Devices) != 0 {
		t.Errorf("dave has no device cursor: %+v", tr.Users[1].Devices)
	}

	// A recall marks the message recalled; the recall's own entry (whose target is the message)
	// is not mistaken for it.
	recall := alice.Ack(&proto.Recall{ID: alice.ID(), Conv: "team", ClientMsgID: "x1", Target: msg.MsgID})
	testkit.WaitTrue(t, 10*time.Second, "the recall in erin's log", func() bool {
		c, code := testkit.GetJSON[adminapi.CursorReport](t, base+"/v1/cursors?user=erin", bearer)
		return code == http.StatusOK && c.Head == 3
	})
	tr, _ = testkit.GetJSON[adminapi.TraceReport](t, url+"&user=erin", bearer)
	if !tr.Recalled || len(tr.Users) != 1 || tr.Users[0].User != "erin" || tr.Users[0].Pos != 2 || tr.Users[0].Scanned != 2 {
		t.Errorf("trace after the recall, for erin: %+v", tr)
	}
	rt, _ := testkit.GetJSON[adminapi.TraceReport](t, base+"/v1/trace?msg_id="+string(recall.MsgID)+"&user=erin", bearer)
	if rt.Entry == nil || rt.Entry.Kind != "recall" || rt.Entry.Target != string(msg.MsgID) || len(rt.Users) != 1 || rt.Users[0].Pos != 3 {
		t.Errorf("trace of the recall: %+v", rt)
	}
	// A scan that stops short of the message says so.
	tr, _ = testkit.GetJSON[adminapi.TraceReport](t, url+"&user=erin&scan=1", bearer)
	if len(tr.Users) != 1 || len(tr.Users[0].Devices) != 2 {
		t.Fatalf("trace with scan=1: %+v", tr)
	}
	if u := tr.Users[0]; u.Status != adminapi.TraceNotFound || u.Pos != 0 || u.Scanned != 1 || !strings.Contains(u.Note, "raise the scan limit") || u.Devices[1].Past {
		t.Errorf("trace with scan=1: %+v", u)
	}

	// Bad requests and unknown messages.
	admin.WantOpsError(t, base+"/v1/trace", http.StatusBadRequest, "bad_request", bearer)
	admin.WantOpsError(t, base+"/v1/trace?msg_id=hello", http.StatusBadRequest, "bad_request", bearer)
	admin.WantOpsError(t, url+"&scan=0", http.StatusBadRequest, "bad_request", bearer)
	admin.WantOpsError(t, url+"&scan=lots", http.StatusBadRequest, "bad_request", bearer)
	admin.WantOpsError(t, base+"/v1/cursors", http.StatusBadRequest, "bad_request", bearer)
	admin.WantOpsError(t, base+"/v1/trace?msg_id=2.999999.0", http.StatusNotFound, "not_found", bearer)
	admin.WantOpsError(t, base+"/v1/trace?msg_id=99.1.0", http.StatusNotFound, "not_found", bearer)
}
