package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestSyncctlClusterStatus asks one node of a real three-node cluster for the whole cluster, then
// stops another node and sees it reported unreachable (exit 1) while every shard keeps a leader.
func TestSyncctlClusterStatus(t *testing.T) {
	c := syncdtest.StartCluster(t, 3, nil)
	t.Setenv("SYNCD_ADMIN_TOKEN", c.Server(0).AdminToken()) // each node has its own: n1's, the one asked
	admin := []string{"-admin", c.Server(0).AdminAddr().String()}
	code, out, _ := syncctl(t, append([]string{"cluster", "status", "-json"}, admin...)...)
	if code != 0 {
		t.Fatalf("cluster status: exit %d", code)
	}
	view := decodeJSON[adminapi.ClusterView](t, out)
	leads := 0
	for i, n := range view.Nodes {
		srv := c.Server(i)
		if !n.Reachable || n.ClientAddr != srv.Addr().String() || n.AdminAddr != srv.AdminAddr().String() {
			t.Fatalf("node %d: %+v", i, n)
		}
		leads += n.Leads
	}
	if len(view.Nodes) != 3 || len(view.Shards) != 4 || leads != 4 {
		t.Fatalf("view: %+v", view)
	}
	for _, s := range view.Shards {
		if s.Leader == "" || len(s.Voters) != 3 || len(s.Replicas) != 3 || s.Slots != cluster.NumSlots/4 {
			t.Fatalf("shard %d: %+v", s.Shard, s)
		}
	}
	code, out, _ = syncctl(t, append([]string{"cluster", "status"}, admin...)...)
	if code != 0 || !strings.Contains(out, "SHARD") || strings.Count(out, " up") != 3 {
		t.Fatalf("cluster status table: exit %d\n%s", code, out)
	}

	c.Stop(2)
	testkit.WaitTrue(t, 20*time.Second, "every shard to have a leader without n3", func() bool {
		code, out, _ = syncctl(t, append([]string{"cluster", "status", "-json"}, admin...)...)
		view = decodeJSON[adminapi.ClusterView](t, out)
		for _, s := range view.Shards {
			if s.Leader == "" || len(s.Replicas) != 2 {
				return false
			}
		}
		return true
	})
	if code != exitFail || view.Nodes[2].Reachable || !strings.Contains(view.Nodes[2].Error, "unreachable") {
		t.Fatalf("with n3 stopped: exit %d, %+v", code, view.Nodes)
	}
}

// TestSyncctlShardAdd adds a shard to a running node: it is reported, gets a group with a leader
// on the node, and owns no slot; the shards there before keep theirs.
func TestSyncctlShardAdd(t *testing.T) {
	srv := syncdtest.Start(t, nil)
	t.Setenv("SYNCD_ADMIN_TOKEN", srv.AdminToken())
	admin := []string{"-admin", srv.AdminAddr().String()}
	code, out, _ := syncctl(t, append([]string{"shard", "add"}, admin...)...)
	if code != 0 || !strings.Contains(out, "shard 5 added") {
		t.Fatalf("shard add: exit %d: %s", code, out)
	}
	var view adminapi.ClusterView
	testkit.WaitTrue(t, 20*time.Second, "shard 5 to have a leader", func() bool {
		_, out, _ = syncctl(t, append([]string{"cluster", "status", "-json"}, admin...)...)
		view = decodeJSON[adminapi.ClusterView](t, out)
		return len(view.Shards) == 5 && view.Shards[4].Leader != "" && !view.Shards[4].Creating
	})
	for _, s := range view.Shards {
		want := cluster.NumSlots / 4
		if s.Shard == 5 {
			want = 0
		}
		if s.Slots != want || len(s.Voters) != 1 {
			t.Fatalf("shard %d: %+v", s.Shard, s)
		}
	}
	if code, _, errOut := syncctl(t, append([]string{"shard", "merge"}, admin...)...); code != exitUsage || !strings.Contains(errOut, "want add, split or check") {
		t.Fatalf("shard merge: exit %d: %s", code, errOut)
	}
}

