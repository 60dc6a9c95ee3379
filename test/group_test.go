package test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestGroupOfFiveAcrossDevices: alice and bob with three devices each, carol, dave and erin with
// one, a direct conversation and a group of five. Messages from many devices, receipts and a
// recall: in the end every member device stores each conversation identically — the same
// messages in the same (conversation) order, each once, every sender's messages in the order
// that sender queued them, the recalled one marked.
func TestGroupOfFiveAcrossDevices(t *testing.T) {
	srv := startServer(t)
	devices := map[string][]*device{}
	for user, n := range map[string]int{"alice": 3, "bob": 3, "carol": 1, "dave": 1, "erin": 1} {
		for i := range n {
			d := dialDevice(t, srv, user, fmt.Sprint("dev", i), t.TempDir())
			defer d.Close()
			devices[user] = append(devices[user], d)
		}
	}
	five := []string{"alice", "bob", "carol", "dave", "erin"}
	if _, err := devices["alice"][0].CreateGroup("five", five[1:]); err != nil {
		t.Fatal(err)
	}
	waitSent(t, devices["alice"][0], 1)

	// Every device of every member sends two group messages; alice's and bob's devices also talk
	// directly.
	sent := map[string][]string{} // conv → bodies queued (per device order is kept within)
	for _, user := range five {
		for i, d := range devices[user] {
			for k := range 2 {
				body := fmt.Sprintf("%s/dev%d/%d", user, i, k)
				if _, err := d.Send("five", "", []byte(body)); err != nil {
					t.Fatal(err)
				}
				sent["five"] = append(sent["five"], body)
			}
			if user == "alice" || user == "bob" {
				peer := map[string]string{"alice": "bob", "bob": "alice"}[user]
				body := fmt.Sprintf("%s/dev%d/direct", user, i)
				if _, err := d.Send("d:alice:bob", peer, []byte(body)); err != nil {
					t.Fatal(err)
				}
				sent["d:alice:bob"] = append(sent["d:alice:bob"], body)
			}
		}
	}
	// Carol reads the group so far and recalls her first message.
	carol := devices["carol"][0]
	var carolFirst *client.StatusEvent
	for range 2 {
		s := waitSent(t, carol, 1)[0]
		if carolFirst == nil {
			carolFirst = &s
		}
	}
	if _, err := carol.MarkRead("five", carolFirst.Ack.ConvSeq); err != nil {
		t.Fatal(err)
	}
	if _, err := carol.Recall("five", carolFirst.Ack.MsgID); err != nil {
		t.Fatal(err)
	}

	members := map[string][]string{"five": five, "d:alice:bob": {"alice", "bob"}}
	for conv, users := range members {
		var all []*device
		for _, u := range users {
			all = append(all, devices[u]...)
		}
		testkit.WaitTrue(t, 30*time.Second, "every device of "+conv+" to hold the same history", func() bool {
			ref := bodies(t, all[0], conv)
			if len(ref) != len(sent[conv]) || (conv == "five" && !slices.Contains(ref, "carol/dev0/0 (recalled)")) {
				return false
			}
			for _, d := range all[1:] {
				if !slices.Equal(bodies(t, d, conv), ref) {
					return false
				}
			}
			return true
		})
		history := bodies(t, all[0], conv)
		checkPerSenderOrder(t, conv, history, sent[conv])
	}
}

// waitSent waits for n Sent statuses of d and returns them.
func waitSent(t *testing.T, d *device, n int) []client.StatusEvent {
	t.Helper()
	var out []client.StatusEvent
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(out) < n {
		select {
		case s := <-d.statuses:
			if s.Status != client.StatusSent {
				t.Fatalf("%s: %+v", d.User(), s)
			}
			out = append(out, s)
		case <-ctx.Done():
			t.Fatalf("%s: %d of %d sends acknowledged", d.User(), len(out), n)
		}
	}
	return out
}

// checkPerSenderOrder checks history holds each queued body once, and each device's bodies in
// the order that device queued them (bodies are "<user>/<device>/<n>").
func checkPerSenderOrder(t *testing.T, conv string, history, queued []string) {
	t.Helper()
	strip := func(b string) string {
		if len(b) > 11 && b[len(b)-11:] == " (recalled)" {
			return b[:len(b)-11]
		}
		return b
	}
	pos := map[string]int{}
	for i, b := range history {
		b = strip(b)
		if _, dup := pos[b]; dup {
			t.Fatalf("%s: %q twice", conv, b)
		}
		pos[b] = i
	}
	last := map[string]int{} // device → position of its previous message
	for _, b := range queued {
		p, ok := pos[b]
		if !ok {
			t.Fatalf("%s: %q missing", conv, b)
		}
		dev := b[:len(b)-2]
		if prev, seen := last[dev]; seen && prev > p {
			t.Fatalf("%s: %q stored before an earlier message of the same device", conv, b)
		}
		last[dev] = p
	}
}

// TestLargeGroupMembersThroughTheSDK: a group over proto.MaxInlineMembers reaches a member's
// device as a count only; the SDK says its members are incomplete until FetchMembers pages them
// from the server, roles included; SetRole through the outbox hands the group over.
func TestLargeGroupMembersThroughTheSDK(t *testing.T) {
	srv := startServer(t)
	owner := dialDevice(t, srv, "owner", "phone", t.TempDir())
	defer owner.Close()
	member := dialDevice(t, srv, "m00", "phone", t.TempDir())
	defer member.Close()
	var others []string
	for i := range proto.MaxInlineMembers + 8 {
		others = append(others, fmt.Sprintf("m%02d", i))
	}
	if _, err := owner.CreateGroup("big", others); err != nil {
		t.Fatal(err)
	}
	waitSent(t, owner, 1)
	testkit.WaitTrue(t, 20*time.Second, "the member's device to store the creation", func() bool {
		_, err := member.Members("big")
		return errors.Is(err, client.ErrMembersIncomplete)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	all, err := member.FetchMembers(ctx, "big")
	if err != nil || len(all) != len(others)+1 || all[len(all)-1] != (proto.Member{User: "owner", Role: proto.RoleOwner}) {
		t.Fatalf("fetched %d members: %v, %v", len(all), all, err)
	}
	if stored, err := member.Members("big"); err != nil || len(stored) != len(others)+1 {
		t.Fatalf("stored after the fetch: %d members, %v", len(stored), err)
	}

	if _, err := owner.SetRole("big", []string{"m00"}, proto.RoleOwner); err != nil {
		t.Fatal(err)
	}
	waitSent(t, owner, 1)
	all, err = member.FetchMembers(ctx, "big")
	if err != nil || all[0] != (proto.Member{User: "m00", Role: proto.RoleOwner}) || all[len(all)-1].Role != proto.RoleAdmin {
		t.Fatalf("after the handover: %v, %v", all, err)
	}
}
