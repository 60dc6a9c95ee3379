package syncd

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
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

// TestGroupRolesThroughTheWire: any member may no longer take over a group. The creator owns
// it; plain members cannot add, remove others or give roles; the owner names an admin, who adds
// and removes plain members; the owner leaves only after handing ownership over.
func TestGroupRolesThroughTheWire(t *testing.T) {
	ts := startServer(t, nil)
	olga, mallory := connect(t, ts, "olga", "phone"), connect(t, ts, "mallory", "phone")
	olga.Ack(&proto.CreateGroup{ID: olga.ID(), Conv: "team", ClientMsgID: "c", Members: []string{"mallory", "ann"}})
	mallory.WantCode(&proto.RemoveMembers{ID: mallory.ID(), Conv: "team", ClientMsgID: "m1", Members: []string{"olga"}}, proto.CodeNotPermitted)
	mallory.WantCode(&proto.AddMembers{ID: mallory.ID(), Conv: "team", ClientMsgID: "m2", Members: []string{"eve"}}, proto.CodeNotPermitted)
	mallory.WantCode(&proto.SetRole{ID: mallory.ID(), Conv: "team", ClientMsgID: "m3", Members: []string{"mallory"}, Role: proto.RoleOwner}, proto.CodeNotPermitted)
	mallory.WantCode(&proto.SetRole{ID: mallory.ID(), Conv: "team", ClientMsgID: "m4", Members: []string{"ann"}, Role: 9}, proto.CodeInvalidArgument)

	olga.Ack(&proto.SetRole{ID: olga.ID(), Conv: "team", ClientMsgID: "r1", Members: []string{"ann"}, Role: proto.RoleAdmin})
	ann := connect(t, ts, "ann", "phone")
	ann.Ack(&proto.AddMembers{ID: ann.ID(), Conv: "team", ClientMsgID: "a1", Members: []string{"bob"}})
	ann.Ack(&proto.RemoveMembers{ID: ann.ID(), Conv: "team", ClientMsgID: "a2", Members: []string{"mallory"}})
	ann.WantCode(&proto.RemoveMembers{ID: ann.ID(), Conv: "team", ClientMsgID: "a3", Members: []string{"olga"}}, proto.CodeNotPermitted)
	mallory.WantCode(&proto.Send{ID: mallory.ID(), Conv: "team", ClientMsgID: "m5", Body: []byte("x")}, proto.CodeNotMember)

	olga.WantCode(&proto.RemoveMembers{ID: olga.ID(), Conv: "team", ClientMsgID: "o1", Members: []string{"olga"}}, proto.CodeNotPermitted)
	olga.Ack(&proto.SetRole{ID: olga.ID(), Conv: "team", ClientMsgID: "o2", Members: []string{"ann"}, Role: proto.RoleOwner})
	page, ok := olga.Do(&proto.Members{ID: olga.ID(), Conv: "team"}).(*proto.MembersResult)
	if !ok || fmt.Sprint(page.Members) != "[{ann owner} {bob member} {olga admin}]" || page.More {
		t.Fatalf("members after the handover: %#v", page)
	}
	st, ok := olga.Do(&proto.ConvState{ID: olga.ID(), Conv: "team"}).(*proto.ConvStateResult)
	if !ok || st.Conv.Role != proto.RoleAdmin || st.Conv.MemberCount != 3 {
		t.Fatalf("olga's view: %#v", st)
	}
	olga.Ack(&proto.RemoveMembers{ID: olga.ID(), Conv: "team", ClientMsgID: "o3", Members: []string{"olga"}})
	mallory.WantCode(&proto.Members{ID: mallory.ID(), Conv: "team"}, proto.CodeNotMember)
}

