package raftstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"

	"github.com/syncd-dev/syncd/log"
)

// Node hosts a node's shards: one Pebble store, one Raft listener, and one hashicorp/raft
// instance per shard. It is safe for concurrent use.
type Node struct {
	cfg    Config
	logger *slog.Logger
	db     *pebble.DB
	mux    *Mux
	addr   string // advertised raft address

	// shards maps the shards this node hosts to their replicas. The map is copied on write
	// (under shardsMu) and read without a lock.
	shards    atomic.Pointer[map[ShardID]*replica]
	shardsMu  sync.Mutex
	meta      atomic.Pointer[MetaGroup] // the meta group's member, in a managed cluster (HostMeta)
	balancing sync.Once                 // starts the leader balancing loop once (startBalancing)
	fwd       *forwarder                // proposals this node forwards to leaders elsewhere
	fwdSrv    *fwdServer                // proposals other nodes forward to this one
	// leaderHints maps a shard hosted elsewhere to its leader (a nodeAt) as last reached.
	leaderHints sync.Map

	disk *diskGuard // free space of the store's disk; refuses new writes below the watermark
	lat  *latencies // where writes' time goes (latency.go)

	// balanceBackoff holds the nodes the balancer does not pick as targets for now, after
	// transfers to them failed (balance.go). Only the balance loop uses it.
	balanceBackoff targetBackoff

	checksums  *checksummer  // the background scans of checksum commands (checksum.go)
	mismatches atomic.Uint64 // shard checks that found replicas disagreeing (CheckReplicas)

	stop      chan struct{} // closed by Close: stops the node's own goroutines
	stopCtx   context.Context
	cancelCtx context.CancelFunc // ends stopCtx, with stop
	wg        sync.WaitGroup     // the node's own goroutines (leader balancing, disk checks, leases)
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// replica is this node's member of one shard's Raft group.
type replica struct {
	id    ShardID
	raft  *raft.Raft
	fsm   *fsm
	trans *peerTransport
	logs  *raftLog
	state *log.Shard
	// failedTransfer is the last leadership transfer from this replica that failed, if any
	// (see transferLeadership).
	failedTransfer atomic.Pointer[failedTransfer]
	ls             *leaseState      // how current the replica knows itself to be (lease.go)
	deliveries     deliveryCombiner // fan-out deliveries proposed here, combined (delivercombine.go)
}

// New opens (or creates) the node's store, starts every configured shard and, on first start,
// bootstraps their Raft groups with Config.Peers (or this node alone). It returns once the shards
// are running; leaders may not be elected yet (see WaitLeader).
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	n := &Node{cfg: cfg, logger: cfg.Logger.With("node", cfg.NodeID), stop: make(chan struct{}), lat: newLatencies()}
	n.shards.Store(&map[ShardID]*replica{})
	n.stopCtx, n.cancelCtx = context.WithCancel(context.Background())
	n.checksums = newChecksummer(n.stopCtx)
	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("raftstore: create data dir: %w", err)
	}
	dbDir := filepath.Join(cfg.Dir, "db")
	if err := checkStartSpace(cfg.FS, dbDir, cfg.MinFreeDisk); err != nil {
		return nil, err
	}
	cache := pebble.NewCache(cfg.CacheSize)
	defer cache.Unref()
	db, err := openPebble(dbDir, pebbleOptions(cache, cfg.FS), newPebbleLogger(n.logger))
	if err != nil {
		if vfs.IsNoSpaceError(err) {
			return nil, err // openPebble's error says what to do
		}
		return nil, fmt.Errorf("raftstore: open store in %s (is another syncd using it?): %w", cfg.Dir, err)
	}
	n.db = db
	n.disk = newDiskGuard(cfg.FS, dbDir, cfg.MinFreeDisk, n.logger)
	n.disk.check() // before any shard starts: a node that starts low on space says so at once
	ln, err := net.Listen("tcp", cfg.RaftAddr)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("raftstore: listen for raft on %s (is another syncd running? pick another address): %w",
			cfg.RaftAddr, err), db.Close())
	}
	n.mux = newMux(ln, cfg.TLS, n.logger)
	n.fwd = newForwarder(cfg.TLS, n.logger)
	n.fwdSrv = &fwdServer{node: n, conns: map[net.Conn]struct{}{}}
	n.addr = cfg.AdvertiseAddr
	if n.addr == "" {
		n.addr = ln.Addr().String()
	}
	peers := cfg.Peers
	if peers == nil {
		peers = []Peer{} // bootstrap this node alone
	}
	for _, id := range cfg.Shards {
		if err := n.addReplica(id, peers); err != nil {
			n.Close()
			return nil, err
		}
	}
	n.mux.handleForward(n.fwdSrv.serve)
	n.wg.Add(1)
	go n.leaseLoop()
	if len(cfg.Peers) > 1 {
		n.startBalancing()
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.disk.run(n.stop, cfg.diskCheckEvery, n.shedLeaders)
	}()
	return n, nil
}

