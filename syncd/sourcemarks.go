package syncd

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
)

// Delivered in a large group (docs/ARCHITECTURE.md, "Large groups"). A member's devices follow
// the group's log as a source, so their acks are the delivered step there: the node's sync
// streams note them here, the highest per (group, member), and every DeliveryReportInterval one
// MarkDelivered per group carries them all to the group's shard (op 12: the marks and counts
// move, no entry is written). A crash loses at most one interval of marks, which the devices'
// next acks raise again: the marks are a lower bound the server has proven, never more.

// sourceMarks coalesces the acks of sources taken by this node's sync streams. Safe for
// concurrent use.
type sourceMarks struct {
	mu sync.Mutex
	m  map[string]map[string]log.Position // group → member → highest conv_seq acked
}

// ack notes that user's device acked group's log up to pos.
func (sm *sourceMarks) ack(group, user string, pos log.Position) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	if sm.m == nil {
		sm.m = map[string]map[string]log.Position{}
	}
	users := sm.m[group]
	if users == nil {
		users = map[string]log.Position{}
		sm.m[group] = users
	}
	users[user] = max(users[user], pos)
}

// take returns the marks noted since the last take, per group, and forgets them.
func (sm *sourceMarks) take() map[string]map[string]log.Position {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	m := sm.m
	sm.m = nil
	return m
}

// sourceMarksLoop proposes the marks noted, every DeliveryReportInterval, until ctx ends.
func (s *Server) sourceMarksLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.DeliveryReportInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for group, users := range s.srcMarks.take() {
			s.proposeMarks(ctx, group, users)
		}
	}
}

// proposeMarks proposes group's marks, in requests of at most log.MaxDeliveredMarks; marks that
// could not be proposed for a reason that may pass go back for the next round.
func (s *Server) proposeMarks(ctx context.Context, group string, users map[string]log.Position) {
	ids := slices.Sorted(maps.Keys(users))
	for chunk := range slices.Chunk(ids, log.MaxDeliveredMarks) {
		req := &log.MarkDelivered{Conv: group, Marks: make([]log.MemberMark, len(chunk))}
		for i, u := range chunk {
			req.Marks[i] = log.MemberMark{User: u, UpTo: users[u]}
		}
		res, err := s.node.Propose(ctx, s.slots.ConvShard(group), raftstore.MarkDeliveredCommand(req))
		switch {
		case err == nil && res.Marked > 0:
			s.metrics.deliveryReported(reportAdvanced)
		case err == nil:
			s.metrics.deliveryReported(reportNoop)
		case log.Rejected(err) && !passing(err):
			s.metrics.deliveryReported(reportRefused)
		default:
			s.metrics.deliveryReported(reportError)
			if ctx.Err() == nil {
				for _, m := range req.Marks {
					s.srcMarks.ack(group, m.User, m.UpTo)
				}
			}
		}
	}
}
