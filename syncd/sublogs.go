package syncd

import (
	"context"
	"fmt"
	"sync"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd/tracing"
)

// Sub-logs on the sync stream (docs/PROTOCOL.md, "Sub-logs"). A user whose stream an operator
// split has k sub-logs, each an ordinary user log (log.SubLog); one sync stream serves all of
// them at once, each from its own cursor of the client's vector cursor, its frames naming it
// (sub). A user whose stream is not split has one, the user's own log, which a client that
// sends no vector cursor gets as before.
//
// The gate: a conversation's entries before the split are in the user's own log, its later ones
// in its sub-log. So that they reach the device in order, no sub-log but the first sends
// anything before the stream has sent the own log up to the split's gate (cluster.SplitInfo),
// where every entry routed there before the split is.

// subLog is one sub-log of the user's stream as a sync stream serves it: a user log of its own
// (the user's, or log.SubLog(user, i)), with its own cursor, ack bound and cursor store.
type subLog struct {
	id      string // the user log
	sub     uint32 // its index in the stream, the frames' sub
	from    log.Cursor
	bound   *ackBound
	cursors *cursorStore
	clock   *ackClock          // when the entries pushed live were appended, until the device acks them
	own     *ownProgress       // how far the stream has sent sub-log 0: reported by it, waited on behind a gate
	sent    *ownProgress       // how far the stream has sent this log (own, for sub-log 0): the gates of sources wait on it
	gate    *cluster.SplitInfo // the split's gate, for every sub-log but the first; nil: none
	// set is the stream's sources (sources.go): a sub-log tells it the entries marked Source it
	// sends. src, for a large group's conversation log the stream follows as a source, is the
	// user's periods there; nil for a sub-log.
	set *sourceSet
	src *source
	// mapChanged, for sub-log 0, closes when the cluster map changes, and then its loop calls
	// regroup (which takes the next one): a split made while the stream is open is found without
	// a goroutine or a timer per stream. Both nil for the other sub-logs.
	mapChanged <-chan struct{}
	regroup    func() proto.Frame
	// traced holds the traced pushes of this log until the device acks them (syncd/tracing):
	// the device-ack spans. Empty when tracing is off.
	traced tracing.Acks
}

// mapChange is sub-log 0's reaction to a change of the cluster map (nil for the others): the
// frame that ends the stream, if the change does.
func (sl *subLog) mapChange() proto.Frame {
	select {
	case <-sl.mapChanged:
		return sl.regroup()
	default:
		return nil
	}
}

// ownProgress is how far a sync stream has sent a log: the user's own log (sub-log 0), which the
// split's gate is checked against, or any sub-log, which the gates of its sources are. Safe for
// concurrent use.
type ownProgress struct {
	mu      sync.Mutex
	epoch   log.Epoch // of the log, once read (0 before)
	pos     log.Position
	changed chan struct{} // closed at the next report, for the waiters (nil: none waits)
}

// report records that the stream has sent the own log, of epoch, up to pos (or found it caught
// up there).
func (p *ownProgress) report(epoch log.Epoch, pos log.Position) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.epoch, p.pos = epoch, pos
	if p.changed != nil {
		close(p.changed)
		p.changed = nil
	}
}

// wait waits until the stream has sent the own log up to gate (or the log is of another epoch
// than the gate's: reset since, nothing is behind the gate), and reports false if ctx ended
// first.
func (p *ownProgress) wait(ctx context.Context, gate cluster.SplitInfo) bool {
	if gate.Gate == 0 { // nothing was before the split
		return true
	}
	return p.until(ctx, func() bool { return p.epoch != 0 && (uint64(p.epoch) != gate.Epoch || uint64(p.pos) >= gate.Gate) })
}

// reached waits until the stream has sent the log up to pos, and reports false if ctx ended
// first.
func (p *ownProgress) reached(ctx context.Context, pos log.Position) bool {
	return p.until(ctx, func() bool { return p.pos >= pos })
}

