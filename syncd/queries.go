package syncd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore"
)

// Queries read a replica of each shard involved — this node's, or another node's (reads.go) —
// prefix-consistent, like sync streams, and show a user only conversations it is a member of
// (G7).

// isQuery reports whether req only reads: ConvList, ConvState, History, Members, HeadCheck,
// Digest, Receipts, Readers.
func isQuery(req proto.Request) bool {
	switch req.(type) {
	case *proto.HeadCheck, *proto.ConvList, *proto.ConvState, *proto.History, *proto.Members, *proto.Digest,
		*proto.Receipts, *proto.Readers:
		return true
	}
	return false
}

// query answers a request for which isQuery holds.
func (ss *session) query(req proto.Request) proto.Frame {
	id := req.RequestID()
	ctx, cancel := context.WithTimeout(context.Background(), ss.s.cfg.RequestTimeout)
	defer cancel()
	var f proto.Frame
	var err error
	switch q := req.(type) {
	case *proto.HeadCheck:
		f, err = ss.headCheck(ctx, q)
	case *proto.ConvList:
		f, err = ss.convList(ctx, q)
	case *proto.ConvState:
		var c proto.ConvInfo
		if c, err = ss.convInfo(ctx, q.Conv); err == nil {
			f = &proto.ConvStateResult{ID: q.ID, Conv: c}
		}
	case *proto.History:
		f, err = ss.history(ctx, q)
	case *proto.Members:
		f, err = ss.members(ctx, q)
	case *proto.Digest:
		f, err = ss.digest(ctx, q)
	case *proto.Receipts:
		f, err = ss.receipts(ctx, q)
	case *proto.Readers:
		f, err = ss.readers(ctx, q)
	default:
		err = proto.Errorf(proto.CodeUnexpectedFrame, "%v is not a query", req.FrameType())
	}
	if err != nil {
		return wireError(ss.s.logger, id, err)
	}
	return f
}

// headCheck answers with the head of the user's log (of every sub-log, for a split user), which
// claims "you have everything up to head" like a heartbeat does; so, like heartbeats (Stale),
// only from a replica holding its lease. One cut off from its shard's leader refuses with
// unavailable and a retry-after instead, and the client asks another node.
func (ss *session) headCheck(ctx context.Context, q *proto.HeadCheck) (proto.Frame, error) {
	logs := ss.s.slots.Logs(ss.user)
	var heads []proto.SubHead
	for _, id := range logs {
		info, err := ss.logHead(ctx, id)
		if err != nil {
			return nil, err
		}
		heads = append(heads, proto.SubHead{Epoch: proto.Epoch(info.Epoch), Head: proto.Position(info.Head), First: proto.Position(info.First)})
	}
	h := &proto.Head{ID: q.ID, Epoch: heads[0].Epoch, Head: heads[0].Head, First: heads[0].First}
	if len(logs) > 1 {
		h.Subs = heads
	}
	return h, nil
}

// logHead returns the epoch, head and first position of the user log id, from a replica that
// holds its lease.
func (ss *session) logHead(ctx context.Context, id string) (log.LogInfo, error) {
	shard := ss.s.slots.UserShard(id)
	state, err := ss.s.reader(ctx, shard)
	if err != nil {
		return log.LogInfo{}, err
	}
	info, lease, err := state.userInfoLeased(id)
	if err != nil {
		return log.LogInfo{}, err
	}
	if !lease.Held {
		return log.LogInfo{}, fmt.Errorf("%w: the replica of shard %d answering has not heard from its leader for %v, so its head may be behind",
			raftstore.ErrNoLeader, shard, lease.Unheard.Round(time.Millisecond))
	}
	return info, nil
}

// convInfo returns conv as this session's user sees it, from the conversation's home shard.
func (ss *session) convInfo(ctx context.Context, conv string) (proto.ConvInfo, error) {
	state, err := ss.s.reader(ctx, ss.s.slots.ConvShard(conv))
	if err != nil {
		return proto.ConvInfo{}, err
	}
	c, err := state.Conversation(conv, ss.user)
	if err != nil {
		return proto.ConvInfo{}, err
	}
	return proto.ConvInfo{Conv: conv, Kind: proto.ConvKind(c.Kind), Epoch: proto.Epoch(c.Info.Epoch),
		First: proto.Position(c.Info.First), Head: proto.Position(c.Info.Head), Members: c.Members,
		ReadMark: proto.Position(c.ReadMark), MemberCount: uint32(c.MemberCount), Role: proto.Role(c.Role),
		DeliveredMark: proto.Position(c.DeliveredMark), PeerDelivered: proto.Position(c.PeerDelivered),
		PeerRead: proto.Position(c.PeerRead), Source: c.Large}, nil
}

// receipts answers how many members of conv had each message delivered and read, from the
// conversation's aggregated marks (log.Shard.Receipts): never a scan of its members.
func (ss *session) receipts(ctx context.Context, q *proto.Receipts) (proto.Frame, error) {
	state, err := ss.s.reader(ctx, ss.s.slots.ConvShard(q.Conv))
	if err != nil {
		return nil, err
	}
	seqs := make([]log.Position, len(q.Seqs))
	for i, p := range q.Seqs {
		seqs[i] = log.Position(p)
	}
	counts, err := state.Receipts(q.Conv, ss.user, seqs)
	if err != nil {
		return nil, err
	}
	res := &proto.ReceiptsResult{ID: q.ID, Counts: make([]proto.ReceiptCount, len(counts))}
	for i, c := range counts {
		res.Counts[i] = proto.ReceiptCount{ConvSeq: proto.Position(c.ConvSeq), Members: uint32(c.Members),
			Delivered: uint32(c.Delivered), Read: uint32(c.Read)}
	}
	return res, nil
}

