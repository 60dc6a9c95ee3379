package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// The move driver's own tests run it on a real node hosting both shards of a move, with the
// cluster map applied straight to a real meta state machine (no meta group): every step the
// driver proposes to the data shards is a real Raft command, and every change it asks of the map
// goes through the same apply the meta group runs.

// mapHost is a driverHost whose data shards are a real node's and whose cluster map is a metaFSM
// applied in place, one index per command.
type mapHost struct {
	*raftstore.Node
	mu    sync.Mutex
	fsm   *metaFSM
	index uint64
}

func newMapHost(t *testing.T, n *raftstore.Node, shards int) *mapHost {
	t.Helper()
	h := &mapHost{Node: n, fsm: newMetaFSM()}
	m := ClusterMap{Shards: shards, RF: 1, Nodes: map[string]NodeInfo{"n1": {ID: "n1", RaftAddr: n.Addr()}},
		Replicas: map[ShardID][]string{}, Slots: EvenSlots(shards)}
	for s := 1; s <= shards; s++ {
		m.Replicas[ShardID(s)] = []string{"n1"}
	}
	if err := h.apply(metaCommand{Op: "init", Map: &m}); err != nil {
		t.Fatal(err)
	}
	return h
}

// apply applies c to the map as the meta group would, at the next index.
func (h *mapHost) apply(c metaCommand) error {
	c.V = metaCommandV1
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.index++
	if res, ok := h.fsm.Apply(&raft.Log{Type: raft.LogCommand, Index: h.index, Data: data}).(error); ok {
		return res
	}
	return nil
}

func (h *mapHost) Map() (ClusterMap, bool) { return h.fsm.snapshot(), true }

func (h *mapHost) AdvanceMove(_ context.Context, id uint64, step Phase, cutovers map[ShardID]uint64) error {
	return h.apply(metaCommand{Op: "move-step", MoveID: id, Step: step, Cutovers: cutovers})
}

func (h *mapHost) SwitchMove(_ context.Context, id uint64, split *SplitInfo) error {
	return h.apply(metaCommand{Op: "move-switch", MoveID: id, Split: split})
}

func (h *mapHost) EndMove(_ context.Context, id uint64) error {
	return h.apply(metaCommand{Op: "move-end", MoveID: id})
}

