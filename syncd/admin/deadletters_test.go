package admin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestDeadLettersListReplayDrop makes a destination shard refuse chosen deliveries (a fault
// injected into the batches, as a corrupted delivery would arrive) and checks G5 end to end: the
// refused entry lands in the dead letters with its reason and shows in the metrics, the stream
// goes on past it, a replay refused again keeps it, a replay after the fix delivers it exactly
// once, and a drop forgets another.
func TestDeadLettersListReplayDrop(t *testing.T) {
	ts := startServer(t, func(c *syncd.Config) { c.Shards = 2 })
	admin := "http://" + ts.AdminAddr().String()
	bearer := testkit.Bearer(ts.AdminToken())
	aliceShard := ts.slots.UserShard("alice")
	bob := "bob"
	for i := 0; ts.slots.UserShard(bob) == aliceShard; i++ { // bob lives on the other shard
		bob = fmt.Sprintf("bob%d", i)
	}
	bobShard := ts.slots.UserShard(bob)
	poison := func(dest raftstore.ShardID, items []log.Delivery) {
		for i := range items {
			if dest == bobShard && strings.HasPrefix(string(items[i].Entry.Body), "poison") {
				items[i].Entry.ConvSeq = 0 // the destination refuses an incomplete entry
			}
		}
	}
	ts.SetDeliveryFault(poison)

	alice := connect(t, ts, "alice", "phone")
	bobDev := connect(t, ts, bob, "laptop")
	bobDev.StartSync(0, 0)
	conv := "d:" + min("alice", bob) + ":" + max("alice", bob)
	var acks []*proto.Ack
	for i, body := range []string{"one", "poison 1", "three", "poison 2", "five"} {
		acks = append(acks, alice.Ack(&proto.Send{ID: alice.ID(), Conv: conv, ClientMsgID: fmt.Sprint("m", i), Body: []byte(body), Peer: bob}))
	}
	// Bob gets everything but the refused entries, in order and without a gap: the stream did
	// not stall behind them.
	got := bobDev.Entries(0, 3)
	for i, want := range []*proto.Ack{acks[0], acks[2], acks[4]} {
		if got[i].MsgID != want.MsgID {
			t.Fatalf("bob's entry %d is %v, want %v", i+1, got[i].MsgID, want.MsgID)
		}
	}

	var list adminapi.DeadLetterList
	testkit.WaitTrue(t, 5*time.Second, "two dead letters", func() bool {
		code, body := testkit.HTTP(t, "GET", admin+"/v1/deadletters", bearer)
		return code == 200 && json.Unmarshal([]byte(body), &list) == nil && list.Total == 2
	})
	for i, dl := range list.Items {
		want := acks[1+2*i]
		if dl.MsgID != string(want.MsgID) || dl.Dest != uint32(bobShard) || len(dl.Users) != 1 || dl.Users[0] != bob ||
			dl.Conv != conv || dl.ConvSeq != uint64(want.ConvSeq) || dl.Sender != "alice" || dl.BodyBytes != 8 ||
			!strings.Contains(dl.Reason, "incomplete entry") || dl.FailedAt.IsZero() {
			t.Fatalf("dead letter %d: %+v (want msg %v)", i, dl, want.MsgID)
		}
	}
	metrics := scrape(t, admin+"/metrics")
	for _, want := range []string{
		fmt.Sprintf(`syncd_dead_letters{shard="%d"} 2`, ts.slots.ConvShard(conv)),
		`syncd_fanout_dead_lettered_total 2`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	// Replaying while the destination still refuses: 409, and the dead letter stays.
	first, second := list.Items[0].ID, list.Items[1].ID
	if code, body := testkit.HTTP(t, "POST", admin+"/v1/deadletters/"+first+"/replay", bearer); code != http.StatusConflict || !strings.Contains(body, `"refused"`) {
		t.Fatalf("replay while refused: %d %s", code, body)
	}
	ts.SetDeliveryFault(nil) // the cause is fixed
	if code, body := testkit.HTTP(t, "POST", admin+"/v1/deadletters/"+first+"/replay", bearer); code != 200 || !strings.Contains(body, `"appended": 1`) {
		t.Fatalf("replay: %d %s", code, body)
	}
	if got := bobDev.Entries(3, 1); got[0].MsgID != acks[1].MsgID || string(got[0].Body) != "poison 1" {
		t.Fatalf("replayed entry: %+v", got[0])
	}
	// The same replay again finds nothing: never a duplicate.
	if code, body := testkit.HTTP(t, "POST", admin+"/v1/deadletters/"+first+"/replay", bearer); code != http.StatusNotFound {
		t.Fatalf("second replay: %d %s", code, body)
	}
	if code, body := testkit.HTTP(t, "DELETE", admin+"/v1/deadletters/"+second, bearer); code != 200 || !strings.Contains(body, `"dropped": true`) {
		t.Fatalf("drop: %d %s", code, body)
	}
	code, body := testkit.HTTP(t, "GET", admin+"/v1/deadletters", bearer)
	if code != 200 || !strings.Contains(body, `"total": 0`) {
		t.Fatalf("list after replay and drop: %d %s", code, body)
	}
	if code, body := testkit.HTTP(t, "DELETE", admin+"/v1/deadletters/1-x-3", bearer); code != http.StatusBadRequest {
		t.Fatalf("bad id: %d %s", code, body)
	}
	// Bob's log holds every message once: the four delivered or replayed, not the dropped one.
	state, err := ts.Node().State(bobShard)
	if err != nil {
		t.Fatal(err)
	}
	r, err := state.ReadUser(bob, 0, 1, log.Limit{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != log.ReadEntries || len(r.Entries) != 4 {
		t.Fatalf("bob's log: %+v", r)
	}
	if !strings.Contains(scrape(t, admin+"/metrics"), fmt.Sprintf(`syncd_dead_letters{shard="%d"} 0`, ts.slots.ConvShard(conv))) {
		t.Error("dead-letter gauge not back to 0")
	}
}
