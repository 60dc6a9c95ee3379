package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/test/testkit"
)

// moveBound is how long a move, a split of a shard or of a user's stream may take on an idle
// single node before a test calls it stalled: each is a handful of commits and waits on the
// fan-out of shards that have nothing to send (issue #21: one waited for traffic that never came).
const moveBound = 20 * time.Second

// TestMovesFinishWhileShardsIdle: every shard's outbox had traffic and is then silent (trimmed
// to its head). A user's log moves to a new shard, a message reaches it there, and the log moves
// again, then is split into sub-logs; a shard added by hand and given slots is then split. Each
// step finishes within moveBound without traffic on the other shards, and the message sent in
// between reaches the user's device at once. Before the fix the second move stayed at its fence
// step until every idle shard's outbox had traffic again: a shard that joined after the traffic
// never had a delivery from the idle sources, so its stored marks for them stayed below the
// cutover positions the move waits for.
func TestMovesFinishWhileShardsIdle(t *testing.T) {
	srv := startServer(t)
	m, _ := srv.Cluster().Map()
	table := cluster.Even(m.Shards)

	// Traffic homed on every shard: alice writes to one peer per shard, then everything is silent.
	alice := dialDevice(t, srv, "alice", "phone", t.TempDir())
	defer alice.Close()
	homed := map[raftstore.ShardID]bool{}
	for i := 0; len(homed) < m.Shards; i++ {
		peer := fmt.Sprintf("p%d", i)
		conv := "d:alice:" + peer
		if sh := table.ConvShard(conv); !homed[sh] {
			homed[sh] = true
			if _, err := alice.Send(conv, peer, []byte("hello "+peer)); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitSent(t, alice, m.Shards)
	waitOutboxesTrimmed(t, srv)

	erin := dialDevice(t, srv, "erin", "phone", t.TempDir())
	defer erin.Close()
	first := table.UserShard("erin")
	moved := startMoveAndWait(t, srv, "/v1/moves?user=erin&new_shard=1")
	if raftstore.ShardID(moved.From) != first {
		t.Fatalf("erin moved from shard %d, want %d", moved.From, first)
	}

	const direct = "d:alice:erin"
	if _, err := alice.Send(direct, "erin", []byte("after the first move")); err != nil {
		t.Fatal(err)
	}
	waitBodies(t, direct, []string{"after the first move"}, erin)
	waitOutboxesTrimmed(t, srv)

	startMoveAndWait(t, srv, fmt.Sprintf("/v1/moves?user=erin&to=%d", first))
	if _, err := alice.Send(direct, "erin", []byte("after the second move")); err != nil {
		t.Fatal(err)
	}
	waitBodies(t, direct, []string{"after the first move", "after the second move"}, erin)
	waitOutboxesTrimmed(t, srv)

	startMoveAndWait(t, srv, "/v1/users/erin/split?subs=2")
	if _, err := alice.Send(direct, "erin", []byte("after the split")); err != nil {
		t.Fatal(err)
	}
	waitBodies(t, direct, []string{"after the first move", "after the second move", "after the split"}, erin)
	waitOutboxesTrimmed(t, srv)

	// A shard added by hand, given a range of slots, then split in two.
	admin, bearer := "http://"+srv.AdminAddr().String(), testkit.Bearer(srv.AdminToken())
	code, body := testkit.HTTP(t, http.MethodPost, admin+"/v1/shards", bearer)
	var added adminapi.ShardAdded
	if err := json.Unmarshal([]byte(body), &added); err != nil || code != http.StatusOK {
		t.Fatalf("POST /v1/shards: HTTP %d %s", code, body)
	}
	m, _ = srv.Cluster().Map()
	r := m.Slots[0]
	startMoveAndWait(t, srv, fmt.Sprintf("/v1/moves?slots=%d-%d&to=%d", r.First, r.First+(r.Last-r.First)/2, added.Shard))
	waitOutboxesTrimmed(t, srv)
	startMoveAndWait(t, srv, fmt.Sprintf("/v1/shards/%d/split", added.Shard))
}

// startMoveAndWait starts a move, a shard's split or a user's split with POST path on srv's
// admin API and waits up to moveBound for it to finish.
func startMoveAndWait(t *testing.T, srv *syncd.Server, path string) adminapi.MoveStarted {
	t.Helper()
	code, body := testkit.HTTP(t, http.MethodPost, "http://"+srv.AdminAddr().String()+path, testkit.Bearer(srv.AdminToken()))
	var started adminapi.MoveStarted
	if err := json.Unmarshal([]byte(body), &started); err != nil || code != http.StatusOK {
		t.Fatalf("POST %s: HTTP %d %s", path, code, body)
	}
	testkit.Wait(t, moveBound, fmt.Sprintf("move %d (%s) to finish", started.ID, path), func() (bool, string) {
		m, _ := srv.Cluster().Map()
		mv := m.Moves[started.ID]
		if mv == nil {
			return true, ""
		}
		return false, fmt.Sprintf("at step %s", mv.Step)
	})
	return started
}

// waitOutboxesTrimmed waits until every data shard on srv has delivered and trimmed its whole
// outbox: the shards are idle.
func waitOutboxesTrimmed(t *testing.T, srv *syncd.Server) {
	t.Helper()
	testkit.Wait(t, 20*time.Second, "every outbox trimmed to its head", func() (bool, string) {
		m, _ := srv.Cluster().Map()
		for _, sh := range m.DataShards() {
			st, err := srv.Node().State(sh)
			if err != nil {
				return false, err.Error()
			}
			info, err := st.Outbox()
			if err != nil || info.First <= info.Head {
				return false, fmt.Sprintf("shard %d's outbox holds (%d, %d] (%v)", sh, info.First-1, info.Head, err)
			}
		}
		return true, ""
	})
}

// TestSlotMoveLeavesPinnedUsersBehind: a user moved on her own (pinned by the map to shard P)
// keeps receiving, on P, the entries of a conversation homed on a shard added after her move,
// when the range of slots her id hashes to moves to another shard; and she can move again. That
// shard had no cutover of hers, so before the fix the range's cutover routed her entries to the
// range's destination, where her log is not, and her next move stalled at its cutover step
// (the new shard refused it: "her entries go to" the range's destination).
func TestSlotMoveLeavesPinnedUsersBehind(t *testing.T) {
	srv := startServer(t)
	m, _ := srv.Cluster().Map()
	table := cluster.Even(m.Shards)
	fay, eve := dialDevice(t, srv, "fay", "phone", t.TempDir()), dialDevice(t, srv, "eve", "phone", t.TempDir())
	defer fay.Close()
	defer eve.Close()
	slotShard := table.UserShard("fay")
	pinned := slotShard%raftstore.ShardID(m.Shards) + 1
	startMoveAndWait(t, srv, fmt.Sprintf("/v1/moves?user=fay&to=%d", pinned))

	// A conversation of hers homed on a shard added since.
	const direct = "d:eve:fay"
	moved := startMoveAndWait(t, srv, fmt.Sprintf("/v1/moves?conv=%s&new_shard=1", direct))
	if _, err := eve.Send(direct, "fay", []byte("before the slot move")); err != nil {
		t.Fatal(err)
	}
	waitBodies(t, direct, []string{"before the slot move"}, fay)

	// Her slot moves away from the shard it belonged to; she stays on her own shard.
	slot := log.UserSlot("fay")
	to := raftstore.ShardID(moved.To)
	startMoveAndWait(t, srv, fmt.Sprintf("/v1/moves?slots=%d-%d&to=%d", slot, slot, to))
	if _, err := eve.Send(direct, "fay", []byte("after the slot move")); err != nil {
		t.Fatal(err)
	}
	waitBodies(t, direct, []string{"before the slot move", "after the slot move"}, fay)

	startMoveAndWait(t, srv, fmt.Sprintf("/v1/moves?user=fay&to=%d", slotShard))
	if _, err := eve.Send(direct, "fay", []byte("after her second move")); err != nil {
		t.Fatal(err)
	}
	waitBodies(t, direct, []string{"before the slot move", "after the slot move", "after her second move"}, fay)
	if st, err := srv.Node().State(to); err != nil {
		t.Fatal(err)
	} else if info, err := st.UserInfo("fay"); err == nil && info.Head > 0 {
		t.Fatalf("shard %d, the slot's new owner, holds a log of fay's (%+v): her entries went there", to, info)
	}
}