// replica returns this node's replica of shard, if it hosts one.
func (n *Node) replica(shard ShardID) (*replica, bool) {
	r, ok := (*n.shards.Load())[shard]
	return r, ok
}

// addReplica starts a replica of shard and adds it to the hosted shards. A replica without state
// bootstraps the shard's Raft group with peers as voters (every node given the same peers does
// the same; an empty list means this node alone); with nil peers it bootstraps nothing and waits
// for the shard's leader to add it (joining an existing group).
func (n *Node) addReplica(id ShardID, peers []Peer) error {
	n.shardsMu.Lock()
	defer n.shardsMu.Unlock()
	if _, ok := n.replica(id); ok {
		return nil
	}
	r, err := n.startReplica(id, peers)
	if err != nil {
		return fmt.Errorf("raftstore: start shard %d: %w", id, err)
	}
	m := maps.Clone(*n.shards.Load())
	m[id] = r
	n.shards.Store(&m)
	return nil
}

func (n *Node) startReplica(id ShardID, peers []Peer) (*replica, error) {
	cfg := n.cfg
	logger := n.logger.With("shard", uint32(id))
	state, err := log.OpenShard(n.db, log.ShardID(id))
	if err != nil {
		return nil, err
	}
	logs, err := newRaftLog(n.db, id)
	if err != nil {
		return nil, err
	}
	files, err := raft.NewFileSnapshotStoreWithLogger(n.snapshotDir(id), 2, newRaftLogger(n.logger, id))
	if err != nil {
		return nil, err
	}
	snaps := &markerSnapshots{SnapshotStore: files, state: state}
	if err := restoreIfInterrupted(state, files, logger); err != nil {
		return nil, err
	}
	f, err := newFSM(state, n.db)
	if err != nil {
		return nil, err
	}
	logs.writeTime, f.applyTime = n.lat.logWrite, n.lat.apply
	f.checksums = newReplicaChecksums(id, n.checksums, logger)
	if app := cfg.App; app != nil {
		f.onApply = func(index uint64) { app.Applied(id, index) }
		f.onLogs = func(t log.Touched) { app.LogsChanged(id, t) }
	}
	rg, err := n.startRaft(id, f, true, snaps, logs, peers)
	if err != nil {
		return nil, err
	}
	return &replica{id: id, raft: rg.raft, fsm: f, trans: rg.trans, logs: logs, state: state, ls: newLeaseState(time.Now())}, nil
}

// raftGroup is this node's member of one Raft group: its raft instance and transport.
type raftGroup struct {
	raft  *raft.Raft
	trans *peerTransport
}

// stopRaft stops this node's member of a Raft group in the order the node's store needs: raft,
// then the heartbeats its transport may still be handling on raft's behalf (peerTransport), then
// its log store, then its connections. The store itself stays open.
func stopRaft(r *raft.Raft, trans *peerTransport, logs *raftLog) error {
	err := r.Shutdown().Error()
	trans.closeHeartbeats()
	logs.closed.Store(true)
	trans.CloseStreams()
	return errors.Join(err, trans.Close())
}

