package syncd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/peer"
)

// Reads of shards this node does not host. In a managed cluster a node holds replicas of only
// some shards, but a device may connect to any node: its sync stream and queries then read a
// replica on another node, through the call plane (syncd/peer), the same way they read a local
// one — prefix-consistent reads of a replica, so contiguity and the G3 answers hold unchanged.

// replica is one shard's replica as sessions read it, wherever it is: this node's (localReplica)
// or another node's, through the call plane (remoteReader). It answers every read alike. The
// reads that also say how current the replica is, and how a caught-up reader waits for more —
// where a local and a remote replica differ — are answered here, so that no caller asks which
// one it holds.
type replica interface {
	UserInfo(uid string) (log.LogInfo, error)
	Conversation(conv, uid string) (log.ConvState, error)
	UserConvs(uid, after string, limit int) ([]string, error)
	MembersAfter(conv, uid, after string, limit int) ([]log.Member, bool, error)
	Receipts(conv, uid string, seqs []log.Position) ([]log.ReceiptCount, error)
	Readers(conv, uid string, seq log.Position, state log.Kind, after string, limit int) ([]string, string, bool, error)
	UserGroups(uids []string) ([]int, error)
	ReadConvBefore(conv string, before log.Position, lim log.Limit) (log.Read, error)
	ReadConv(conv string, epoch log.Epoch, from log.Position, lim log.Limit) (log.Read, error)
	ReadUser(uid string, epoch log.Epoch, from log.Position, lim log.Limit) (log.Read, error)
	Follows(uid string) ([]log.Follow, error)

	// userInfoLeased returns user log uid's info and the answering replica's lease.
	userInfoLeased(uid string) (log.LogInfo, raftstore.Lease, error)
	// followUser reads user log uid from from into batch (at most room bytes), for a sync
	// stream: a local replica at once, a remote one as a long poll of up to wait. The answer
	// says how current the replica was and when to read again (liveRead).
	followUser(uid string, epoch log.Epoch, from log.Position, lim log.Limit, wait time.Duration, batch *syncBatch, room int) (liveRead, error)
	// followConv reads conversation log conv from from, for a sync stream following it as a
	// source, as followUser does; the entries are the caller's to cut and add to its batch.
	followConv(conv string, epoch log.Epoch, from log.Position, lim log.Limit, wait time.Duration) (liveRead, error)
}

// liveRead is one read of a log by a sync stream, with how current the replica read is.
type liveRead struct {
	res     log.Read
	lease   raftstore.Lease // of the replica read, as of just before the read
	wake    <-chan struct{} // closed when the log may have grown since
	leaseCh <-chan struct{} // closed when the lease may have changed since (nil: see wake)
}

// reader returns shard's local replica if this node hosts one, else a reader of a replica on a
// node that does.
func (s *Server) reader(ctx context.Context, shard raftstore.ShardID) (replica, error) {
	state, err := s.node.State(shard)
	if err == nil {
		return &localReplica{Shard: state, s: s, shard: shard}, nil
	}
	if !errors.Is(err, raftstore.ErrNoShard) {
		return nil, err
	}
	return &remoteReader{peer: s.peer, ctx: ctx, shard: shard}, nil
}

// localReplica is this node's replica of a shard: its reads are the state's own. A follower's
// wake comes from the notifier and its lease from the replica (raftstore.Node.WatchLease), both
// taken before the read, so that a change after it wakes the stream.
type localReplica struct {
	*log.Shard
	s     *Server
	shard raftstore.ShardID
}

func (r *localReplica) userInfoLeased(uid string) (log.LogInfo, raftstore.Lease, error) {
	l, _, err := r.s.node.WatchLease(r.shard)
	if err != nil {
		return log.LogInfo{}, l, err
	}
	info, err := r.UserInfo(uid)
	return info, l, err
}

func (r *localReplica) followUser(uid string, epoch log.Epoch, from log.Position, lim log.Limit, _ time.Duration, batch *syncBatch, room int) (liveRead, error) {
	wake := r.s.notes.wait(r.shard, uid) // before reading, so an append after the read wakes us
	l, leaseCh, err := r.s.node.WatchLease(r.shard)
	if err != nil {
		return liveRead{}, err // the replica went away (moved): the device resyncs elsewhere
	}
	res, err := batch.readInto(r, uid, epoch, from, lim, room)
	return liveRead{res: res, lease: l, wake: wake, leaseCh: leaseCh}, err
}

