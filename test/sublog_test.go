package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// groupsOnSubLogs returns one group id for each of subs sub-logs, named prefix-n.
func groupsOnSubLogs(prefix string, subs int) []string {
	out := make([]string, subs)
	for i, found := 0, 0; found < subs; i++ {
		g := fmt.Sprintf("%s-%d", prefix, i)
		if j := log.SubLogOf(g, subs); out[j] == "" {
			out[j], found = g, found+1
		}
	}
	return out
}

// splitUser asks srv's admin server to split uid's stream into subs sub-logs and waits until
// every node of nodes has the split in its map.
func splitUser(t *testing.T, srv *syncd.Server, uid string, subs int, others ...*syncd.Server) cluster.SplitInfo {
	t.Helper()
	url := fmt.Sprintf("http://%s/v1/users/%s/split?subs=%d", srv.AdminAddr(), uid, subs)
	code, body := testkit.HTTP(t, http.MethodPost, url, testkit.Bearer(srv.AdminToken()))
	var started adminapi.MoveStarted
	if err := json.Unmarshal([]byte(body), &started); err != nil || code != http.StatusOK || started.Subs != subs || started.User != uid {
		t.Fatalf("POST %s: HTTP %d %s", url, code, body)
	}
	var split cluster.SplitInfo
	for _, n := range append(others, srv) {
		testkit.WaitTrue(t, 30*time.Second, uid+"'s split to be done", func() bool {
			m, _ := n.Cluster().Map()
			split = m.Splits[uid]
			return len(m.Moves) == 0 && split.Subs == subs
		})
	}
	return split
}