// startRaft starts this node's member of shard id's Raft group over logs and snaps, applying to
// f. persistent says f keeps its own state across restarts (the data shards): raft then does not
// restore the latest snapshot at start. Without existing state, the group is bootstrapped with
// peers as voters (empty: this node alone), or not at all with nil peers (joining a group).
func (n *Node) startRaft(id ShardID, f raft.FSM, persistent bool, snaps raft.SnapshotStore, logs *raftLog, peers []Peer) (*raftGroup, error) {
	cfg := n.cfg
	layer, err := n.mux.Layer(id)
	if err != nil {
		return nil, err
	}
	trans := newShardTransport(layer, n.logger)
	rt := &peerTransport{NetworkTransport: trans, node: n} // what raft dials through

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = newRaftLogger(n.logger, id)
	rc.HeartbeatTimeout = cfg.Timing.HeartbeatTimeout
	rc.ElectionTimeout = cfg.Timing.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.Timing.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.Timing.CommitTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	rc.NoSnapshotRestoreOnStart = persistent // a persistent fsm skips what it has; see fsm.go
	rc.MaxAppendEntries = 256                // larger batches: one Pebble sync and one fsm batch each
	// BatchApplyCh stays off: with a buffered apply channel, Apply after Shutdown enqueues a
	// future nobody resolves. The leader still groups every proposal waiting to be received.
	rc.BatchApplyCh = false

	cached, err := raft.NewLogCache(1024, logs)
	if err != nil {
		trans.Close()
		return nil, err
	}
	has, err := raft.HasExistingState(cached, logs, snaps)
	if err != nil {
		trans.Close()
		return nil, err
	}
	if !has && peers != nil {
		servers := []raft.Server{{ID: rc.LocalID, Address: raft.ServerAddress(n.addr)}}
		if len(peers) > 0 {
			servers = servers[:0]
			for _, p := range peers {
				servers = append(servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
			}
		}
		if err := raft.BootstrapCluster(rc, cached, logs, snaps, rt, raft.Configuration{Servers: servers}); err != nil {
			trans.Close()
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
		n.logger.Debug("bootstrapped shard", "shard", uint32(id), "voters", len(servers))
	}
	r, err := raft.NewRaft(rc, f, cached, logs, snaps, rt)
	if err != nil {
		trans.Close()
		return nil, err
	}
	return &raftGroup{raft: r, trans: rt}, nil
}

// restoreIfInterrupted finishes a snapshot restore that a crash cut short, from the newest
// snapshot in the store, before Raft starts.
func restoreIfInterrupted(state *log.Shard, snaps raft.SnapshotStore, logger *slog.Logger) error {
	need, err := state.NeedsRestore()
	if err != nil || !need {
		return err
	}
	list, err := snaps.List()
	if err != nil {
		return err
	}
	// The newest snapshot with a body: the one being restored was received whole before the
	// restore began (a marker, markerSnapshots, holds no state to restore from).
	i := slices.IndexFunc(list, func(m *raft.SnapshotMeta) bool { return m.Size > 0 })
	if i < 0 {
		return errors.New("an interrupted snapshot restore left the shard incomplete and no snapshot is stored: " +
			"remove this replica's data and re-add the node to the shard")
	}
	_, rc, err := snaps.Open(list[i].ID)
	if err != nil {
		return err
	}
	defer rc.Close()
	logger.Warn("finishing interrupted snapshot restore", "snapshot", list[i].ID, "index", list[i].Index)
	return state.Restore(rc)
}

// knownAddr returns the Raft address of node id from the configured peers or the meta group,
// or "" if neither names it.
func (n *Node) knownAddr(id string) string {
	if id == n.cfg.NodeID {
		return n.addr
	}
	for _, p := range n.cfg.Peers {
		if p.ID == id {
			return p.Addr
		}
	}
	if g := n.meta.Load(); g != nil {
		return g.fsm.Nodes()[id]
	}
	return ""
}

// Placed returns the nodes the meta group places shard on (MetaFSM.Placed): where a replica of
// it should be. None for a node without a meta group.
func (n *Node) Placed(shard ShardID) []Peer {
	if g := n.meta.Load(); g != nil {
		return g.fsm.Placed(shard)
	}
	return nil
}

// dialAddr returns the address to dial peer id at: Config.PeerAddr's override, else addr (its
// address in the Raft configuration).
func (n *Node) dialAddr(id, addr string) string {
	if n.cfg.PeerAddr != nil {
		if o := n.cfg.PeerAddr(id); o != "" {
			return o
		}
	}
	return addr
}

// Addr returns the node's advertised Raft address.
func (n *Node) Addr() string { return n.addr }

// ID returns the node's id.
func (n *Node) ID() string { return n.cfg.NodeID }

// Shards returns the ids of the shards this node hosts, ascending.
func (n *Node) Shards() []ShardID {
	return slices.Sorted(maps.Keys(*n.shards.Load()))
}

// State returns the local replica's state of shard, for reads. Reads are prefix-consistent: they
// see the shard as of this replica's applied index.
func (n *Node) State(shard ShardID) (*log.Shard, error) {
	r, ok := n.replica(shard)
	if !ok {
		return nil, ErrNoShard
	}
	return r.state, nil
}

// Propose replicates cmd in shard and returns its result once a quorum has stored it durably
// and the leader has applied it. A refused command returns the log package's sentinel (for
// example log.ErrConflict) with a zero Result.
//
// A leader low on disk space refuses an AppendCommand with ErrLowDisk (see Config.MinFreeDisk),
// unless it is the resend of one already applied (then the original answer comes back); a node
// low on disk that does not lead the shard forwards it like any other, since the leader's disk is
// the one the entry is accepted on (and such a node hands its leaderships to healthy replicas,
// see shedLeaders).
//
// If this node does not lead the shard, Propose forwards cmd to the node that does and returns
// that node's answer; a forwarded proposal whose outcome is unknown returns ErrUnreachable, as
// does one whose wait outlives this replica's lease (it no longer hears from the leader it
// forwarded to). With no leader known it waits for an election, within ctx, but only while this
// replica holds its lease (or is new): then it returns ErrNoLeader at once, so that a node cut off
// from its shard's group refuses within Timing.StaleAfter instead of at the caller's deadline. The context's deadline bounds the
// hand-off to Raft (ErrTimeout); once handed off, Propose waits for the outcome, which Raft
// always delivers (commit, ErrLeadershipLost or ErrShutdown).
func (n *Node) Propose(ctx context.Context, shard ShardID, cmd Command) (Result, error) {
	r, ok := n.replica(shard)
	if !ok {
		return n.proposeElsewhere(ctx, shard, cmd)
	}
	var err error
	for hop := 0; ; hop++ {
		var res Result
		res, err = n.proposeLocal(ctx, r, cmd)
		var nl *NotLeaderError
		if !errors.As(err, &nl) || hop >= fwdMaxHops {
			return res, err
		}
		leader, local, lerr := n.leaderAddr(ctx, r)
		if lerr != nil {
			return Result{}, lerr
		}
		if local {
			continue // this node was elected meanwhile
		}
		data, eerr := forwardable(cmd)
		if eerr != nil {
			return Result{}, eerr
		}
		fctx, release := n.whileLeased(ctx, r)
		res, err = n.fwd.propose(fctx, leader, shard, data)
		if fctx.Err() != nil && ctx.Err() == nil { // the lease lapsed meanwhile: say so
			err = fmt.Errorf("%w: %v", ErrUnreachable, context.Cause(fctx))
		}
		release()
		if !errors.As(err, &nl) {
			return res, err
		}
		// The leader moved between our look and its answer: look again.
	}
}

// proposeElsewhere forwards cmd for a shard this node hosts no replica of to the nodes the
// meta group places it on, following their leader hints, and remembers where the leader was.
func (n *Node) proposeElsewhere(ctx context.Context, shard ShardID, cmd Command) (Result, error) {
	placed := n.Placed(shard)
	if len(placed) == 0 {
		return Result{}, ErrNoShard
	}
	data, err := forwardable(cmd)
	if err != nil {
		return Result{}, err
	}
	var tries []nodeAt
	if hint, ok := n.leaderHints.Load(shard); ok {
		tries = append(tries, hint.(nodeAt))
	}
	for _, p := range placed {
		tries = append(tries, nodeAt{p.ID, n.dialAddr(p.ID, p.Addr)})
	}
	last := error(ErrNoShard)
	for i := 0; i < len(tries) && i < len(placed)+fwdMaxHops; i++ {
		to := tries[i]
		res, err := n.fwd.propose(ctx, to, shard, data)
		var nl *NotLeaderError
		switch {
		case errors.As(err, &nl) && nl.LeaderID != "":
			hint := nodeAt{nl.LeaderID, n.dialAddr(nl.LeaderID, nl.LeaderAddr)}
			tries = slices.Insert(tries, i+1, hint)
			last = err
		case errors.As(err, &nl), errors.Is(err, ErrUnreachable), errors.Is(err, ErrNoShard):
			last = err // no leader there, or not there: try the next node
		default:
			if err == nil {
				n.leaderHints.Store(shard, to)
			}
			return res, err
		}
		if ctx.Err() != nil {
			break
		}
	}
	n.leaderHints.Delete(shard)
	return Result{}, last
}

// proposeForwarded proposes a command another node forwarded, as this node only: a node that is
// not the leader answers NotLeaderError naming the leader, and never forwards again.
func (n *Node) proposeForwarded(req fwdRequest) (Result, error) {
	ctx := context.Background()
	if req.timeoutMS > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.timeoutMS)*time.Millisecond)
		defer cancel()
	}
	if req.shard == MetaShard {
		g := n.meta.Load()
		if g == nil {
			return Result{}, ErrNoShard
		}
		return Result{}, g.applyLocal(ctx, req.command)
	}
	r, ok := n.replica(req.shard)
	if !ok {
		return Result{}, ErrNoShard
	}
	d, err := decodeCommand(req.command)
	if err != nil {
		return Result{}, err
	}
	// No Time: this node stamps its own clock (decodeFwdRequest refused a command naming one).
	return n.proposeLocal(ctx, r, Command{op: d.op, payload: rawPayload(d.body)})
}