// followConv reads through the node's source cache: the followers of the group on this node
// woken by the same append share one read of it (sourcecache.go), whose freshness is checked
// against the wake channel taken here.
func (r *localReplica) followConv(conv string, epoch log.Epoch, from log.Position, lim log.Limit, _ time.Duration) (liveRead, error) {
	out := liveRead{wake: r.s.notes.waitConv(r.shard, conv)} // before reading, so an append after the read wakes us
	var err error
	if out.lease, out.leaseCh, err = r.s.node.WatchLease(r.shard); err != nil {
		return liveRead{}, err
	}
	out.res, err = r.s.notes.cache.read(r, r.shard, conv, epoch, from, lim, out.wake)
	return out, err
}

// remoteReader reads a shard through the nodes that host it, as the cluster map lists them.
type remoteReader struct {
	peer  *peer.Peer
	ctx   context.Context
	shard raftstore.ShardID
	last  string // the node that answered last, asked first next time

	// Of the last read of a user log that was answered (readUserWait): the answering replica's
	// lease, the log it found and when, for a stream that cannot reach any replica afterwards.
	lease  raftstore.Lease
	info   log.LogInfo
	readAt time.Time
}

func (r *remoteReader) call(op peer.Op, args peer.ReadArgs) (peer.ReadAnswer, error) {
	var a peer.ReadAnswer
	id, err := r.peer.Remote(r.ctx, r.shard, op, args, &a, r.last)
	if err == nil {
		r.last = id
	}
	return a, err
}

func (r *remoteReader) UserInfo(uid string) (log.LogInfo, error) {
	info, _, err := r.userInfoLeased(uid)
	return info, err
}

// userInfoLeased is UserInfo with the answering replica's lease.
func (r *remoteReader) userInfoLeased(uid string) (log.LogInfo, raftstore.Lease, error) {
	a, err := r.call(peer.OpUserInfo, peer.ReadArgs{UID: uid})
	return a.Info.Log(), raftstore.Lease{Held: !a.Stale, Unheard: time.Duration(a.UnheardMS) * time.Millisecond}, err
}

func (r *remoteReader) Conversation(conv, uid string) (log.ConvState, error) {
	a, err := r.call(peer.OpConversation, peer.ReadArgs{Conv: conv, UID: uid})
	return a.Conv.Log(), err
}

func (r *remoteReader) UserConvs(uid, after string, limit int) ([]string, error) {
	a, err := r.call(peer.OpUserConvs, peer.ReadArgs{UID: uid, After: after, Count: limit})
	return a.IDs, err
}

func (r *remoteReader) MembersAfter(conv, uid, after string, limit int) ([]log.Member, bool, error) {
	a, err := r.call(peer.OpMembers, peer.ReadArgs{Conv: conv, UID: uid, After: after, Count: limit})
	page := make([]log.Member, len(a.Members))
	for i, m := range a.Members {
		page[i] = log.Member{User: m.User, Role: log.Role(m.Role)}
	}
	return page, a.More, err
}

func (r *remoteReader) Receipts(conv, uid string, seqs []log.Position) ([]log.ReceiptCount, error) {
	args := peer.ReadArgs{Conv: conv, UID: uid, Seqs: make([]uint64, len(seqs))}
	for i, q := range seqs {
		args.Seqs[i] = uint64(q)
	}
	a, err := r.call(peer.OpReceipts, args)
	if err == nil && len(a.Receipts) != len(seqs) {
		err = fmt.Errorf("%w: %d receipt counts for %d positions", peer.ErrFormat, len(a.Receipts), len(seqs))
	}
	counts := make([]log.ReceiptCount, len(a.Receipts))
	for i, c := range a.Receipts {
		counts[i] = log.ReceiptCount{ConvSeq: log.Position(c.ConvSeq), Members: c.Members, Delivered: c.Delivered, Read: c.Read}
	}
	return counts, err
}

