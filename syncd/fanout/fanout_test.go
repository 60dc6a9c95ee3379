package fanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/routing"
	"github.com/syncd-dev/syncd/test/testkit"
)

// localShards are eight shards on one Pebble store, driven without Raft: a proposal applies its
// command at once through raftstore.Apply, the state machine's own code, and wakes the fan-out as
// an applied batch would. What the fan-out does with the answers is all that is under test here;
// the replicated path runs in syncd's server tests and the cluster suites.
type localShards struct {
	db     *pebble.DB
	shards map[raftstore.ShardID]*log.Shard
	ids    []raftstore.ShardID
	wake   func(raftstore.ShardID)

	mu    sync.Mutex // serializes proposals, as a shard's Raft log does
	index uint64
	// fail, if set, is asked before each proposal; a non-nil error is returned instead of applying.
	fail func(shard raftstore.ShardID, cmd raftstore.Command) error
}

func openLocalShards(t *testing.T, dir string) *localShards {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	ls := &localShards{db: db, shards: map[raftstore.ShardID]*log.Shard{}, ids: []raftstore.ShardID{1, 2, 3, 4, 5, 6, 7, 8}}
	for _, id := range ls.ids {
		if ls.shards[id], err = log.OpenShard(db, id); err != nil {
			t.Fatal(err)
		}
		idx, err := ls.shards[id].Applied()
		if err != nil {
			t.Fatal(err)
		}
		ls.index = max(ls.index, idx)
	}
	return ls
}

func (ls *localShards) Shards() []raftstore.ShardID { return ls.ids }

func (ls *localShards) ShardStatus(shard raftstore.ShardID) (raftstore.ShardStatus, error) {
	if ls.shards[shard] == nil {
		return raftstore.ShardStatus{}, raftstore.ErrNoShard
	}
	return raftstore.ShardStatus{Shard: shard, State: "leader", LeaderID: "n1"}, nil
}

func (ls *localShards) State(shard raftstore.ShardID) (*log.Shard, error) {
	if s := ls.shards[shard]; s != nil {
		return s, nil
	}
	return nil, raftstore.ErrNoShard
}

func (ls *localShards) Propose(_ context.Context, shard raftstore.ShardID, cmd raftstore.Command) (raftstore.Result, error) {
	state, err := ls.State(shard)
	if err != nil {
		return raftstore.Result{}, err
	}
	ls.mu.Lock()
	if ls.fail != nil {
		if err := ls.fail(shard, cmd); err != nil {
			ls.mu.Unlock()
			return raftstore.Result{}, err
		}
	}
	ls.index++
	tx := state.Begin()
	res, err := raftstore.Apply(tx, log.Stamp{Index: ls.index, Time: time.Now().UnixNano()}, cmd)
	if err == nil || log.Rejected(err) { // a rejection is applied as a no-op, as in the FSM
		if cerr := errors.Join(tx.SetApplied(ls.index), tx.Commit(false)); cerr != nil {
			err = cerr
		}
	}
	tx.Close()
	ls.mu.Unlock()
	if ls.wake != nil {
		ls.wake(shard)
	}
	return res, err
}

func (ls *localShards) close(t *testing.T) {
	if err := ls.db.Close(); err != nil {
		t.Error(err)
	}
}

type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// fanoutNode is the eight local shards with a running fan-out wired to their applies.
type fanoutNode struct {
	node   *localShards
	fan    *Fanout
	slots  *routing.Table
	cancel context.CancelFunc
	done   chan struct{}
}

func startFanoutNode(t *testing.T, dir string) *fanoutNode {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelError}))
	node := openLocalShards(t, dir)
	slots := routing.Even(len(node.ids))
	fan := New(node, slots, Config{Batch: 64, Logger: logger}) // default IdleLag
	node.wake = fan.Notify
	ctx, cancel := context.WithCancel(context.Background())
	fn := &fanoutNode{node: node, fan: fan, slots: slots, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(fn.done)
		fan.Run(ctx)
	}()
	return fn
}

func (fn *fanoutNode) stop(t *testing.T) {
	fn.cancel()
	<-fn.done
	fn.node.close(t)
}

type testLog struct{ t testing.TB }

func (w testLog) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// sent records what a conversation acknowledged, in conv_seq order.
type sent struct {
	mu    sync.Mutex
	convs map[string][]log.MsgID // conv → msg_id at conv_seq i+1
}

func (s *sent) ack(conv string, r log.AppendResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.convs[conv]
	for log.Position(len(l)) < r.ConvSeq {
		l = append(l, log.MsgID{})
	}
	l[r.ConvSeq-1] = r.MsgID
	s.convs[conv] = l
}