// forwardable encodes cmd for forwarding to the leader: without a proposer time, which the leader
// stamps (and would refuse), whatever cmd.Time says.
func forwardable(cmd Command) ([]byte, error) {
	cmd.Time = 0
	return cmd.encode()
}

// rawPayload is a command payload that is already encoded.
type rawPayload []byte

func (p rawPayload) MarshalBinary() ([]byte, error) { return p, nil }

// leaderAddr returns the node to forward shard r's proposals to, waiting within ctx for an
// election if no leader is known, while leaderWaitOver allows. local reports that this node is
// the leader.
func (n *Node) leaderAddr(ctx context.Context, r *replica) (leader nodeAt, local bool, err error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		a, id := r.raft.LeaderWithID()
		switch {
		case id == raft.ServerID(n.cfg.NodeID):
			return nodeAt{}, true, nil
		case id != "":
			return nodeAt{string(id), n.dialAddr(string(id), string(a))}, false, nil
		}
		if over, l := n.leaderWaitOver(r, time.Now()); over {
			return nodeAt{}, false, fmt.Errorf("%w: shard %d has no known leader, and this replica last heard from one %v ago",
				ErrNoLeader, r.id, l.Unheard.Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return nodeAt{}, false, fmt.Errorf("%w: no leader for shard %d: %v", ErrTimeout, r.id, ctx.Err())
		case <-t.C:
		}
		if n.closed.Load() {
			return nodeAt{}, false, ErrShutdown
		}
	}
}