func (r *remoteReader) Readers(conv, uid string, seq log.Position, state log.Kind, after string, limit int) ([]string, string, bool, error) {
	a, err := r.call(peer.OpReaders, peer.ReadArgs{Conv: conv, UID: uid, Pos: uint64(seq), State: uint8(state), After: after, Count: limit})
	return a.IDs, a.Next, a.More, err
}

func (r *remoteReader) UserGroups(uids []string) ([]int, error) {
	a, err := r.call(peer.OpUserGroups, peer.ReadArgs{UIDs: uids})
	if err == nil && len(a.Counts) != len(uids) {
		err = fmt.Errorf("%w: %d group counts for %d users", peer.ErrFormat, len(a.Counts), len(uids))
	}
	return a.Counts, err
}

func (r *remoteReader) ReadConvBefore(conv string, before log.Position, lim log.Limit) (log.Read, error) {
	a, err := r.call(peer.OpReadConvBefore, peer.ReadArgs{Conv: conv, Pos: uint64(before)}.WithLimit(lim))
	return a.Read.Log(), err
}

func (r *remoteReader) ReadUser(uid string, epoch log.Epoch, from log.Position, lim log.Limit) (log.Read, error) {
	a, err := r.call(peer.OpReadUser, peer.ReadArgs{UID: uid, Epoch: uint64(epoch), Pos: uint64(from)}.WithLimit(lim))
	return a.Read.Log(), err
}

func (r *remoteReader) Follows(uid string) ([]log.Follow, error) {
	a, err := r.call(peer.OpFollows, peer.ReadArgs{UID: uid})
	return peer.LogFollows(a.Follows), err
}

// readUserWait reads like ReadUser, but a remote replica that is caught up waits up to wait for
// the log to grow before it answers: a long poll, so a proxied sync stream gets new entries as
// soon as the replica applies them.
//
// It also returns the answering replica's lease. When no replica can be reached
// (raftstore.ErrUnreachable) after one was, it answers "caught up" at the head last read, with a
// lease that is not held and counts from that read, and reached false: a sync stream then says it
// is stale rather than end, and tries again a little later.
func (r *remoteReader) readUserWait(uid string, epoch log.Epoch, from log.Position, lim log.Limit, wait time.Duration) (rd log.Read, l raftstore.Lease, reached bool, err error) {
	return r.readWait(peer.OpReadUserWait, peer.ReadArgs{UID: uid, Epoch: uint64(epoch), Pos: uint64(from), WaitMS: wait.Milliseconds()}.WithLimit(lim))
}

// readConvWait is readUserWait for a large group's conversation log, which a sync stream follows
// as a source.
func (r *remoteReader) readConvWait(conv string, epoch log.Epoch, from log.Position, lim log.Limit, wait time.Duration) (rd log.Read, l raftstore.Lease, reached bool, err error) {
	return r.readWait(peer.OpReadConvWait, peer.ReadArgs{Conv: conv, Epoch: uint64(epoch), Pos: uint64(from), WaitMS: wait.Milliseconds()}.WithLimit(lim))
}

// followUser is a long poll (readUserWait): the answer comes with the replica's lease, and
// there is nothing to wait for before asking again, unless no replica could be reached: then the
// next try waits a little (up to a second), so that a stream does not ask again in a loop.
func (r *remoteReader) followUser(uid string, epoch log.Epoch, from log.Position, lim log.Limit, wait time.Duration, batch *syncBatch, room int) (liveRead, error) {
	res, l, reached, err := r.readUserWait(uid, epoch, from, lim, wait)
	batch.take(&res, room)
	return liveRead{res: res, lease: l, wake: r.nextTry(reached, wait)}, err
}

func (r *remoteReader) followConv(conv string, epoch log.Epoch, from log.Position, lim log.Limit, wait time.Duration) (liveRead, error) {
	res, l, reached, err := r.readConvWait(conv, epoch, from, lim, wait)
	return liveRead{res: res, lease: l, wake: r.nextTry(reached, wait)}, err
}

// nextTry returns when a follower of a remote replica reads again: at once after a long poll
// that reached a replica, else after up to a second.
func (r *remoteReader) nextTry(reached bool, wait time.Duration) <-chan struct{} {
	if reached {
		return closedChan
	}
	return after(min(wait, time.Second))
}