// TestLargeGroupsThroughTheWire: a group over the size limit is refused with group_full; a group
// larger than proto.MaxInlineMembers reaches its members' logs as a count, not a list, and its
// members are paged with Members.
func TestLargeGroupsThroughTheWire(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.MaxGroupSize = 100 })
	owner := connect(t, ts, "owner", "phone")
	many := func(from, n int) []string {
		var ids []string
		for i := from; i < from+n; i++ {
			ids = append(ids, fmt.Sprintf("u%03d", i))
		}
		return ids
	}
	owner.WantCode(&proto.CreateGroup{ID: owner.ID(), Conv: "big", ClientMsgID: "c0", Members: many(0, 100)}, proto.CodeGroupFull)
	owner.Ack(&proto.CreateGroup{ID: owner.ID(), Conv: "big", ClientMsgID: "c1", Members: many(0, 60)})
	owner.WantCode(&proto.AddMembers{ID: owner.ID(), Conv: "big", ClientMsgID: "c2", Members: many(60, 40)}, proto.CodeGroupFull)

	u := connect(t, ts, "u007", "phone")
	u.StartSync(0, 0)
	got := u.Entries(0, 1)
	if e := got[0]; e.Kind != proto.KindGroupCreate || e.Members != nil || e.MemberCount != 61 {
		t.Fatalf("the creation in a member's log: %+v", e)
	}
	var all []proto.Member
	for after := ""; ; {
		page, ok := owner.Do(&proto.Members{ID: owner.ID(), Conv: "big", After: after, Limit: 25}).(*proto.MembersResult)
		if !ok {
			t.Fatalf("members after %q: %#v", after, page)
		}
		all = append(all, page.Members...)
		if !page.More {
			break
		}
		after = page.Members[len(page.Members)-1].User
	}
	if len(all) != 61 || all[0].User != "owner" && all[60].User != "owner" {
		t.Fatalf("paged %d members: %v", len(all), all)
	}
	st, _ := owner.Do(&proto.ConvState{ID: owner.ID(), Conv: "big"}).(*proto.ConvStateResult)
	if st == nil || st.Conv.Members != nil || st.Conv.MemberCount != 61 || st.Conv.Role != proto.RoleOwner {
		t.Fatalf("ConvState of a large group: %#v", st)
	}
}

// TestQuotasAreAcrossConnections: the send and query rates are per device and the member quota
// per user, whatever the number of connections; a user's connections are capped; and another
// user is served meanwhile.
func TestQuotasAreAcrossConnections(t *testing.T) {
	ts := startServer(t, func(c *Config) {
		c.SendRate, c.SendBurst = 0.01, 3
		c.QueryRate, c.QueryBurst = 0.01, 4
		c.MembersPerMinute = proto.MaxMembers
		c.MaxConnectionsPerUser = 4
	})
	conv := proto.DirectConv("mallory", "bob")
	var conns []*prototest.Conn
	for range 3 {
		conns = append(conns, connect(t, ts, "mallory", "laptop"))
	}
	sent := 0
	for i, c := range conns {
		for j := range 2 {
			switch f := c.Do(&proto.Send{ID: c.ID(), Conv: conv, ClientMsgID: fmt.Sprintf("m%d-%d", i, j), Body: []byte("x"), Peer: "bob"}).(type) {
			case *proto.Ack:
				sent++
			case *proto.Error:
				if f.Code != proto.CodeRateLimited {
					t.Fatalf("send %d/%d: %v", i, j, f)
				}
			}
		}
	}
	if sent != 3 {
		t.Fatalf("three connections of one device sent %d messages with a burst of 3", sent)
	}
	queried := 0
	for _, c := range conns {
		for range 3 {
			if _, ok := c.Do(&proto.HeadCheck{ID: c.ID()}).(*proto.Head); ok {
				queried++
			}
		}
	}
	if queried != 4 {
		t.Fatalf("three connections of one device made %d queries with a burst of 4", queried)
	}
	// The member quota is the user's, whatever the device: a full request spends it.
	tablet := prototest.Connect(t, ts.Addr().String(), ts.Fingerprint(), mustToken(t, ts, "mallory", "tablet"), "mallory", "tablet")
	members := make([]string, proto.MaxMembers)
	for i := range members {
		members[i] = fmt.Sprint("victim", i)
	}
	tablet.Ack(&proto.CreateGroup{ID: tablet.ID(), Conv: "spam", ClientMsgID: "g1", Members: members})
	// More than the quota refills while the creation is applied on a loaded machine (one member
	// per 60 ms): a single member could pass on a slow run, 100 cannot.
	more := make([]string, 100)
	for i := range more {
		more[i] = fmt.Sprint("more", i)
	}
	e, ok := tablet.Do(&proto.AddMembers{ID: tablet.ID(), Conv: "spam", ClientMsgID: "g2", Members: more}).(*proto.Error)
	if !ok || e.Code != proto.CodeRateLimited || e.RetryAfterMs == 0 {
		t.Fatalf("adding past the member quota: %#v", e)
	}
	// A fifth connection of the user is refused. (The Error frame with its retry-after races the
	// connection's close, whose reason prototest reports when the frame is lost.)
	refused, ok := prototest.Hello(t, prototest.Dial(t, ts.Addr().String(), ts.Fingerprint()), mustToken(t, ts, "mallory", "watch"), "watch").(*proto.Error)
	if !ok || refused.Code != proto.CodeTooManyConnections {
		t.Fatalf("a connection over the user's limit: %#v", refused)
	}
	// Meanwhile another user is served as usual.
	alice := connect(t, ts, "alice", "phone")
	alice.Ack(&proto.Send{ID: alice.ID(), Conv: proto.DirectConv("alice", "bob"), ClientMsgID: "a1", Body: []byte("hi"), Peer: "bob"})
	if _, ok := alice.Do(&proto.HeadCheck{ID: alice.ID()}).(*proto.Head); !ok {
		t.Fatal("alice's query was refused")
	}
}