// proposeLocal proposes cmd to r's Raft instance on this node.
func (n *Node) proposeLocal(ctx context.Context, r *replica, cmd Command) (Result, error) {
	if n.closed.Load() {
		return Result{}, ErrShutdown
	}
	if cmd.Time == 0 && cmd.op.delivers() {
		return n.proposeDelivery(ctx, r, cmd) // one entry per commit for all of them
	}
	if cmd.op.addsData() && n.disk.low() {
		return n.refuseLowDisk(r, cmd)
	}
	if cmd.Time == 0 {
		cmd.Time = time.Now().UnixNano()
	}
	data, err := cmd.encode()
	if err != nil {
		return Result{}, err
	}
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
		if timeout <= 0 {
			return Result{}, ErrTimeout
		}
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrTimeout, err)
	}
	start := time.Now()
	f := r.raft.Apply(data, timeout)
	if err := f.Error(); err != nil {
		return Result{}, n.mapRaftError(r, err)
	}
	since(n.lat.commit, start)
	res, ok := f.Response().(applyResult)
	if !ok {
		return Result{}, fmt.Errorf("raftstore: shard %d: unexpected apply response %T", r.id, f.Response())
	}
	return res.res, res.err
}

// Barrier waits until this node's replica of shard, which must lead it, has applied every entry
// committed before the call (hashicorp/raft's barrier, an entry of its own through the log), and
// returns the index it has applied then: a read of the replica's state afterwards sees every
// write acknowledged before the call, whichever leader acknowledged it. A replica that does not
// lead gives *NotLeaderError.
func (n *Node) Barrier(ctx context.Context, shard ShardID) (uint64, error) {
	r, ok := n.replica(shard)
	if !ok {
		return 0, ErrNoShard
	}
	timeout := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	if err := r.raft.Barrier(timeout).Error(); err != nil {
		return 0, n.mapRaftError(r, err)
	}
	return r.fsm.applied.Load(), nil
}

func (n *Node) mapRaftError(r *replica, err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader):
		addr, id := r.raft.LeaderWithID()
		return &NotLeaderError{Shard: r.id, LeaderID: string(id), LeaderAddr: string(addr)}
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress),
		errors.Is(err, raft.ErrAbortedByRestore):
		return fmt.Errorf("%w (shard %d): %v", ErrLeadershipLost, r.id, err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return ErrTimeout
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrShutdown
	}
	return fmt.Errorf("raftstore: shard %d: %w", r.id, err)
}