// closedChan is a closed channel: a wait on it returns at once.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// after returns a channel closed once d has passed, without a goroutine.
func after(d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(d, func() { close(ch) })
	return ch
}

func (r *remoteReader) readWait(op peer.Op, args peer.ReadArgs) (rd log.Read, l raftstore.Lease, reached bool, err error) {
	a, err := r.call(op, args)
	if errors.Is(err, raftstore.ErrUnreachable) && !r.readAt.IsZero() {
		return log.Read{Status: log.ReadCaughtUp, Info: r.info}, raftstore.Lease{Unheard: time.Since(r.readAt) + r.lease.Unheard}, false, nil
	}
	if err != nil {
		return log.Read{}, raftstore.Lease{}, false, err
	}
	rd = a.Read.Log()
	r.lease = raftstore.Lease{Held: !a.Stale, Unheard: time.Duration(a.UnheardMS) * time.Millisecond}
	r.info, r.readAt = rd.Info, time.Now()
	return rd, r.lease, true, nil
}

// withLease returns a with the lease of this node's replica of shard as l says (see
// peer.ReadAnswer.Stale).
func withLease(a peer.ReadAnswer, l raftstore.Lease) peer.ReadAnswer {
	if !l.Held {
		a.Stale, a.UnheardMS = true, max(l.Unheard.Milliseconds(), 1)
	}
	return a
}

// handleReads registers the answers to other nodes' reads of a replica hosted here.
func (s *Server) handleReads(p *peer.Peer) {
	read := func(op peer.Op, f func(ctx context.Context, state *log.Shard, shard raftstore.ShardID, a peer.ReadArgs) (peer.ReadAnswer, error)) {
		p.Handle(op, func(ctx context.Context, state *log.Shard, req peer.Request) (any, error) {
			var a peer.ReadArgs
			if err := req.Decode(&a); err != nil {
				return nil, err
			}
			return f(ctx, state, req.Shard, a)
		})
	}
	read(peer.OpUserInfo, func(_ context.Context, state *log.Shard, shard raftstore.ShardID, a peer.ReadArgs) (peer.ReadAnswer, error) {
		l, _, _ := s.node.WatchLease(shard)
		info, err := state.UserInfo(a.UID)
		return withLease(peer.ReadAnswer{Info: peer.FromLogInfo(info)}, l), err
	})
	read(peer.OpConversation, func(_ context.Context, state *log.Shard, _ raftstore.ShardID, a peer.ReadArgs) (peer.ReadAnswer, error) {
		c, err := state.Conversation(a.Conv, a.UID)
		return peer.ReadAnswer{Conv: peer.FromConvState(c)}, err
	})
	read(peer.OpUserConvs, func(_ context.Context, state *log.Shard, _ raftstore.ShardID, a peer.ReadArgs) (peer.ReadAnswer, error) {
		ids, err := state.UserConvs(a.UID, a.After, a.ConvCount())
		return peer.ReadAnswer{IDs: ids}, err
	})
	read(peer.OpMembers, func(_ context.Context, state *log.Shard, _ raftstore.ShardID, a peer.ReadArgs) (peer.ReadAnswer, error) {
		page, more, err := state.MembersAfter(a.Conv, a.UID, a.After, max(a.ConvCount(), 1))
		ans := peer.ReadAnswer{More: more, Members: make([]peer.Member, len(page))}
		for i, m := range page {
			ans.Members[i] = peer.Member{User: m.User, Role: uint8(m.Role)}
		}
		return ans, err
	})
	read(peer.OpReceipts, func(_ context.Context, state *log.Shard, _ raftstore.ShardID, a peer.ReadArgs) (peer.ReadAnswer, error) {
		seqs := make([]log.Position, len(a.Seqs))
		for i, q := range a.Seqs {
			seqs[i] = log.Position(q)
		}
		counts, err := state.Receipts(a.Conv, a.UID, seqs) // refuses more than log.MaxReceiptSeqs
		ans := peer.ReadAnswer{Receipts: make([]peer.ReceiptCount, len(counts))}
		for i, c := range counts {
			ans.Receipts[i] = peer.ReceiptCount{ConvSeq: uint64(c.ConvSeq), Members: c.Members, Delivered: c.Delivered, Read: c.Read}
		}
		return ans, err
	})
	read(peer.OpReaders, func(_ context.Context, state *log.Shard, _ raftstore.ShardID, a peer.ReadArgs) (peer.ReadAnswer, error) {
		ids, next, more, err := state.Readers(a.Conv, a.UID, log.Position(a.Pos), log.Kind(a.State), a.After, max(a.ConvCount(), 1))
		return peer.ReadAnswer{IDs: ids, Next: next, More: more}, err
	})
	read(peer.OpUserGroups, func(_ context.Context, state *log.Shard, _ raftstore.ShardID, a peer.ReadArgs) (peer.ReadAnswer, error) {
		if len(a.UIDs) > peer.MaxReadCount {
			return peer.ReadAnswer{}, fmt.Errorf("%w: %d users, at most %d", peer.ErrFormat, len(a.UIDs), peer.MaxReadCount)
		}
		counts, err := state.UserGroups(a.UIDs)
		return peer.ReadAnswer{Counts: counts}, err
	})
	read(peer.OpReadConvBefore, func(_ context.Context, state *log.Shard, _ raftstore.ShardID, a peer.ReadArgs) (peer.ReadAnswer, error) {
		rd, err := state.ReadConvBefore(a.Conv, log.Position(a.Pos), a.Limit())
		return peer.ReadAnswer{Read: peer.FromRead(rd)}, err
	})
	read(peer.OpReadUser, func(_ context.Context, state *log.Shard, shard raftstore.ShardID, a peer.ReadArgs) (peer.ReadAnswer, error) {
		l, _, _ := s.node.WatchLease(shard) // a replica gone meanwhile counts as stale
		rd, err := state.ReadUser(a.UID, log.Epoch(a.Epoch), log.Position(a.Pos), a.Limit())
		return withLease(peer.ReadAnswer{Read: peer.FromRead(rd)}, l), err
	})
	read(peer.OpReadUserWait, func(ctx context.Context, state *log.Shard, shard raftstore.ShardID, a peer.ReadArgs) (peer.ReadAnswer, error) {
		return s.readWait(ctx, shard, a, s.notes.wait, state.ReadUser, a.UID)
	})
	read(peer.OpReadConvWait, func(ctx context.Context, state *log.Shard, shard raftstore.ShardID, a peer.ReadArgs) (peer.ReadAnswer, error) {
		return s.readWait(ctx, shard, a, s.notes.waitConv, state.ReadConv, a.Conv)
	})
	read(peer.OpFollows, func(_ context.Context, state *log.Shard, _ raftstore.ShardID, a peer.ReadArgs) (peer.ReadAnswer, error) {
		fs, err := state.Follows(a.UID)
		return peer.ReadAnswer{Follows: peer.FromFollows(fs)}, err
	})
}