// until waits until passed, called with p.mu held, holds after a report, and reports false if
// ctx ended first.
func (p *ownProgress) until(ctx context.Context, passed func() bool) bool {
	for {
		p.mu.Lock()
		ok := passed()
		if p.changed == nil {
			p.changed = make(chan struct{})
		}
		changed := p.changed
		p.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}

// subLogSet is the sub-logs a sync stream serves; the sub-logs of a split made while the stream
// is open are added to it. Safe for concurrent use. sources are the large groups it follows.
type subLogSet struct {
	mu      sync.Mutex
	list    []*subLog
	sources *sourceSet
}

// get returns sub-log i, or nil if the stream has no such sub-log.
func (s *subLogSet) get(i int) *subLog {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i < 0 || i >= len(s.list) {
		return nil
	}
	return s.list[i]
}

func (s *subLogSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.list)
}

// grow adds the sub-logs from the stream's count up to split's, from no cursor (a sub-log a
// client has not heard of has given it nothing), and returns them.
func (s *subLogSet) grow(ss *session, split cluster.SplitInfo) []*subLog {
	s.mu.Lock()
	defer s.mu.Unlock()
	var added []*subLog
	for i := len(s.list); i < split.Subs; i++ {
		sl := ss.newSubLog(i, log.Cursor{}, s.list[0].own)
		sl.gate, sl.set = &split, s.sources
		added = append(added, sl)
	}
	s.list = append(s.list, added...)
	return added
}

// close stores every sub-log's newest cursor one last time (cursorStore.close).
func (s *subLogSet) close() {
	s.mu.Lock()
	list := s.list
	s.mu.Unlock()
	for _, sl := range list {
		sl.cursors.close()
	}
}

func (ss *session) newSubLog(i int, from log.Cursor, own *ownProgress) *subLog {
	id := log.SubLog(ss.user, i)
	sent := own
	if i > 0 {
		sent = &ownProgress{}
	}
	return &subLog{id: id, sub: uint32(i), from: from, bound: &ackBound{c: from}, cursors: &cursorStore{ss: ss, log: id},
		clock: &ackClock{}, own: own, sent: sent}
}

// subLogs returns the sub-logs a sync stream from start serves: the user's own log, or for a
// user whose stream is split, every sub-log, from the vector cursor (start.Subs). The frame it
// returns instead ends the stream: a split user's stream asked for without a vector cursor
// (needs_upgrade), or a vector cursor longer than the stream.
func (ss *session) subLogs(start *proto.SyncStart) (*subLogSet, proto.Frame) {
	mapChanged := ss.s.slots.Replaced() // before the split is read: a later one closes it
	split, isSplit := ss.s.slots.Split(ss.user)
	n := 1
	if isSplit {
		n = split.Subs
		if start.Subs == nil {
			return &subLogSet{}, ss.needsUpgrade(n)
		}
	}
	if len(start.Subs) > n {
		return &subLogSet{}, &proto.Error{Code: proto.CodeInvalidArgument, Message: fmt.Sprintf(
			"a vector cursor of %d sub-logs: user %s's stream has %d", len(start.Subs), ss.user, n)}
	}
	own := &ownProgress{}
	set := &subLogSet{sources: newSourceSet()}
	for i := range n {
		from := log.Cursor{Epoch: log.Epoch(start.Epoch), Pos: log.Position(start.Pos)}
		if i > 0 {
			from = log.Cursor{}
			if i < len(start.Subs) {
				from = log.Cursor{Epoch: log.Epoch(start.Subs[i].Epoch), Pos: log.Position(start.Subs[i].Pos)}
			}
		}
		sl := ss.newSubLog(i, from, own)
		sl.set = set.sources
		if i > 0 {
			sl.gate = &split
		}
		set.list = append(set.list, sl)
	}
	set.list[0].mapChanged = mapChanged
	return set, nil
}

// needsUpgrade is the answer to a client without a vector cursor whose user's stream is split
// into n sub-logs.
func (ss *session) needsUpgrade(n int) *proto.Error {
	return &proto.Error{Code: proto.CodeNeedsUpgrade, Message: fmt.Sprintf(
		"user %s's stream is split into %d sub-logs: sync them with a vector cursor (sync_start subs, protocol revision 3)", ss.user, n)}
}