// Close shuts down every shard, the Raft listener and the store, waiting for their goroutines.
// It is safe to call more than once.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.shardsMu.Lock() // HostMeta, under it, starts no goroutine once closed is set
		n.closed.Store(true)
		n.shardsMu.Unlock()
		close(n.stop)
		n.cancelCtx()
		n.wg.Wait()
		var errs []error
		n.shardsMu.Lock() // no replica is added or removed from here on
		defer n.shardsMu.Unlock()
		for _, r := range *n.shards.Load() {
			errs = append(errs, stopRaft(r.raft, r.trans, r.logs))
		}
		if g := n.meta.Load(); g != nil {
			errs = append(errs, g.shutdown())
		}
		if n.fwd != nil {
			n.fwd.close()
			n.fwdSrv.close()
		}
		n.checksums.close() // no shard applies any more: the last scans end, before the store closes
		if n.mux != nil {
			errs = append(errs, n.mux.Close())
		}
		if n.db != nil {
			errs = append(errs, n.db.Close())
		}
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// MemTableSize is the size of the node's store's memtables (Pebble's Options.MemTableSize). It
// also sizes the store's write-ahead log files: Pebble preallocates each to 110% of it, and keeps
// one per memtable not yet flushed plus up to three emptied ones for reuse, so that a fresh node
// holds four to six of them (about 70–106 MiB) before it holds any data (docs/DECISIONS.md D51).
const MemTableSize = 16 << 20

// blockSize is the size of the data blocks of the node's store's tables (Pebble's
// LevelOptions.BlockSize; Pebble's default is 4 KiB, CockroachDB's 32 KiB). A sync stream that
// catches up reads a log's entries in order, and every block read from a table is a read, a
// decompression and a block-cache allocation: 32 KiB blocks caught up 28–41% faster from a cold
// cache and cost sends 6–9% less CPU (flushes and compactions compress, checksum and index an
// eighth as many blocks), though a point read that misses the cache now decompresses more
// (docs/BENCHMARKS.md, "Larger blocks"; D71). Tables written before keep their blocks until
// compacted.
const blockSize = 32 << 10

// pebbleOptions tunes the node's store for its workload: many point reads that miss (every new
// message's dedup key), so every level gets a bloom filter; Pebble's default is none. Blocks are
// blockSize. Memtables are MemTableSize: larger ones write fewer bytes per send (much of what a
// send writes dies young and never reaches an sstable if its memtable is large enough: 64 MiB
// wrote a third fewer bytes per acked send than 16, docs/BENCHMARKS.md, "The write path"), but
// each one's write-ahead log file is preallocated to its size, several at once, and a fresh node
// with 64 MiB memtables used 422 MiB of disk in two minutes of light load (issue 21): a small
// volume was full before it held any data. openPebble sets the logger and the event listener.
func pebbleOptions(cache *pebble.Cache, fs vfs.FS) *pebble.Options {
	opts := &pebble.Options{
		Cache:        cache,
		MemTableSize: MemTableSize,
		FS:           fs,
	}
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		opts.Levels[i].BlockSize = blockSize
	}
	return opts
}

// pebbleLogger forwards Pebble's logs to slog. Its error lines are limited by format (Pebble
// repeats a failing flush's error as fast as it retries; see logLimiter). While quiet is set and
// true it drops every line but a fatal one (an abandoned Open, see openPebble).
type pebbleLogger struct {
	l     *slog.Logger
	limit *logLimiter
	quiet *atomic.Bool
}

func newPebbleLogger(l *slog.Logger) pebbleLogger {
	return pebbleLogger{l: l.With("component", "pebble"), limit: newLogLimiter()}
}

func (p pebbleLogger) silenced() bool { return p.quiet != nil && p.quiet.Load() }

func (p pebbleLogger) Infof(format string, args ...any) {
	if !p.silenced() {
		p.l.Debug(fmt.Sprintf(format, args...))
	}
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	if p.silenced() {
		return
	}
	ok, held := p.limit.allow(format, time.Now())
	switch {
	case !ok:
	case held > 0:
		p.l.Error(fmt.Sprintf(format, args...), "held_back", held, "held_back_for", "repeats of this error in the previous "+logLimitWindow.String())
	default:
		p.l.Error(fmt.Sprintf(format, args...))
	}
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
	os.Exit(1)
}