// TestSplitUserOnTheWire: a user's stream split into sub-logs, as a client written from
// PROTOCOL.md sees it over QUIC. A sync stream without a vector cursor is refused with
// needs_upgrade, and one open when the split is made ends with it; one with it gets every entry once, each sub-log's contiguous from its own
// cursor and named by its frames' sub, and no sub-log's entries before the user's own log has
// been sent up to the split's gate, so each conversation's entries come in order across the
// split. Cursor acks are per sub-log and bounded by what the stream sent of it; a vector cursor
// longer than the stream is refused; HeadCheck gives every sub-log's head, ConvList lists the
// conversations of every sub-log, and a vector cursor resumes each sub-log where it was.
func TestSplitUserOnTheWire(t *testing.T) {
	const subs = 3
	srv := syncdtest.Start(t, nil)
	conn := func(user, device string) *prototest.Conn {
		token, err := srv.MintToken(user, device, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return prototest.Connect(t, srv.Addr().String(), srv.Fingerprint(), token, user, device)
	}
	alice := conn("alice", "phone")
	groups := groupsOnSubLogs("g", subs)
	n := 0
	send := func(g, body string) {
		n++
		alice.Ack(&proto.Send{ID: alice.ID(), Conv: g, ClientMsgID: fmt.Sprint("m", n), Body: []byte(body)})
	}
	for _, g := range groups {
		alice.Ack(&proto.CreateGroup{ID: alice.ID(), Conv: g, ClientMsgID: "create-" + g, Members: []string{"bob"}})
		send(g, "before")
	}
	old := conn("bob", "tablet") // an older client, syncing when the split is made
	old.StartSync(0, 0)
	old.Entries(0, 2*len(groups))
	split := splitUser(t, srv, "bob", subs)
	for _, g := range groups {
		send(g, "after")
	}
	for {
		if e, ok := old.NextSync().(*proto.Error); ok {
			if e.Code != proto.CodeNeedsUpgrade {
				t.Fatalf("an older client's open stream at the split: %#v, want needs_upgrade", e)
			}
			break
		}
	}
	// 2 entries a group before the split, in bob's own log; 1 after, in the group's sub-log.
	if split.Gate != uint64(2*len(groups)) || split.Epoch == 0 {
		t.Fatalf("split %+v: want its gate at bob's head when it was done, %d", split, 2*len(groups))
	}

	bob := conn("bob", "phone")
	bob.StartSync(0, 0)
	if e, ok := bob.NextSync().(*proto.Error); !ok || e.Code != proto.CodeNeedsUpgrade {
		t.Fatalf("a sync stream without a vector cursor for a split user: %#v, want needs_upgrade", e)
	}
	bob.StartSyncWith(&proto.SyncStart{Subs: []proto.SubCursor{{}, {}, {}, {}}})
	if e, ok := bob.NextSync().(*proto.Error); !ok || e.Code != proto.CodeInvalidArgument {
		t.Fatalf("a vector cursor of 4 sub-logs for a stream of %d: %#v, want invalid_argument", subs, e)
	}

	bob.StartSyncWith(&proto.SyncStart{Subs: []proto.SubCursor{{}}}) // a new device: knows one sub-log
	at := make([]proto.SubCursor, subs)
	seen := map[string][]proto.Position{} // conv_seqs of each conversation, in the order they came
	heartbeats := map[uint32]bool{}
	for total := 0; total < 3*len(groups) || len(heartbeats) < subs; {
		switch f := bob.NextSync().(type) {
		case *proto.Batch:
			if f.Sub >= subs {
				t.Fatalf("a batch of sub-log %d", f.Sub)
			}
			if f.Sub > 0 && (at[0].Epoch != proto.Epoch(split.Epoch) || uint64(at[0].Pos) < split.Gate) {
				t.Fatalf("sub-log %d's entries came before the own log reached the gate %d (it is at %d)", f.Sub, split.Gate, at[0].Pos)
			}
			if !f.Follows(at[f.Sub].Pos) || at[f.Sub].Epoch != 0 && at[f.Sub].Epoch != f.Epoch {
				t.Fatalf("sub-log %d's batch from %d does not follow its cursor %+v", f.Sub, f.Entries[0].Seq, at[f.Sub])
			}
			for _, e := range f.Entries {
				if got := log.SubLogOf(e.Conv, subs); f.Sub != 0 && got != int(f.Sub) {
					t.Errorf("an entry of %s came in sub-log %d, want %d", e.Conv, f.Sub, got)
				}
				seen[e.Conv] = append(seen[e.Conv], e.ConvSeq)
			}
			total += len(f.Entries)
			at[f.Sub] = proto.SubCursor{Epoch: f.Epoch, Pos: f.Entries[len(f.Entries)-1].Seq}
			if err := proto.WriteFrame(bob.Sync, &proto.CursorAck{Epoch: f.Epoch, Pos: at[f.Sub].Pos, Sub: f.Sub}); err != nil {
				t.Fatal(err)
			}
		case *proto.Heartbeat:
			heartbeats[f.Sub] = true
		default:
			t.Fatalf("sync: %#v", f)
		}
	}
	for _, g := range groups {
		if want := []proto.Position{1, 2, 3}; !slices.Equal(seen[g], want) {
			t.Errorf("%s's entries came as conv_seqs %v, want %v: once each, in order", g, seen[g], want)
		}
	}
	for i := 1; i < subs; i++ {
		if at[i].Pos != 1 {
			t.Errorf("sub-log %d holds %d entries, want 1", i, at[i].Pos)
		}
	}
	for _, ack := range []*proto.CursorAck{
		{Epoch: at[1].Epoch, Pos: 1, Sub: subs}, // a sub-log the stream does not have
		{Epoch: at[1].Epoch, Pos: 2, Sub: 1},    // beyond what was sent of it
		{Epoch: at[0].Epoch, Pos: 1, Sub: 1},    // another sub-log's epoch
	} {
		if err := proto.WriteFrame(bob.Sync, ack); err != nil {
			t.Fatal(err)
		}
		if e, ok := bob.NextSync().(*proto.Error); !ok || e.Code != proto.CodeInvalidArgument {
			t.Fatalf("cursor ack %+v: %#v, want invalid_argument", ack, e)
		}
	}

	// The acks were stored per sub-log: each sub-log's device cursor is where the device got.
	m, _ := srv.Cluster().Map()
	table, err := cluster.NewSlotTable(m.Slots)
	if err != nil {
		t.Fatal(err)
	}
	for i := range subs {
		id := log.SubLog("bob", i)
		state, err := srv.Node().State(table.Shard(log.UserSlot(id)))
		if err != nil {
			t.Fatal(err)
		}
		testkit.WaitTrue(t, 10*time.Second, "the device cursor of "+id, func() bool {
			cur, err := state.Cursors(id)
			return err == nil && len(cur) == 1 && cur[0].Cursor.Pos == log.Position(at[i].Pos)
		})
	}

	head, ok := bob.Do(&proto.HeadCheck{ID: bob.ID()}).(*proto.Head)
	if !ok || len(head.Subs) != subs || head.Subs[0].Head != head.Head || head.Head != at[0].Pos {
		t.Fatalf("head check: %#v", head)
	}
	for i, sh := range head.Subs {
		if sh.Head != at[i].Pos || sh.Epoch != at[i].Epoch {
			t.Errorf("head check: sub-log %d at %+v, the stream sent up to %+v", i, sh, at[i])
		}
	}
	list, ok := bob.Do(&proto.ConvList{ID: bob.ID()}).(*proto.ConvListResult)
	if !ok || len(list.Convs) != len(groups) {
		t.Fatalf("conv list: %#v, want the %d groups", list, len(groups))
	}

	// A later stream from the vector cursor goes on in each sub-log from where it was.
	send(groups[1], "later")
	bob.StartSyncWith(&proto.SyncStart{Epoch: at[0].Epoch, Pos: at[0].Pos, Subs: at})
	for {
		b, ok := bob.NextSync().(*proto.Batch)
		if !ok {
			continue
		}
		if b.Sub != 1 || len(b.Entries) != 1 || b.Entries[0].Seq != at[1].Pos+1 || string(b.Entries[0].Body) != "later" {
			t.Fatalf("resumed: %#v, want the one new entry of sub-log 1", b)
		}
		break
	}

	// An operator's reset of a split user resets every sub-log.
	url := fmt.Sprintf("http://%s/v1/users/bob/reset", srv.AdminAddr())
	if code, body := testkit.HTTP(t, http.MethodPost, url, testkit.Bearer(srv.AdminToken())); code != http.StatusOK {
		t.Fatalf("reset: HTTP %d %s", code, body)
	}
	for {
		if e, ok := bob.NextSync().(*proto.EpochChanged); ok {
			if e.Epoch == at[e.Sub].Epoch {
				t.Fatalf("epoch changed of sub-log %d to its old epoch %d", e.Sub, e.Epoch)
			}
			break
		}
	}
	after, ok := bob.Do(&proto.HeadCheck{ID: bob.ID()}).(*proto.Head)
	if !ok || len(after.Subs) != subs {
		t.Fatalf("head check after the reset: %#v", after)
	}
	for i, sh := range after.Subs {
		if sh.Epoch == at[i].Epoch || sh.Head != 0 {
			t.Errorf("sub-log %d after the reset: %+v, was %+v", i, sh, at[i])
		}
	}
}

// TestSplitUserUnderTraffic: on a three-node cluster an operator splits bob's stream into four
// sub-logs while alice and carol keep sending to him in a 1:1 conversation and four groups, one
// landing in each sub-log, and his phone keeps syncing; then moves one sub-log to a shard of its
// own; a laptop of his syncs from nothing after that. Both devices store every message exactly once, and each conversation's entries
// arrive in order across the split (the SDK's vector cursor, the server's gate); no device is
// told to rebase or that its epoch changed; the sub-logs hold the entries of their
// conversations after the split, and bob's own log the others.
func TestSplitUserUnderTraffic(t *testing.T) {
	const subs = 4
	// Delivery reports off: bob's acks would add delivered entries to his logs (the direct
	// conversation's), and the entries this test counts in them must not depend on when they come
	// (the fault suite's user splits run with them).
	c := syncdtest.StartCluster(t, 3, noDeliveryReports)
	devs := dialSpread(t, c, "bob", "alice", "carol")
	bob, alice, carol := devs[0], devs[1], devs[2]
	groups := groupsOnSubLogs("crew", subs)
	for _, g := range groups {
		if _, err := carol.CreateGroup(g, []string{"bob", "alice"}); err != nil {
			t.Fatal(err)
		}
	}
	waitMember(t, groups[subs-1], bob, alice, carol)
	const direct = "d:alice:bob"
	convs := append([]string{direct}, groups...)

	var mu sync.Mutex
	sent := map[string][]string{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, conv := range convs {
		from, peer := carol, ""
		if i%2 == 0 {
			from = alice
		}
		if conv == direct {
			peer = "bob"
		}
		wg.Go(func() {
			// A message every 80 ms a conversation: alice's three stay under her send rate.
			sendEvery(t, from, conv, peer, conv, 80*time.Millisecond, stop, func(body, _ string) { mu.Lock(); defer mu.Unlock(); sent[conv] = append(sent[conv], body) })
		})
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, s := range sent {
			n += len(s)
		}
		return n
	}
	testkit.WaitTrue(t, 20*time.Second, "traffic before the split", func() bool { return count() >= 40 })
	split := splitUser(t, c.Server(2), "bob", subs, c.Server(0), c.Server(1))
	sentAt := count()
	testkit.WaitTrue(t, 20*time.Second, "traffic after the split", func() bool { return count() >= sentAt+20 })
	// A sub-log moves to a shard of its own like any user's log, under the same traffic.
	moved := log.SubLog("bob", 1)
	admin := "http://" + c.Server(1).AdminAddr().String()
	if code, body := testkit.HTTP(t, http.MethodPost, admin+"/v1/moves?new_shard=1&user="+url.QueryEscape(moved), testkit.Bearer(c.Server(1).AdminToken())); code != http.StatusOK {
		t.Fatalf("move of %s: HTTP %d %s", moved, code, body)
	}
	testkit.WaitTrue(t, 30*time.Second, "the move of "+moved, func() bool {
		m, _ := c.Server(0).Cluster().Map()
		return len(m.Moves) == 0 && m.Overrides[moved] != 0
	})
	testkit.WaitTrue(t, 20*time.Second, "traffic after the sub-log's move", func() bool { return count() >= sentAt+40 })
	laptop := dialDevice(t, c.Server(1), "bob", "laptop", t.TempDir())
	t.Cleanup(func() { laptop.Close() })
	close(stop)
	wg.Wait()

	for _, d := range []*device{bob, laptop} {
		for _, conv := range convs {
			want := sent[conv]
			testkit.Wait(t, 30*time.Second, "bob to store every message of "+conv, func() (bool, string) {
				got := bodies(t, d, conv)
				return slices.Equal(got, want), fmt.Sprintf("%d of %d: %s", len(got), len(want), diffBodies(got, want))
			})
			arrived := d.arrivals(conv)
			if !slices.IsSorted(arrived) || len(slices.Compact(slices.Clone(arrived))) != len(arrived) {
				t.Errorf("%s's entries reached a device of bob's out of order or twice: %v", conv, arrived)
			}
		}
		select {
		case e := <-d.rebases:
			t.Fatalf("a device of bob's was told to rebase: %+v", e)
		case e := <-d.epochs:
			t.Fatalf("a device of bob's was told his epoch changed: %+v", e)
		default:
		}
	}

	// Every entry is in exactly one of bob's logs: his own holds everything before the split and
	// his sub-log 0 conversations' later entries, each sub-log its conversations' later ones.
	node := c.Server(0).Node()
	m, _ := c.Server(0).Cluster().Map()
	table, err := cluster.NewSlotTable(m.Slots)
	if err != nil {
		t.Fatal(err)
	}
	total := uint64(0)
	for i := range subs {
		id := log.SubLog("bob", i)
		shard, pinned := m.Overrides[id]
		if !pinned {
			shard = table.Shard(log.UserSlot(id))
		}
		state, err := node.State(shard)
		if err != nil {
			t.Fatal(err)
		}
		var info log.LogInfo
		testkit.WaitTrue(t, 10*time.Second, "node 0's replica of "+id, func() bool {
			info, err = state.UserInfo(id)
			return err == nil && (i == 0 && uint64(info.Head) > split.Gate || i > 0 && info.Head > 0)
		})
		total += uint64(info.Head)
	}
	want := uint64(count() + len(groups)) // the groups' creations are entries too
	if total != want {
		t.Errorf("bob's logs hold %d entries in all, want %d", total, want)
	}
	t.Logf("split bob into %d sub-logs under %d sends (%d after the split), gate %d", subs, count(), count()-sentAt, split.Gate)
}