// TestFanoutDeliversAcrossShardsExactlyOnce sends to direct and group conversations whose
// members live on other shards, with resends and a restart in the middle, and checks that every
// member's log holds every entry of each of its conversations exactly once, in conversation order,
// and that the outboxes end fully trimmed (G5, G6).
func TestFanoutDeliversAcrossShardsExactlyOnce(t *testing.T) {
	dir := t.TempDir()
	users := make([]string, 24)
	for i := range users {
		users[i] = fmt.Sprintf("user%02d", i)
	}
	type convDef struct {
		id      string
		members []string
	}
	var convs []convDef
	for i := 0; i < 8; i++ {
		a, b := users[2*i], users[2*i+1]
		convs = append(convs, convDef{id: "d:" + a + ":" + b, members: []string{a, b}})
	}
	for g := 0; g < 3; g++ {
		convs = append(convs, convDef{id: fmt.Sprintf("group%d", g), members: users[g*6 : g*6+8]})
	}
	acks := &sent{convs: map[string][]log.MsgID{}}
	r := rand.New(rand.NewPCG(1, 2))
	fn := startFanoutNode(t, dir)

	propose := func(conv string, req *log.Append) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := fn.node.Propose(ctx, fn.slots.ConvShard(conv), raftstore.AppendCommand(req))
		if err != nil {
			t.Fatalf("%s: %v", conv, err)
		}
		if !res.Append.Duplicate {
			acks.ack(conv, res.Append)
		}
	}
	for _, c := range convs[8:] {
		propose(c.id, &log.Append{Conv: c.id, Sender: c.members[0], ClientMsgID: "create", Kind: log.KindGroupCreate, Members: c.members})
	}
	for round := 0; round < 2; round++ {
		for i := 0; i < 300; i++ {
			c := convs[r.IntN(len(convs))]
			sender := c.members[r.IntN(len(c.members))]
			req := &log.Append{Conv: c.id, Sender: sender, ClientMsgID: fmt.Sprintf("r%d-%d", round, i), Kind: log.KindMessage,
				Body: []byte(fmt.Sprint("hello ", i))}
			if len(c.members) == 2 {
				req.Members = c.members
			}
			propose(c.id, req)
			if i%10 == 0 {
				propose(c.id, req) // a client resend: must not show up twice anywhere
			}
		}
		if round == 0 { // restart mid-way: the fan-out resumes from the marks, nothing twice
			fn.stop(t)
			fn = startFanoutNode(t, dir)
		}
	}
	defer fn.stop(t)

	// Wait until every member's log holds every entry of its conversations.
	want := map[string]int{}
	for _, c := range convs {
		for _, m := range c.members {
			want[m] += len(acks.convs[c.id])
		}
	}
	testkit.WaitTrue(t, 30*time.Second, "fan-out to complete", func() bool {
		for uid, n := range want {
			state, _ := fn.node.State(fn.slots.UserShard(uid))
			info, err := state.UserInfo(uid)
			if err != nil || int(info.Head) < n {
				return false
			}
		}
		return true
	})
	for _, c := range convs {
		for _, m := range c.members {
			checkUserLog(t, fn, m, c.id, acks.convs[c.id])
		}
	}
	for uid, n := range want {
		state, _ := fn.node.State(fn.slots.UserShard(uid))
		if info, _ := state.UserInfo(uid); int(info.Head) != n {
			t.Errorf("%s's log has %d entries, want %d", uid, info.Head, n)
		}
	}
	testkit.WaitTrue(t, 10*time.Second, "outboxes to be trimmed", func() bool {
		for _, s := range fn.node.Shards() {
			state, _ := fn.node.State(s)
			if info, _ := state.Outbox(); info.First <= info.Head {
				return false
			}
		}
		return true
	})
	if fn.fan.Delivered() == 0 {
		t.Fatal("fan-out reports no deliveries")
	}
}

// checkUserLog reads uid's whole log and checks that the entries of conv appear exactly as
// acknowledged: each msg_id once, in conv_seq order.
func checkUserLog(t *testing.T, fn *fanoutNode, uid, conv string, want []log.MsgID) {
	t.Helper()
	state, _ := fn.node.State(fn.slots.UserShard(uid))
	var got []log.MsgID
	for from := log.Position(1); ; {
		r, err := state.ReadUser(uid, 0, from, log.Limit{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != log.ReadEntries {
			break
		}
		for _, e := range r.Entries {
			if e.Seq != from {
				t.Fatalf("%s: position %d where %d was expected", uid, e.Seq, from)
			}
			from++
			if e.Conv == conv {
				got = append(got, e.MsgID)
			}
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%s holds %d entries of %s, want %d", uid, len(got), conv, len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: entry %d of %s is %v, want %v", uid, i, conv, got[i], want[i])
		}
	}
}