func (h *mapHost) WaitMap(ctx context.Context, cond func(ClusterMap) bool) error {
	for !cond(h.fsm.snapshot()) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// startMove records a move of user from one shard to another and returns its id.
func (h *mapHost) startMove(t *testing.T, user string, from, to ShardID) uint64 {
	t.Helper()
	if err := h.apply(metaCommand{Op: "move-start", Move: &MoveInfo{User: user, From: from, To: to, Started: time.Now().Unix()}}); err != nil {
		t.Fatal(err)
	}
	for _, mv := range h.fsm.snapshot().Moves {
		if mv.User == user {
			return mv.ID
		}
	}
	t.Fatalf("the move of %s is not in the map", user)
	return 0
}

// sendAndDeliver appends count messages from alice to bob in a conversation homed on shard and
// delivers them into both users' logs there, as the fan-out does when the conversation and its
// members share a shard.
func sendAndDeliver(t *testing.T, n *raftstore.Node, shard ShardID, from, count int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := from; i < from+count; i++ {
		if _, err := n.Propose(ctx, shard, raftstore.AppendCommand(&log.Append{Conv: "d:alice:bob", Sender: "alice",
			ClientMsgID: fmt.Sprint("m", i), Kind: log.KindMessage, Body: []byte("hi"), Members: []string{"alice", "bob"}})); err != nil {
			t.Fatal(err)
		}
	}
	raftstoretest.DeliverOutbox(t, ctx, n, shard)
}

// userLog reads uid's whole log on shard: its epoch and entries' positions.
func userLog(t *testing.T, n *raftstore.Node, shard ShardID, uid string) (log.Epoch, []log.Position, error) {
	t.Helper()
	state, err := n.State(shard)
	if err != nil {
		t.Fatal(err)
	}
	info, err := state.UserInfo(uid)
	if err != nil {
		return 0, nil, err
	}
	var seqs []log.Position
	for from := log.Position(1); ; {
		r, err := state.ReadUser(uid, info.Epoch, from, log.Limit{Count: 100})
		if err != nil {
			return 0, nil, err
		}
		if r.Status != log.ReadEntries {
			return info.Epoch, seqs, nil
		}
		for _, e := range r.Entries {
			seqs = append(seqs, e.Seq)
		}
		from = r.Entries[len(r.Entries)-1].Seq + 1
	}
}

// startMoveHost starts a node hosting the given shards (of a map of two) and returns it with its
// map host, with bob's log on shard 1 holding count messages from alice.
func startMoveHost(t *testing.T, shards []ShardID, count int) (*raftstore.Node, *mapHost) {
	t.Helper()
	c := raftstoretest.NewCluster(t, 1, shards, nil)
	for _, s := range shards {
		c.Leader(s)
	}
	n := c.Node(0)
	if count > 0 {
		sendAndDeliver(t, n, 1, 0, count)
	}
	return n, newMapHost(t, n, 2)
}

// runDriver runs a driver on h until the test ends.
func runDriver(t *testing.T, h driverHost) {
	ctx, cancel := context.WithCancel(context.Background())
	d := newDriver(h, DriverConfig{Chunk: 7, Poll: 10 * time.Millisecond})
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestDriverMovesAUser: the driver carries a user's move through every phase — copy in chunks,
// cutover, fence, switch, drop — on the node leading the source: afterwards the destination
// holds the user's log whole, in order, with its epoch, the source answers that the user moved,
// and the map routes the user to the destination and holds no move.
func TestDriverMovesAUser(t *testing.T) {
	n, h := startMoveHost(t, []ShardID{1, 2}, 30)
	epoch, before, err := userLog(t, n, 1, "bob")
	if err != nil || len(before) != 30 {
		t.Fatalf("bob's log before the move: %d entries, %v", len(before), err)
	}

	runDriver(t, h)
	id := h.startMove(t, "bob", 1, 2)
	testkit.WaitTrue(t, 30*time.Second, "the move to end", func() bool {
		m, _ := h.Map()
		return m.Moves[id] == nil
	})

	gotEpoch, after, err := userLog(t, n, 2, "bob")
	if err != nil || gotEpoch != epoch || fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("bob on the destination: epoch %d (want %d), %v (want %v), %v", gotEpoch, epoch, after, before, err)
	}
	if _, _, err := userLog(t, n, 1, "bob"); !errors.Is(err, log.ErrMoved) {
		t.Fatalf("bob on the source after the move: %v, want ErrMoved", err)
	}
	if m, _ := h.Map(); m.Overrides["bob"] != 2 {
		t.Fatalf("the map routes bob to shard %d, want 2", m.Overrides["bob"])
	}
}

// TestDriverCancelWhileCopying: a move canceled while it copies is carried back by the driver —
// the destination drops what it staged and the move is forgotten — and the user stays, whole, on
// the source, which never stopped serving it.
func TestDriverCancelWhileCopying(t *testing.T) {
	n, h := startMoveHost(t, []ShardID{1, 2}, 10)
	id := h.startMove(t, "bob", 1, 2)
	if err := h.apply(metaCommand{Op: "move-cancel", MoveID: id}); err != nil { // before any driver runs: still copying
		t.Fatal(err)
	}
	runDriver(t, h)
	testkit.WaitTrue(t, 30*time.Second, "the canceled move to be forgotten", func() bool {
		m, _ := h.Map()
		return m.Moves[id] == nil
	})
	sendAndDeliver(t, n, 1, 10, 5)
	if _, seqs, err := userLog(t, n, 1, "bob"); err != nil || len(seqs) != 15 {
		t.Fatalf("bob on the source: %d entries, %v; want 15", len(seqs), err)
	}
	if m, _ := h.Map(); len(m.Overrides) != 0 {
		t.Fatalf("a canceled move left overrides %v", m.Overrides)
	}
}

// TestDriverLeavesMovesItDoesNotLead: a driver on a node that does not host the move's source
// shard does nothing to it (the source's leader's driver does).
func TestDriverLeavesMovesItDoesNotLead(t *testing.T) {
	_, h := startMoveHost(t, []ShardID{2}, 0)
	id := h.startMove(t, "bob", 1, 2)
	runDriver(t, h)
	time.Sleep(200 * time.Millisecond) // twenty polls
	if m, _ := h.Map(); m.Moves[id] == nil || m.Moves[id].Step != PhaseCopy {
		t.Fatalf("a driver that does not lead the source moved the move on: %+v", m.Moves[id])
	}
}