// readWait answers a long-polling read of log id of a replica hosted here (OpReadUserWait,
// OpReadConvWait): a replica that is caught up waits up to the arguments' WaitMS for the log to
// grow or its lease to change before it answers.
func (s *Server) readWait(ctx context.Context, shard raftstore.ShardID, a peer.ReadArgs,
	wait func(raftstore.ShardID, string) <-chan struct{},
	read func(string, log.Epoch, log.Position, log.Limit) (log.Read, error), id string) (peer.ReadAnswer, error) {
	wake := wait(shard, id) // before reading, so an append after the read wakes us
	l, leaseCh, _ := s.node.WatchLease(shard)
	rd, err := read(id, log.Epoch(a.Epoch), log.Position(a.Pos), a.Limit())
	if err == nil && rd.Status == log.ReadCaughtUp && a.WaitMS > 0 {
		t := time.NewTimer(time.Duration(min(a.WaitMS, maxReadWait.Milliseconds())) * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-wake:
		case <-leaseCh: // lost or regained: the stream has something to say
		case <-t.C:
		}
		t.Stop()
		l, _, _ = s.node.WatchLease(shard)
		rd, err = read(id, log.Epoch(a.Epoch), log.Position(a.Pos), a.Limit())
	}
	return withLease(peer.ReadAnswer{Read: peer.FromRead(rd)}, l), err
}

// maxReadWait bounds how long a long-polling read holds a replica's answer, whatever the caller
// asks: another node must not be able to park goroutines here indefinitely.
const maxReadWait = 30 * time.Second