func mustToken(t *testing.T, ts *testServer, user, device string) string {
	t.Helper()
	token, err := ts.MintToken(user, device, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// TestGroupsPerUserQuota: nobody can put another user into more than max_groups_per_user groups,
// the creator included; the refusal names the user and applies nothing, and a user who leaves a
// group can be added to another again.
func TestGroupsPerUserQuota(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.MaxGroupsPerUser = 2 })
	mallory := connect(t, ts, "mallory", "laptop")
	victim := connect(t, ts, "victim", "phone")
	// waitHead waits until the victim's log has n entries: the membership entries are delivered
	// a few ms after their Ack, and the count is the victim's shard's.
	waitHead := func(n proto.Position) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			h, ok := victim.Do(&proto.HeadCheck{ID: victim.ID()}).(*proto.Head)
			if ok && h.Head >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("victim's log did not reach %d: %v", n, h)
			}
		}
	}
	mallory.Ack(&proto.CreateGroup{ID: mallory.ID(), Conv: "spam1", ClientMsgID: "g1", Members: []string{"victim"}})
	mallory.Ack(&proto.CreateGroup{ID: mallory.ID(), Conv: "spam2", ClientMsgID: "g2", Members: []string{"victim"}})
	waitHead(2)

	refused := func(c *prototest.Conn, req proto.Request, who string) {
		t.Helper()
		e, ok := c.Do(req).(*proto.Error)
		if !ok || e.Code != proto.CodeTooManyGroups || !strings.Contains(e.Message, who) {
			t.Fatalf("%T: %#v, want too_many_groups naming %s", req, e, who)
		}
	}
	// The creator is in two groups already.
	refused(mallory, &proto.CreateGroup{ID: mallory.ID(), Conv: "spam3", ClientMsgID: "g3", Members: []string{"victim"}}, "mallory")
	trudy := connect(t, ts, "trudy", "laptop")
	trudy.Ack(&proto.CreateGroup{ID: trudy.ID(), Conv: "t1", ClientMsgID: "t1", Members: []string{"carol"}})
	refused(trudy, &proto.AddMembers{ID: trudy.ID(), Conv: "t1", ClientMsgID: "t2", Members: []string{"dan", "victim"}}, "victim")
	// Nothing was applied: dan was not added along.
	m, ok := trudy.Do(&proto.Members{ID: trudy.ID(), Conv: "t1"}).(*proto.MembersResult)
	if !ok || len(m.Members) != 2 {
		t.Fatalf("t1's members after the refused addition: %#v", m)
	}

	// The victim leaves a group; then trudy may add them.
	victim.Ack(&proto.RemoveMembers{ID: victim.ID(), Conv: "spam1", ClientMsgID: "v1", Members: []string{"victim"}})
	waitHead(3)
	trudy.Ack(&proto.AddMembers{ID: trudy.ID(), Conv: "t1", ClientMsgID: "t3", Members: []string{"dan", "victim"}})
	// Others are served as before.
	alice := connect(t, ts, "alice", "phone")
	alice.Ack(&proto.CreateGroup{ID: alice.ID(), Conv: "fine", ClientMsgID: "a1", Members: []string{"bob"}})
}