// TestSyncctlMoveUser moves a user with a log to a shard of its own on a running node: the move
// is reported, runs to its end, and the user is pinned to the new shard with the log intact;
// refusals (an unknown shard, a second move of the same user) and usage errors change nothing.
func TestSyncctlMoveUser(t *testing.T) {
	srv := syncdtest.Start(t, nil)
	t.Setenv("SYNCD_ADMIN_TOKEN", srv.AdminToken())
	admin := []string{"-admin", srv.AdminAddr().String()}
	token, err := srv.MintToken("alice", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	alice := prototest.Connect(t, srv.Addr().String(), srv.Fingerprint(), token, "alice", "phone")
	created := alice.Ack(&proto.CreateGroup{ID: alice.ID(), Conv: "team", ClientMsgID: "g", Members: []string{"bob"}})
	head := func() uint64 {
		cur, _ := testkit.GetJSON[adminapi.CursorReport](t, "http://"+srv.AdminAddr().String()+"/v1/cursors?user=alice", testkit.Bearer(srv.AdminToken()))
		return cur.Head
	}
	testkit.WaitTrue(t, 10*time.Second, "alice's log to hold the group's creation", func() bool { return head() == 1 })

	for _, args := range [][]string{{"move", "user", "alice"}, {"move", "user", "alice", "-to", "2", "-new-shard"}, {"move", "alice", "-to", "2"}} {
		if code, _, _ := syncctl(t, append(args, admin...)...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
	if code, _, errOut := syncctl(t, append([]string{"move", "user", "alice", "-to", "9"}, admin...)...); code != exitFail || !strings.Contains(errOut, "data shards") {
		t.Fatalf("a move to shard 9 of 4: exit %d: %s", code, errOut)
	}
	code, out, errOut := syncctl(t, append([]string{"move", "user", "alice", "-new-shard"}, admin...)...)
	if code != 0 || !strings.Contains(out, "alice from shard") || !strings.Contains(out, "to shard 5") {
		t.Fatalf("move: exit %d: %s %s", code, out, errOut)
	}
	var view adminapi.ClusterView
	testkit.WaitTrue(t, 30*time.Second, "the move to end with alice pinned to shard 5", func() bool {
		_, out, _ = syncctl(t, append([]string{"cluster", "status", "-json"}, admin...)...)
		view = decodeJSON[adminapi.ClusterView](t, out)
		return len(view.Moves) == 0 && view.Overrides["alice"] == 5
	})
	if code, _, errOut := syncctl(t, append([]string{"move", "user", "alice", "-to", "5"}, admin...)...); code != exitFail || !strings.Contains(errOut, "differ") {
		t.Fatalf("a move to the shard alice is on: exit %d: %s", code, errOut)
	}
	if h := head(); h != 1 {
		t.Fatalf("alice's head on her new shard is %d, want 1", h)
	}
	// A move that ended cannot be canceled; a cancel needs a move id.
	if code, _, errOut := syncctl(t, append([]string{"move", "cancel", "7"}, admin...)...); code != exitFail || !strings.Contains(errOut, "no move 7") {
		t.Fatalf("cancel of a move not in progress: exit %d: %s", code, errOut)
	}
	if code, _, _ := syncctl(t, append([]string{"move", "cancel", "x"}, admin...)...); code != exitUsage {
		t.Fatalf("cancel x: exit %d", code)
	}
	alice.Ack(&proto.CreateGroup{ID: alice.ID(), Conv: "team2", ClientMsgID: "g2", Members: []string{"bob"}})
	testkit.WaitTrue(t, 10*time.Second, "a new entry to follow on her new shard", func() bool { return head() == 2 })

	// The group moves too, to the same shard; its next message is written there.
	code, out, errOut = syncctl(t, append([]string{"move", "conv", "team", "-to", "5"}, admin...)...)
	if code != 0 || !strings.Contains(out, "conversation team from shard") {
		t.Fatalf("move conv: exit %d: %s %s", code, out, errOut)
	}
	testkit.WaitTrue(t, 30*time.Second, "the move to end with the group pinned to shard 5", func() bool {
		_, out, _ = syncctl(t, append([]string{"cluster", "status", "-json"}, admin...)...)
		view = decodeJSON[adminapi.ClusterView](t, out)
		return len(view.Moves) == 0 && view.ConvOverrides["team"] == 5
	})
	if _, out, _ = syncctl(t, append([]string{"cluster", "status"}, admin...)...); !strings.Contains(out, "1 users and 1 conversations pinned") {
		t.Errorf("cluster status does not count the overrides:\n%s", out)
	}
	ack := alice.Ack(&proto.Send{ID: alice.ID(), Conv: "team", ClientMsgID: "m1", Body: []byte("on 5")})
	if !strings.HasPrefix(string(ack.MsgID), "5.") || ack.ConvSeq != 2 {
		t.Fatalf("a message to the moved group: %+v, want conv_seq 2 with a msg_id of shard 5", ack)
	}
	testkit.WaitTrue(t, 10*time.Second, "the message in alice's log", func() bool { return head() == 3 })
	// A trace of a message sent before the group moved: its members and history are found on the
	// group's new shard, its outbox record on the old one.
	code, out, errOut = syncctl(t, append([]string{"trace", string(created.MsgID), "-json"}, admin...)...)
	if code != 0 {
		t.Fatalf("trace of the group's creation after its move: exit %d: %s %s", code, out, errOut)
	}
	rep := decodeJSON[adminapi.TraceReport](t, out)
	if rep.Conv != "team" || rep.ConvKind != "group" || len(rep.Users) != 2 || rep.Entry == nil {
		t.Fatalf("trace after the move: %+v", rep)
	}
	for _, u := range rep.Users {
		if !u.Member || u.Status != adminapi.TraceDelivered {
			t.Errorf("trace after the move, user %s: %+v", u.User, u)
		}
	}
}

// TestSyncctlSplitShard: an operator splits shard 1 of a single node in two with syncctl shard
// split, then moves a few slots of the new shard back with syncctl slots move; a user of the
// moving half keeps her log and her device its cursor, and cluster status shows the slot ranges
// each shard owns. Bad ranges are refused with a hint.
func TestSyncctlSplitShard(t *testing.T) {
	srv := syncdtest.Start(t, nil)
	t.Setenv("SYNCD_ADMIN_TOKEN", srv.AdminToken())
	admin := []string{"-admin", srv.AdminAddr().String()}
	upper := log.SlotSpan{First: 512, Last: 1023} // shard 1's upper half: it owns 0-1023 of 4 shards
	var uid string
	for i := 0; uid == ""; i++ {
		if u := fmt.Sprint("user", i); upper.Contains(log.UserSlot(u)) {
			uid = u
		}
	}
	token, err := srv.MintToken(uid, "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dev := prototest.Connect(t, srv.Addr().String(), srv.Fingerprint(), token, uid, "phone")
	dev.Ack(&proto.CreateGroup{ID: dev.ID(), Conv: "team", ClientMsgID: "g", Members: []string{"bob"}})
	head := func() uint64 {
		cur, _ := testkit.GetJSON[adminapi.CursorReport](t, "http://"+srv.AdminAddr().String()+"/v1/cursors?user="+uid, testkit.Bearer(srv.AdminToken()))
		return cur.Head
	}
	testkit.WaitTrue(t, 10*time.Second, "the user's log to hold the group's creation", func() bool { return head() == 1 })

	for _, args := range [][]string{{"shard", "split"}, {"shard", "split", "x"}, {"slots", "move", "1-2"}, {"slots", "1-2", "-to", "2"}} {
		if code, _, _ := syncctl(t, append(args, admin...)...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
	for args, want := range map[string]string{
		"slots move 1000-1100 -to 3": "move a range one shard owns",
		"slots move 5000 -to 3":      "within 0-4095",
		"shard split 9":              "owns no hash slots",
	} {
		if code, _, errOut := syncctl(t, append(strings.Fields(args), admin...)...); code != exitFail || !strings.Contains(errOut, want) {
			t.Errorf("%s: exit %d: %s, want %q", args, code, errOut, want)
		}
	}
	code, out, errOut := syncctl(t, append([]string{"shard", "split", "1"}, admin...)...)
	if code != 0 || !strings.Contains(out, "slots 512-1023 from shard 1 to shard 5") {
		t.Fatalf("shard split: exit %d: %s %s", code, out, errOut)
	}
	var view adminapi.ClusterView
	testkit.WaitTrue(t, 30*time.Second, "the split to end", func() bool {
		_, out, _ = syncctl(t, append([]string{"cluster", "status", "-json"}, admin...)...)
		view = decodeJSON[adminapi.ClusterView](t, out)
		return len(view.Moves) == 0 && len(view.Shards) == 5 && slices.Equal(view.Shards[4].SlotRanges, []string{"512-1023"})
	})
	if h := head(); h != 1 {
		t.Fatalf("the user's head on the new shard is %d, want 1", h)
	}
	dev.Ack(&proto.Send{ID: dev.ID(), Conv: "team", ClientMsgID: "m1", Body: []byte("after the split")})
	testkit.WaitTrue(t, 10*time.Second, "a new entry to follow on the new shard", func() bool { return head() == 2 })

	// Ten of the new shard's slots go back to shard 1.
	if code, out, errOut = syncctl(t, append([]string{"slots", "move", "512-521", "-to", "1"}, admin...)...); code != 0 {
		t.Fatalf("slots move: exit %d: %s %s", code, out, errOut)
	}
	testkit.WaitTrue(t, 30*time.Second, "the slot move to end", func() bool {
		_, out, _ = syncctl(t, append([]string{"cluster", "status", "-json"}, admin...)...)
		view = decodeJSON[adminapi.ClusterView](t, out)
		return len(view.Moves) == 0 && slices.Equal(view.Shards[0].SlotRanges, []string{"0-521"})
	})
	if _, out, _ = syncctl(t, append([]string{"cluster", "status"}, admin...)...); !strings.Contains(out, "522-1023") {
		t.Errorf("cluster status does not show the new shard's slots:\n%s", out)
	}
	if h := head(); h != 2 {
		t.Fatalf("the user's head after the slot move is %d, want 2", h)
	}
}

// TestSyncctlSplitUser: split-user refuses what is not a split of 2 to 16 sub-logs, splits a user
// through the admin API, then refuses a second split; cluster status shows the split, and pull
// prints the sub-log of an entry that came in one.
func TestSyncctlSplitUser(t *testing.T) {
	srv := syncdtest.Start(t, nil)
	t.Setenv("SYNCD_ADMIN_TOKEN", srv.AdminToken())
	admin := []string{"-admin", srv.AdminAddr().String()}
	for _, args := range [][]string{{"split-user"}, {"split-user", "-user", "bot"}, {"split-user", "-user", "bot", "-subs", "1"}, {"split-user", "-user", "bot", "-subs", "17"}} {
		if code, _, _ := syncctl(t, append(args, admin...)...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
	if code, _, errOut := syncctl(t, append([]string{"split-user", "-user", "bot x", "-subs", "4"}, admin...)...); code != exitFail || !strings.Contains(errOut, "give a user id") {
		t.Errorf("a split of a bad user id: exit %d: %s", code, errOut)
	}
	code, out, errOut := syncctl(t, append([]string{"split-user", "-user", "bot", "-subs", "4"}, admin...)...)
	if code != 0 || !strings.Contains(out, "split of user bot into 4 sub-logs started") {
		t.Fatalf("split-user: exit %d: %s %s", code, out, errOut)
	}
	testkit.WaitTrue(t, 20*time.Second, "the split to be done", func() bool {
		m, _ := srv.Cluster().Map()
		return m.Splits["bot"].Subs == 4 && len(m.Moves) == 0
	})
	if code, _, errOut := syncctl(t, append([]string{"split-user", "-user", "bot", "-subs", "2"}, admin...)...); code != exitFail || !strings.Contains(errOut, "split into 4 sub-logs already") {
		t.Errorf("a second split: exit %d: %s", code, errOut)
	}
	if code, out, errOut := syncctl(t, append([]string{"cluster", "status"}, admin...)...); code != 0 || !strings.Contains(out, "bot: 4 sub-logs") {
		t.Errorf("cluster status: exit %d: %s %s, want the split", code, out, errOut)
	}
	as := func(user string) []string {
		tok, err := srv.MintToken(user, "phone", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return []string{"-addr", srv.Addr().String(), "-token", tok, "-fingerprint", srv.Fingerprint(), "-store", t.TempDir()}
	}
	group := ""
	for i := 0; group == ""; i++ {
		if g := fmt.Sprint("g:", i); log.SubLogOf(g, 4) != 0 {
			group = g
		}
	}
	alice := as("alice")
	for _, args := range [][]string{{"group", "create", "-conv", group, "-members", "bot"}, {"send", "-conv", group, "-body", "to a sub-log"}} {
		if code, _, errOut := syncctl(t, append(args, alice...)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	want := fmt.Sprintf(`"sub":%d`, log.SubLogOf(group, 4))
	code, out, errOut = syncctl(t, append([]string{"pull"}, as("bot")...)...)
	if code != 0 || !strings.Contains(out, want) || !strings.Contains(out, "to a sub-log") {
		t.Errorf("pull as the split user: exit %d: %s %s, want an entry with %s", code, out, errOut, want)
	}
}

// TestSyncctlRefusedMoveAddsNoShard (issue #21, 6): a move to a new shard that the cluster map
// refuses (here a slot range two shards own) is refused before the shard is added: the cluster
// keeps its shards, and a valid move to a new shard afterwards gets the next id.
func TestSyncctlRefusedMoveAddsNoShard(t *testing.T) {
	srv := syncdtest.Start(t, nil)
	t.Setenv("SYNCD_ADMIN_TOKEN", srv.AdminToken())
	admin := []string{"-admin", srv.AdminAddr().String()}
	shards := func() int {
		_, out, _ := syncctl(t, append([]string{"cluster", "status", "-json"}, admin...)...)
		return len(decodeJSON[adminapi.ClusterView](t, out).Shards)
	}
	if n := shards(); n != 4 {
		t.Fatalf("%d shards at start, want 4", n)
	}
	quarter := cluster.NumSlots / 4 // shard 1 owns 0 to quarter-1, shard 2 the next quarter
	span := fmt.Sprintf("%d-%d", quarter-10, quarter+10)
	code, _, errOut := syncctl(t, append([]string{"slots", "move", span, "-new-shard"}, admin...)...)
	if code != exitFail || !strings.Contains(errOut, "move a range one shard owns") {
		t.Fatalf("slots move %s -new-shard: exit %d: %s", span, code, errOut)
	}
	if n := shards(); n != 4 {
		t.Fatalf("%d shards after a refused move to a new shard, want 4: the refused move added one", n)
	}
	code, out, errOut := syncctl(t, append([]string{"slots", "move", fmt.Sprintf("0-%d", quarter/2-1), "-new-shard"}, admin...)...)
	if code != 0 || !strings.Contains(out, "to shard 5") {
		t.Fatalf("a valid slots move -new-shard: exit %d: %s %s", code, out, errOut)
	}
}
