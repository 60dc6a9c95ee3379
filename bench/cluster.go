package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/proto"
)

// Cluster is what the cluster scenarios (CatchUpReplicas, Failover) need from a running
// cluster: its nodes' client addresses, which node leads a key's shard, and a way to kill a node
// and bring it back. cmd/syncbench implements it with syncd child processes (on the harness
// test/proccluster; bench itself speaks only the protocol). Node indexes run from 0 to
// Size()-1. The scenarios call its methods from one goroutine at a time.
type Cluster interface {
	// Size returns the number of nodes.
	Size() int
	// Target returns a target whose devices are spread over every node (Target.Addrs).
	Target() Target
	// NodeTarget returns a target whose devices all connect to node i.
	NodeTarget(i int) Target
	// ConvLeader returns the node leading conversation conv's home shard; UserLeader, the node
	// leading the shard of user's log.
	ConvLeader(ctx context.Context, conv string) (int, error)
	UserLeader(ctx context.Context, user string) (int, error)
	// Kill stops node i as abruptly as it can (SIGKILL for a process) and returns once it is
	// gone.
	Kill(i int) error
	// Restart starts a killed node i again on its data and ports, and returns once the cluster
	// has settled (every node ready, replicas caught up, leaders stable).
	Restart(ctx context.Context, i int) error
}

// ReplicaCatchUpResult is the outcome of CatchUpReplicas: the same backlog replayed through the
// node leading the user's shard and through a node holding a follower replica, alternately.
type ReplicaCatchUpResult struct {
	Backlog  Backlog
	Leader   []CatchUpResult // replays through the leader's node, in run order
	Follower []CatchUpResult // replays through a follower's node, in run order
}

// CatchUpReplicas fills a fresh user's log with entries messages from devices spread over the
// cluster, then replays it reads times through the node leading the user's shard and reads
// times through the next node (a follower: every node holds a replica of every shard with three
// nodes and replication factor 3), alternating which goes first so that neither always runs
// on a warmer machine. The leader is looked up again before every pair.
func CatchUpReplicas(ctx context.Context, c Cluster, entries, reads int) (ReplicaCatchUpResult, error) {
	if c.Size() < 2 || reads < 1 {
		return ReplicaCatchUpResult{}, errors.New("bench: catch-up from replicas needs 2 nodes and 1 read")
	}
	b, err := FillBacklog(ctx, c.Target(), entries)
	if err != nil {
		return ReplicaCatchUpResult{}, err
	}
	res := ReplicaCatchUpResult{Backlog: b}
	for k := range reads {
		leader, err := c.UserLeader(ctx, b.User)
		if err != nil {
			return res, err
		}
		follower := (leader + 1) % c.Size()
		order := []bool{true, false} // leader first
		if k%2 == 1 {
			order = []bool{false, true}
		}
		for _, fromLeader := range order {
			node := follower
			if fromLeader {
				node = leader
			}
			r, err := Replay(ctx, c.NodeTarget(node), b)
			if err != nil {
				return res, fmt.Errorf("bench: catch-up through node %d (leader %v): %w", node, fromLeader, err)
			}
			if fromLeader {
				res.Leader = append(res.Leader, r)
			} else {
				res.Follower = append(res.Follower, r)
			}
		}
	}
	return res, nil
}

// FailoverResult is the outcome of one Failover.
type FailoverResult struct {
	Killed     int // the node killed: the leader of the conversation's home shard
	SenderNode int // the node the sender device is connected to
	ReaderNode int // the node the recipient's log was read back through
	// Failover is the time from the SIGKILL to the first ack of a send attempted after it.
	Failover time.Duration
	// LongestGap is the longest time between two consecutive acks in the run.
	LongestGap time.Duration
	Acked      int    // sends acked in the run
	Resent     int    // attempts that failed or timed out and were resent with the same cmid
	FirstError string // the first such failure, as the client saw it
	Lost       int    // acked msg_ids missing from the recipient's log afterwards
	Duplicates int    // msg_ids found more than once in the recipient's log
	// Restart is the time to start the killed node again and for the cluster to settle; -1 if
	// that failed.
	Restart time.Duration
}

// failoverAttemptTimeout bounds one attempt of the failover sender: a request lost with the
// killed node is resent (same cmid, so at most one entry) after this, rather than after an
// SDK's default 10 s.
const failoverAttemptTimeout = time.Second

// failoverWait bounds the wait for the first ack after the kill, and the read-back.
const failoverWait = 30 * time.Second

