package raftstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// HandOver transfers the leadership of every group this node leads — each shard's and the meta
// group's — to another voter of the group, and returns once every transfer has ended or ctx
// has. A node stopping on purpose (SIGTERM) calls it first: its groups then have a new leader
// within a round trip or two, where a node that simply stops leaves them leaderless until the
// followers' election timeout (about 1.2 s of stalled writes with the LAN timings). A group with
// no other voter keeps its leader. It returns how many transfers succeeded, and the failed ones'
// errors; a failure is harmless (the group elects a leader after this node stops, as after a
// crash). The node keeps serving throughout: proposals that meet a transfer are refused as
// during any leadership change, and forwarded or retried by their callers.
//
// Each transfer goes to the voter hashicorp/raft picks, the most up-to-date follower. The
// transfers of one node run concurrently; one whose future is still pending when ctx ends is
// left to Close, whose shutdown of the group ends it.
func (n *Node) HandOver(ctx context.Context) (handed int, err error) {
	type group struct {
		name string
		raft *raft.Raft
	}
	var leading []group
	for _, r := range *n.shards.Load() {
		if leadsWithPeers(r.raft) {
			leading = append(leading, group{fmt.Sprintf("shard %d", r.id), r.raft})
		}
	}
	if g := n.meta.Load(); g != nil && leadsWithPeers(g.rg.raft) {
		leading = append(leading, group{"the meta group", g.rg.raft})
	}
	if len(leading) == 0 {
		return 0, nil
	}
	type result struct {
		name string
		err  error
	}
	results := make(chan result, len(leading)) // buffered: a transfer ending after ctx does not block
	for _, g := range leading {
		f := g.raft.LeadershipTransfer()
		go func() { results <- result{g.name, f.Error()} }()
	}
	var errs []error
	for range leading {
		select {
		case res := <-results:
			if res.err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", res.name, res.err))
			} else {
				handed++
			}
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("raftstore: handing over %d groups: %w", len(leading)-handed-len(errs), ctx.Err()))
			return handed, errors.Join(errs...)
		}
	}
	return handed, errors.Join(errs...)
}

// leadsWithPeers reports whether rg leads its group and the group has another voter to take over.
func leadsWithPeers(rg *raft.Raft) bool {
	if rg.State() != raft.Leader {
		return false
	}
	f := rg.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	voters := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	return voters > 1
}