// readers pages the members of conv who had a message delivered or read. One page scans a
// bounded number of members (log.MaxReadersScan), so it may come back short, or empty, with More
// set: the client continues from Next.
func (ss *session) readers(ctx context.Context, q *proto.Readers) (proto.Frame, error) {
	state, err := ss.s.reader(ctx, ss.s.slots.ConvShard(q.Conv))
	if err != nil {
		return nil, err
	}
	users, next, more, err := state.Readers(q.Conv, ss.user, log.Position(q.ConvSeq), log.Kind(q.State), q.After, ss.pageLimit(q.Limit))
	if err != nil {
		return nil, err
	}
	return &proto.ReadersResult{ID: q.ID, Users: users, Next: next, More: more}, nil
}

// members pages conv's members, for a member of it.
func (ss *session) members(ctx context.Context, q *proto.Members) (proto.Frame, error) {
	state, err := ss.s.reader(ctx, ss.s.slots.ConvShard(q.Conv))
	if err != nil {
		return nil, err
	}
	limit := proto.MaxPage
	if q.Limit > 0 {
		limit = min(int(q.Limit), limit)
	}
	page, more, err := state.MembersAfter(q.Conv, ss.user, q.After, limit)
	if err != nil {
		return nil, err
	}
	res := &proto.MembersResult{ID: q.ID, More: more, Members: make([]proto.Member, len(page))}
	for i, m := range page {
		res.Members[i] = proto.Member{User: m.User, Role: proto.Role(m.Role)}
	}
	return res, nil
}

// convList pages through the conversations whose entries reached the user's log, skipping those
// the user has left. A page ends at the limit or where the next conversation would not fit the
// frame (packed by encoded size, pack.go).
func (ss *session) convList(ctx context.Context, q *proto.ConvList) (proto.Frame, error) {
	limit := ss.pageLimit(q.Limit)
	room, used := ss.s.pageRoom(), 0
	res := &proto.ConvListResult{ID: q.ID}
	for after := q.After; len(res.Convs) < limit; {
		ids, err := ss.userConvs(ctx, after, limit+1)
		if err != nil {
			return nil, err
		}
		for i, conv := range ids {
			if len(res.Convs) == limit {
				res.More = true
				return res, nil
			}
			c, err := ss.convInfo(ctx, conv)
			switch {
			case err == nil:
				if used += c.EncodedLen(); used > room && len(res.Convs) > 0 {
					res.More = true // the next page starts with conv
					return res, nil
				}
				res.Convs = append(res.Convs, c)
			case errors.Is(err, log.ErrNotMember):
				// left or removed: not listed
			default:
				return nil, err
			}
			after = ids[i]
		}
		if len(ids) <= limit {
			return res, nil
		}
	}
	return res, nil
}

// userConvs returns up to limit ids of the conversations whose entries reached the user's log,
// after after, ascending. A split user's are those of every sub-log, merged: a conversation's
// entries before the split are in the user's own log and later ones in its sub-log.
func (ss *session) userConvs(ctx context.Context, after string, limit int) ([]string, error) {
	var out []string
	for _, id := range ss.s.slots.Logs(ss.user) {
		state, err := ss.s.reader(ctx, ss.s.slots.UserShard(id))
		if err != nil {
			return nil, err
		}
		ids, err := state.UserConvs(id, after, limit)
		if err != nil {
			return nil, err
		}
		out = append(out, ids...)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	return out[:min(len(out), limit)], nil
}

// history pages a conversation backwards from before (0 = the head).
func (ss *session) history(ctx context.Context, q *proto.History) (proto.Frame, error) {
	c, err := ss.convInfo(ctx, q.Conv) // also checks membership
	if err != nil {
		return nil, err
	}
	before := log.Position(q.Before)
	if before == 0 {
		before = log.Position(c.Head) + 1
	}
	state, err := ss.s.reader(ctx, ss.s.slots.ConvShard(q.Conv))
	if err != nil {
		return nil, err
	}
	room := ss.s.pageRoom()
	r, err := state.ReadConvBefore(q.Conv, before, log.Limit{Count: ss.pageLimit(q.Limit), Bytes: room})
	if err != nil {
		return nil, err
	}
	res := &proto.HistoryResult{ID: q.ID, Epoch: proto.Epoch(r.Info.Epoch), First: proto.Position(r.Info.First),
		Head: proto.Position(r.Info.Head)}
	if len(r.Entries) > 0 {
		res.Entries = packBackward(r.Entries, room) // the newest that fit: the page still ends at before-1
	}
	return res, nil
}

// pageLimit applies the server's page cap to a requested size (0 = the cap).
func (ss *session) pageLimit(n uint32) int {
	limit := int(ss.s.cfg.Limits.MaxBatch)
	if n > 0 && int(n) < limit {
		limit = int(n)
	}
	return limit
}
