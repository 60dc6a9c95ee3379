package raftstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
)

// TestProposeOnFollowerForwards: a follower forwards proposals to the leader and returns the
// leader's answers as if it had proposed itself — results, refusals with their sentinels, an
// out-of-order answer with its fields, the per-batch answers of a DeliverBatchesCommand — and the
// leader's clock stamps them.
func TestProposeOnFollowerForwards(t *testing.T) {
	const shard = raftstore.ShardID(1)
	c := raftstoretest.NewCluster(t, 3, []raftstore.ShardID{shard}, nil)
	leader := c.Leader(shard)
	follower := c.Node((leader + 1) % 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	before := time.Now().UnixNano()
	res, err := follower.Propose(ctx, shard, send("d:alice:bob", "alice", "m1", "hi", "alice", "bob"))
	if err != nil {
		t.Fatal(err)
	}
	if a := res.Append; a.ConvSeq != 1 || a.MsgID.Shard != log.ShardID(shard) || a.Time < before || a.Duplicate {
		t.Fatalf("forwarded append: %+v", a)
	}
	again, err := follower.Propose(ctx, shard, send("d:alice:bob", "alice", "m1", "hi", "alice", "bob"))
	if err != nil || !again.Append.Duplicate || again.Append.MsgID != res.Append.MsgID {
		t.Fatalf("forwarded resend: %+v %v", again, err)
	}
	_, err = follower.Propose(ctx, shard, send("d:alice:bob", "alice", "m1", "other", "alice", "bob"))
	if !errors.Is(err, log.ErrConflict) || !log.Rejected(err) {
		t.Fatalf("forwarded conflict: %v", err)
	}
	_, err = follower.Propose(ctx, shard, raftstore.DeliverCommand(&log.DeliveryBatch{Source: 9, Prev: 5, Last: 6}))
	var ooo *log.OutOfOrderError
	if !errors.As(err, &ooo) || ooo.Source != 9 || ooo.Mark != 0 || ooo.Prev != 5 {
		t.Fatalf("forwarded out-of-order: %v", err)
	}
	d, err := follower.Propose(ctx, shard, raftstore.DeliverCommand(&log.DeliveryBatch{Source: 9, Prev: 0, Last: 6}))
	if err != nil || d.Deliver.Mark != 6 {
		t.Fatalf("forwarded delivery: %+v %v", d, err)
	}
	// Batches of several sources in one entry: each its own answer, a refused one among them.
	m, err := follower.Propose(ctx, shard, raftstore.DeliverBatchesCommand([]*log.DeliveryBatch{
		{Source: 9, Prev: 6, Last: 8}, {Source: 10, Prev: 3, Last: 4}, {Source: 11, Prev: 0, Last: 2}}))
	if err != nil || len(m.Deliveries) != 3 || m.Deliveries[0] != (raftstore.DeliveryOutcome{Result: log.DeliverResult{Mark: 8}}) ||
		!errors.As(m.Deliveries[1].Err, &ooo) || ooo.Source != 10 || ooo.Prev != 3 || m.Deliveries[2].Err != nil || m.Deliveries[2].Result.Mark != 2 {
		t.Fatalf("forwarded batches: %+v %v", m, err)
	}
	c.WaitConverged(shard)
	c.CheckConv(t, shard, "d:alice:bob", 1)
}

// TestForwardFollowsLeaderChange: proposals keep being accepted through a follower while the
// leader is stopped and another is elected; none is lost or applied twice.
func TestForwardFollowsLeaderChange(t *testing.T) {
	const shard = raftstore.ShardID(1)
	c := raftstoretest.NewCluster(t, 3, []raftstore.ShardID{shard}, nil)
	leader := c.Leader(shard)
	via := (leader + 1) % 3
	propose := func(cmid string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for {
			_, err := c.Node(via).Propose(ctx, shard, send("d:alice:bob", "alice", cmid, "x", "alice", "bob"))
			if err == nil {
				return
			}
			if log.Rejected(err) || ctx.Err() != nil {
				t.Fatalf("propose %s through node %d: %v", cmid, via, err)
			}
			time.Sleep(20 * time.Millisecond) // unknown outcome or no leader yet: retry, dedup decides
		}
	}
	for i := range 5 {
		propose(fmt.Sprint("a", i))
	}
	c.Stop(leader)
	for i := range 5 {
		propose(fmt.Sprint("b", i))
	}
	c.Start(leader)
	c.WaitConverged(shard)
	c.CheckConv(t, shard, "d:alice:bob", 10)
}

// TestForwardUnreachableLeader: when a follower cannot reach the leader (its own connections
// to it are cut, while the leader's to it work, so it still knows the leader), a forwarded
// proposal fails at once with ErrUnreachable — never a silent success — and once the path is
// back a retry with the same client_msg_id lands exactly once.
func TestForwardUnreachableLeader(t *testing.T) {
	const shard = raftstore.ShardID(1)
	c := raftstoretest.NewCluster(t, 3, []raftstore.ShardID{shard}, nil)
	leader := c.Leader(shard)
	via := (leader + 1) % 3
	cmd := send("d:alice:bob", "alice", "m", "x", "alice", "bob")
	c.Cut(via, leader, true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err := c.Node(via).Propose(ctx, shard, cmd)
	cancel()
	if !errors.Is(err, raftstore.ErrUnreachable) {
		t.Fatalf("forward to an unreachable leader: %v, want ErrUnreachable", err)
	}
	c.Cut(via, leader, false)
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		res, err := c.Node(via).Propose(ctx, shard, cmd)
		if err == nil {
			if res.Append.ConvSeq != 1 {
				t.Fatalf("retry landed at conv_seq %d", res.Append.ConvSeq)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("retry after the path is back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.WaitConverged(shard)
	c.CheckConv(t, shard, "d:alice:bob", 1)
}

// TestClusterStatus: any node gathers every node's status over the forwarding connections,
// attributes included, and names a node it cannot reach instead of failing.
func TestClusterStatus(t *testing.T) {
	const shard = raftstore.ShardID(1)
	c := raftstoretest.NewCluster(t, 3, []raftstore.ShardID{shard}, func(cfg *raftstore.Config) {
		id := cfg.NodeID
		cfg.App = testApp{attrs: map[string]string{"client": "quic://" + id}}
	})
	leader := c.Leader(shard)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	all := c.Node(0).ClusterStatus(ctx)
	if len(all) != 3 {
		t.Fatalf("cluster status: %+v", all)
	}
	for i, p := range all {
		if p.Err != "" || p.Status == nil || p.Status.ID != p.ID || p.Status.Attrs["client"] != "quic://"+p.ID ||
			len(p.Status.Shards) != 1 || len(p.Status.Shards[0].Voters) != 3 {
			t.Fatalf("node %d: %+v", i, p)
		}
		if st := p.Status.Shards[0]; (st.State == "leader") != (p.ID == c.Config(leader).NodeID) {
			t.Fatalf("node %s: state %s, leader is n%d", p.ID, st.State, leader+1)
		}
	}
	down := (leader + 1) % 3
	asker := (leader + 2) % 3
	c.Stop(down)
	for _, p := range c.Node(asker).ClusterStatus(ctx) {
		if (p.ID == c.Config(down).NodeID) != (p.Err != "") {
			t.Fatalf("with node %d stopped: %+v", down, p)
		}
	}
}

// TestCall: a node calls another's Serve handler over the forwarding connection; answers and
// log refusals come back intact.
func TestCall(t *testing.T) {
	const shard = raftstore.ShardID(1)
	c := raftstoretest.NewCluster(t, 2, []raftstore.ShardID{shard}, func(cfg *raftstore.Config) {
		id := cfg.NodeID
		cfg.App = testApp{serve: func(ctx context.Context, method string, payload []byte) ([]byte, error) {
			if method == "refuse" {
				return nil, fmt.Errorf("%w: %s says no", log.ErrNotMember, id)
			}
			return append([]byte(id+" "+method+" "), payload...), nil
		}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := c.Node(0).Call(ctx, "n2", "echo", []byte("hi"))
	if err != nil || string(got) != "n2 echo hi" {
		t.Fatalf("call: %q %v", got, err)
	}
	if _, err := c.Node(0).Call(ctx, "n2", "refuse", nil); !errors.Is(err, log.ErrNotMember) {
		t.Fatalf("refusal: %v", err)
	}
	if _, err := c.Node(0).Call(ctx, "n9", "echo", nil); !errors.Is(err, raftstore.ErrUnreachable) {
		t.Fatalf("unknown node: %v", err)
	}
}

// testApp is a raftstore.App that publishes attrs and answers calls with serve.
type testApp struct {
	attrs map[string]string
	serve func(ctx context.Context, method string, payload []byte) ([]byte, error)
}

func (testApp) Applied(raftstore.ShardID, uint64)          {}
func (testApp) LogsChanged(raftstore.ShardID, log.Touched) {}
func (a testApp) Attrs() map[string]string                 { return a.attrs }
func (a testApp) Serve(ctx context.Context, method string, payload []byte) ([]byte, error) {
	if a.serve == nil {
		return nil, fmt.Errorf("testApp serves no calls")
	}
	return a.serve(ctx, method, payload)
}

// TestLeaderCombinesDeliveries: deliveries proposed to a shard at the same time — by the
// leader's node and forwarded by the followers, as the fan-out of every node does — are
// combined by the leader into fewer Raft entries than proposals, and each proposer still gets its
// own answer: its mark, its refusal (an out-of-order batch among them), every entry once.
func TestLeaderCombinesDeliveries(t *testing.T) {
	const shard = raftstore.ShardID(1)
	const sources, rounds = 12, 8
	c := raftstoretest.NewCluster(t, 3, []raftstore.ShardID{shard}, nil)
	leader := c.Leader(shard)
	before, err := c.Node(leader).ShardStatus(shard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, sources)
	var wg sync.WaitGroup
	for s := range sources {
		wg.Go(func() {
			node := c.Node(s % 3)
			src := log.ShardID(100 + s)
			for i := range rounds {
				pos := uint64(i + 1)
				b := &log.DeliveryBatch{Source: src, Prev: pos - 1, Last: pos, Items: []log.Delivery{{Pos: pos, Users: []string{fmt.Sprintf("u%02d", s)},
					Entry: log.Entry{Kind: log.KindMessage, MsgID: log.MsgID{Shard: src, Index: pos}, Conv: "c", ConvSeq: log.Position(pos), Sender: "x"}}}}
				res, err := node.Propose(ctx, shard, raftstore.DeliverCommand(b))
				if err != nil || res.Deliver != (log.DeliverResult{Mark: pos, Appended: 1}) {
					errs <- fmt.Errorf("source %d, batch %d via node %d: %+v %v", src, pos, s%3, res.Deliver, err)
					return
				}
				// A batch past the mark, among the others: refused alone.
				_, err = node.Propose(ctx, shard, raftstore.DeliverCommand(&log.DeliveryBatch{Source: src, Prev: pos + 5, Last: pos + 6}))
				var ooo *log.OutOfOrderError
				if !errors.As(err, &ooo) || ooo.Source != src || ooo.Mark != pos {
					errs <- fmt.Errorf("source %d: out-of-order batch answered %v", src, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	after, err := c.Node(leader).ShardStatus(shard)
	if err != nil {
		t.Fatal(err)
	}
	proposals := uint64(sources * rounds * 2)
	entries := after.LastIndex - before.LastIndex
	t.Logf("%d delivery proposals took %d Raft entries", proposals, entries)
	if entries >= proposals {
		t.Errorf("%d delivery proposals took %d Raft entries: none combined", proposals, entries)
	}
	c.WaitConverged(shard)
	for i := range c.Size() {
		state, err := c.Node(i).State(shard)
		if err != nil {
			t.Fatal(err)
		}
		for s := range sources {
			if mark, _ := state.SourceMark(log.ShardID(100 + s)); mark != rounds {
				t.Fatalf("node %d: source %d's mark is %d, want %d", i, 100+s, mark, rounds)
			}
			if info, _ := state.UserInfo(fmt.Sprintf("u%02d", s)); info.Head != rounds {
				t.Fatalf("node %d: u%02d has %d entries, want %d", i, s, info.Head, rounds)
			}
		}
	}
}