// Failover runs one steady sender device (one send at a time, 1:1 to a fresh recipient) on a
// node that does not lead the conversation's home shard, kills the node that does after steady,
// measures the time from the kill to the first ack of a send attempted after it, keeps sending
// for steady more, then reads the recipient's log back through a sync stream on a surviving
// node and counts acked msg_ids that are missing (Lost) or repeated (Duplicates). Finally it
// restarts the killed node and waits for the cluster to settle (Restart); on an error after the
// kill it restarts the node too, so the next round finds a whole cluster. It needs 3 nodes.
func Failover(ctx context.Context, c Cluster, steady time.Duration) (res FailoverResult, err error) {
	if c.Size() < 3 {
		return FailoverResult{}, errors.New("bench: failover needs at least 3 nodes")
	}
	run := runID()
	snd, rcv := "fos-"+run, "for-"+run
	conv := proto.DirectConv(snd, rcv)
	leader, err := c.ConvLeader(ctx, conv)
	if err != nil {
		return FailoverResult{}, err
	}
	res = FailoverResult{Killed: leader, SenderNode: (leader + 1) % c.Size(), ReaderNode: (leader + 2) % c.Size()}

	dl, err := newDialer(c.NodeTarget(res.SenderNode), 1)
	if err != nil {
		return res, err
	}
	defer dl.close()
	sc, err := dl.connect(ctx, snd, 0)
	if err != nil {
		return res, err
	}
	defer sc.close()
	rs, err := sc.openRequests(ctx)
	if err != nil {
		return res, err
	}

	type ack struct {
		t0, t1 time.Time // attempt sent, ack received
		id     proto.MsgID
	}
	var (
		mu     sync.Mutex
		acks   []ack
		resent int
		first  string
	)
	acked := make(chan struct{}, 1) // a signal after every ack
	stop := make(chan struct{})
	sctx, cancel := context.WithTimeout(ctx, 2*steady+2*failoverWait)
	defer cancel()
	payload := make([]byte, 256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			msg := proto.Send{Conv: conv, Peer: rcv, ClientMsgID: run + "-" + strconv.Itoa(n), Body: payload}
			for {
				t0 := time.Now()
				a, out, wait, err := attemptAck(sctx, rs, msg, failoverAttemptTimeout)
				t1 := time.Now()
				if out == outAcked {
					mu.Lock()
					acks = append(acks, ack{t0: t0, t1: t1, id: a.MsgID})
					mu.Unlock()
					select {
					case acked <- struct{}{}:
					default:
					}
					break
				}
				if sctx.Err() != nil {
					return // this message stays unacked: nothing is claimed for it
				}
				mu.Lock()
				resent++
				if first == "" {
					first = fmt.Sprint(err)
				}
				mu.Unlock()
				sleepCtx(sctx, max(wait, 20*time.Millisecond))
			}
		}
	}()
	stopSender := func() {
		close(stop)
		<-done
	}

	sleepCtx(ctx, steady)
	mu.Lock()
	before := len(acks)
	mu.Unlock()
	if before == 0 {
		stopSender()
		return res, fmt.Errorf("bench: failover: no ack in %v before the kill (first error: %s)", steady, first)
	}
	killed := time.Now()
	if err := c.Kill(leader); err != nil {
		stopSender()
		return res, err
	}
	defer func() {
		if res.Restart == 0 {
			if rerr := c.Restart(ctx, leader); rerr != nil {
				err = errors.Join(err, fmt.Errorf("bench: failover: restarting node %d: %w", leader, rerr))
			}
		}
	}()
	timeout := time.After(failoverWait)
	for res.Failover == 0 {
		select {
		case <-acked:
		case <-timeout:
			stopSender()
			return res, fmt.Errorf("bench: failover: no ack within %v of killing node %d (first error: %s)", failoverWait, leader, first)
		case <-ctx.Done():
			stopSender()
			return res, ctx.Err()
		}
		mu.Lock()
		for _, a := range acks[before:] {
			if !a.t0.Before(killed) {
				res.Failover = a.t1.Sub(killed)
				break
			}
		}
		mu.Unlock()
	}
	sleepCtx(ctx, steady)
	stopSender()
	res.Acked, res.Resent, res.FirstError = len(acks), resent, first
	for i := 1; i < len(acks); i++ {
		res.LongestGap = max(res.LongestGap, acks[i].t1.Sub(acks[i-1].t1))
	}

	want := make(map[proto.MsgID]bool, len(acks))
	for _, a := range acks {
		want[a.id] = true
	}
	seen, err := readLog(ctx, c.NodeTarget(res.ReaderNode), rcv, want)
	if err != nil {
		return res, fmt.Errorf("bench: failover: reading %s's log back: %w", rcv, err)
	}
	for id := range want {
		if seen[id] == 0 {
			res.Lost++
		}
	}
	for _, n := range seen {
		if n > 1 {
			res.Duplicates++
		}
	}

	start := time.Now()
	if err := c.Restart(ctx, leader); err != nil {
		res.Restart = -1 // tried: not again in the deferred restart
		return res, fmt.Errorf("bench: failover: restarting node %d: %w", leader, err)
	}
	res.Restart = time.Since(start)
	return res, nil
}

// readLog connects user's device to t, syncs its log from the start and counts the entries of
// every msg_id, until every id in want has been seen or failoverWait has passed (then the
// missing ones are simply absent from the answer). It checks that positions are contiguous.
func readLog(ctx context.Context, t Target, user string, want map[proto.MsgID]bool) (map[proto.MsgID]int, error) {
	dl, err := newDialer(t, 1)
	if err != nil {
		return nil, err
	}
	defer dl.close()
	c, err := dl.connect(ctx, user, 0)
	if err != nil {
		return nil, err
	}
	defer c.close()
	st, r, err := c.syncStream(ctx, &proto.SyncStart{MaxBatch: proto.MaxPage})
	if err != nil {
		return nil, err
	}
	st.SetReadDeadline(time.Now().Add(failoverWait))
	seen := map[proto.MsgID]int{}
	missing := len(want)
	var pos proto.Position
	for missing > 0 {
		f, err := r.Next()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
				return seen, nil
			}
			return seen, err
		}
		switch f := f.(type) {
		case *proto.Batch:
			for _, e := range f.Entries {
				if e.Seq != pos+1 {
					return seen, fmt.Errorf("entry %d after %d", e.Seq, pos)
				}
				pos = e.Seq
				if e.Kind != proto.KindMessage {
					continue
				}
				seen[e.MsgID]++
				if seen[e.MsgID] == 1 && want[e.MsgID] {
					missing--
				}
			}
		case *proto.Error:
			return seen, f
		case *proto.TooOld, *proto.Rebase, *proto.EpochChanged:
			return seen, fmt.Errorf("sync stream answered %v", f.FrameType())
		}
	}
	return seen, nil
}

// isTimeout reports whether err is a read deadline passing.
func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}
