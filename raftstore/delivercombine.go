package raftstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// deliveryCombiner puts the fan-out deliveries proposed to one shard's leader replica at the same
// time — by this node's fan-out and forwarded by the other nodes' — into one Raft entry: one
// combined proposal in flight, and the deliveries that arrive meanwhile go together in the next
// (a DeliverBatchesCommand of all their batches). Every node's fan-out has one delivery in flight
// per destination (syncd/fanout's lanes), so without this a shard led here took up to one entry
// per node and commit, each replicated and fsynced on every member; now it takes one. A lone
// delivery goes through unchanged.
//
// Only deliveries are combined: each of their batches is applied and answered as if alone, so
// joining them changes nothing but the entry count. A proposal whose batches cannot be split is
// proposed alone, for the state machine to refuse as before.
type deliveryCombiner struct {
	mu      sync.Mutex
	queue   []*deliveryReq
	running bool // a goroutine proposes the queue; it ends when it finds the queue empty
}

// deliveryReq is one delivery proposal waiting in a combiner.
type deliveryReq struct {
	ctx     context.Context
	batches [][]byte // the encoded batches of the command
	single  bool     // a DeliverCommand: its answer is Result.Deliver
	taken   bool     // handed to Raft (guarded by the combiner's mu): the answer will come
	done    chan deliveryAnswer
}

type deliveryAnswer struct {
	res Result
	err error
}

// delivers reports whether commands of op are fan-out deliveries, which the leader combines.
func (o op) delivers() bool { return o == opDeliver || o == opDeliverBatches }

// proposeDelivery proposes a delivery command through r's combiner, with proposeLocal's
// contract: ctx bounds the wait to be handed to Raft, after which the outcome is waited for.
func (n *Node) proposeDelivery(ctx context.Context, r *replica, cmd Command) (Result, error) {
	p, err := cmd.payload.MarshalBinary()
	if err != nil {
		return Result{}, err
	}
	req := &deliveryReq{ctx: ctx, single: cmd.op == opDeliver, done: make(chan deliveryAnswer, 1)}
	if req.single {
		req.batches = [][]byte{p}
	} else if req.batches, err = splitDeliveryBatches(p); err != nil {
		return n.proposeLocal(ctx, r, Command{op: cmd.op, payload: rawPayload(p), Time: time.Now().UnixNano()})
	}
	c := &r.deliveries
	c.mu.Lock()
	c.queue = append(c.queue, req)
	start := !c.running
	c.running = true
	c.mu.Unlock()
	if start {
		go n.runDeliveries(r)
	}
	select {
	case a := <-req.done:
		return a.res, a.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	if !req.taken {
		c.queue = deleteReq(c.queue, req)
		c.mu.Unlock()
		return Result{}, fmt.Errorf("%w: %v", ErrTimeout, ctx.Err())
	}
	c.mu.Unlock()
	a := <-req.done // handed off: Raft always answers (commit, leadership lost, shutdown)
	return a.res, a.err
}

func deleteReq(q []*deliveryReq, req *deliveryReq) []*deliveryReq {
	if i := slices.Index(q, req); i >= 0 {
		return slices.Delete(q, i, i+1)
	}
	return q
}

// runDeliveries proposes what is queued in r's combiner, all of it in one proposal, until it
// finds the queue empty.
func (n *Node) runDeliveries(r *replica) {
	c := &r.deliveries
	for {
		c.mu.Lock()
		reqs := c.queue
		c.queue = nil
		if len(reqs) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		for _, q := range reqs {
			q.taken = true
		}
		c.mu.Unlock()
		n.proposeCombined(r, reqs)
	}
}

// proposeCombined proposes the batches of reqs in one Raft entry (a lone DeliverCommand as it
// is) and answers each request. The hand-off may take as long as the latest deadline among them.
func (n *Node) proposeCombined(r *replica, reqs []*deliveryReq) {
	var deadline time.Time
	var all [][]byte
	for _, q := range reqs {
		if dl, ok := q.ctx.Deadline(); ok && dl.After(deadline) {
			deadline = dl
		} else if !ok {
			deadline = time.Now().Add(time.Hour) // no bound asked: Raft's own answer ends it
		}
		all = append(all, q.batches...)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	// The stamp also keeps proposeLocal from handing the combined command back here.
	now := time.Now().UnixNano()
	if len(reqs) == 1 && reqs[0].single {
		res, err := n.proposeLocal(ctx, r, Command{op: opDeliver, payload: rawPayload(all[0]), Time: now})
		reqs[0].done <- deliveryAnswer{res: res, err: err}
		return
	}
	res, err := n.proposeLocal(ctx, r, Command{op: opDeliverBatches, payload: rawPayload(joinDeliveryBatches(all)), Time: now})
	if err == nil && len(res.Deliveries) != len(all) {
		err = fmt.Errorf("raftstore: shard %d: %d outcomes for %d delivery batches", r.id, len(res.Deliveries), len(all))
	}
	for _, q := range reqs {
		if err != nil {
			q.done <- deliveryAnswer{err: err}
			continue
		}
		outs := res.Deliveries[:len(q.batches)]
		res.Deliveries = res.Deliveries[len(q.batches):]
		if q.single {
			q.done <- deliveryAnswer{res: Result{Deliver: outs[0].Result}, err: outs[0].Err}
		} else {
			q.done <- deliveryAnswer{res: Result{Deliveries: outs}}
		}
	}
}
