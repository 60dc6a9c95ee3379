package raftstore

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"

	"github.com/syncd-dev/syncd/log"
)

// Disk space. The node's store and its Raft snapshots share one disk, and nothing good happens
// when it fills up: a commit whose write-ahead log write fails stops the process (Pebble cannot
// tell what reached the log, so it refuses to go on), flushes fail and are retried at once,
// forever, and a restart on the full disk used to hang inside pebble.Open (see openPebble). So:
//
//   - a diskGuard measures the free space of the store's disk once a second, on one goroutine,
//     and below Config.MinFreeDisk the node refuses the proposals that add what clients ask for
//     (op.addsData) with ErrLowDisk, long before Pebble runs out: what it still writes
//     (deliveries of acknowledged messages, cursors, trims, Raft's own records and snapshots)
//     is bounded by what was acknowledged before, and the headroom is for it;
//   - New refuses to start below half of MinFreeDisk, or with less room than replaying the
//     write-ahead log needs (checkStartSpace), with an error naming the directory, the free
//     space and the setting;
//   - openPebble returns an error when the disk fills while Pebble opens, instead of waiting.

// Disk-space constants. MinFreeDisk's default and how often free space is measured are in
// DefaultConfig.
const (
	// startHeadroom is what a start needs on top of replaying the write-ahead log: Pebble
	// creates a new log (preallocated to 110% of a memtable, MemTableSize) and writes its
	// manifest and options, and Raft records its terms and votes before anything else is written.
	startHeadroom = 32 << 20
	// diskWALSuffix names Pebble's write-ahead log files in the store directory.
	diskWALSuffix = ".log"
	// noSpaceRetry is how often Pebble retries a flush or compaction that failed for lack of
	// space (see openPebble).
	noSpaceRetry = time.Second
)

// DiskSpace is what a node last measured of the disk holding its store.
type DiskSpace struct {
	Dir  string // the store's directory (Config.Dir/db)
	Free uint64 // bytes available to the node (statfs f_bavail), as last measured
	Min  uint64 // Config.MinFreeDisk, the watermark; 0 when it is off
	// Low says free space went below Min and has not come back above Min plus an eighth (the
	// margin keeps a disk that hovers at the watermark from flapping): the node refuses new
	// writes with ErrLowDisk.
	Low bool
}

// resumeAt is the free space at which a node that is Low accepts writes again.
func (d DiskSpace) resumeAt() uint64 { return d.Min + d.Min/8 }

// String describes d for operators (readiness, logs).
func (d DiskSpace) String() string {
	s := fmt.Sprintf("%s free on the disk holding %s", fmtBytes(d.Free), d.Dir)
	switch {
	case d.Min == 0:
		return s + " (no watermark)"
	case d.Low:
		return s + fmt.Sprintf(", below min_free_disk (%s): new writes are refused until %s are free",
			fmtBytes(d.Min), fmtBytes(d.resumeAt()))
	}
	return s + fmt.Sprintf(" (min_free_disk %s)", fmtBytes(d.Min))
}

// diskGuard keeps a node's view of its free disk space and refuses new writes below the
// watermark. check runs on one goroutine at a time (New, then run); refuse and space are safe for
// concurrent use.
type diskGuard struct {
	fs     vfs.FS
	dir    string
	min    uint64 // 0: no watermark
	logger *slog.Logger
	space  atomic.Pointer[DiskSpace]
	// failing says the last measurement failed (logged once); only check touches it.
	failing bool
	// stuck says shedLeaders found no healthy replica to hand a shard to since the node went
	// low (logged once); check clears it when the node recovers.
	stuck atomic.Bool
}

func newDiskGuard(fs vfs.FS, dir string, minFree int64, logger *slog.Logger) *diskGuard {
	g := &diskGuard{fs: fs, dir: dir, min: uint64(max(minFree, 0)), logger: logger.With("dir", dir)}
	g.space.Store(&DiskSpace{Dir: dir, Min: g.min})
	return g
}

// check measures the free space once. It logs when the node crosses the watermark, either way,
// and when measuring starts or stops failing: once per change, never per request. A failed
// measurement keeps the last state.
func (g *diskGuard) check() {
	du, err := g.fs.GetDiskUsage(g.dir)
	if err != nil {
		if !g.failing {
			g.failing = true
			g.logger.Warn("cannot measure the free disk space; keeping the last measurement", "err", err)
		}
		return
	}
	if g.failing {
		g.failing = false
		g.logger.Info("measuring the free disk space again")
	}
	prev := g.space.Load()
	now := DiskSpace{Dir: g.dir, Free: du.AvailBytes, Min: g.min}
	now.Low = g.min > 0 && (now.Free < g.min || prev.Low && now.Free < now.resumeAt())
	g.space.Store(&now)
	switch {
	case now.Low && !prev.Low:
		g.logger.Warn("disk space low: refusing new writes (sends, group changes) with unavailable until space is freed, "+
			"and handing this node's shard leaderships to replicas on healthy disks; reads, syncs, deliveries and trims go on",
			"free", fmtBytes(now.Free), "min_free_disk", fmtBytes(g.min), "resume_at", fmtBytes(now.resumeAt()))
	case !now.Low && prev.Low:
		g.stuck.Store(false)
		g.logger.Info("disk space recovered: accepting writes again", "free", fmtBytes(now.Free), "min_free_disk", fmtBytes(g.min))
	}
}

// run measures every interval until stop is closed, calling whileLow after each measurement
// that finds the node below the watermark.
func (g *diskGuard) run(stop <-chan struct{}, interval time.Duration, whileLow func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			g.check()
			if g.low() {
				whileLow()
			}
		}
	}
}

// low reports whether the node is below the watermark (DiskSpace.Low).
func (g *diskGuard) low() bool { return g.space.Load().Low }

// refuseLowDisk answers cmd, an op that adds data (op.addsData), proposed to r while this node is
// below the watermark, without proposing it.
//
// A replica that does not lead its shard answers NotLeaderError, so that the proposal goes to the
// leader: the leader's disk is the one that accepts the entry (every replica stores it, whoever
// received it), and a node low on disk hands its leaderships to replicas on healthy disks
// (shedLeaders), so refusing here would refuse what the cluster can take.
//
// The leader answers a resend of an append it has applied from the dedup record (log.Shard.Resend),
// as applying the resend would have: the original result, Duplicate set. That is safe without a
// Raft round: the record is in this replica's applied state, and Raft applies only committed
// entries, in the same Pebble batch as the entry the record acknowledges, so the entry it names is
// committed and will be in every future leader's log; a live record is never changed (only
// reclaimed once it expires, and Resend ignores an expired one), so a leader deposed a moment ago
// answers what the new one would. Nothing is written. A request with no live record is refused
// with ErrLowDisk, and one whose record is of another payload with log.ErrConflict, as applying it
// would.
func (n *Node) refuseLowDisk(r *replica, cmd Command) (Result, error) {
	if r.raft.State() != raft.Leader {
		return Result{}, n.mapRaftError(r, raft.ErrNotLeader)
	}
	req, ok := cmd.payload.(*log.Append)
	if !ok { // forwarded: the command's payload as it came
		b, err := cmd.payload.MarshalBinary()
		if err != nil {
			return Result{}, err
		}
		req = new(log.Append)
		if err := req.UnmarshalBinary(b); err != nil {
			return Result{}, rejectDecode(err)
		}
	}
	res, found, err := r.state.Resend(req, time.Now().UnixNano())
	switch {
	case err != nil:
		return Result{}, err
	case found:
		return Result{Append: res}, nil
	}
	return Result{}, ErrLowDisk
}

// shedLeaders hands the leadership of every data shard this node leads to a voter on a node that
// is not low on disk (leadershipView.target), one transfer at a time, while this node is below the
// watermark (it runs after each such measurement, on the disk goroutine).
//
// A leader low on disk refuses every send to its shard, through every node, for as long as it
// stays low (90 s in issue 21's chaos run), while the shard's other replicas could take them: the
// entries go to every replica anyway, whichever node leads. So the low node steps aside. Nothing
// keeps it from winning a later election (hashicorp/raft has no way to keep a voter from
// campaigning short of demoting it), but it then hands the shard over again within a measurement,
// and healthy nodes never hand it one (the balancer skips low targets, NodeStatus.DiskLow): the
// leadership does not come back until the disk has room, so it cannot ping-pong. With no healthy
// voter caught up (every replica low, or a single node), the node keeps leading and refusing,
// and says so once. The meta shard stays where it is: its writes are the cluster map's,
// few and small, and none is refused for disk space.
func (n *Node) shedLeaders() {
	mine := map[ShardID]*replica{}
	for id, r := range *n.shards.Load() {
		if r.raft.State() == raft.Leader {
			mine[id] = r
		}
	}
	if len(mine) == 0 {
		return
	}
	self := n.cfg.NodeID
	ctx, cancel := context.WithTimeout(n.stopCtx, n.cfg.Timing.ElectionTimeout)
	defer cancel()
	v := n.leadershipView(ctx)
	for _, id := range slices.Sorted(maps.Keys(mine)) {
		r := mine[id]
		target := v.target(r, self, func(Peer) bool { return true })
		if target == nil {
			if n.disk.stuck.CompareAndSwap(false, true) {
				n.logger.Warn("disk space low, and no replica on a healthy disk has caught up to take over: "+
					"this node keeps leading and refuses new writes", "shard", uint32(id))
			}
			continue
		}
		err := r.transferLeadership(target.ID, target.Addr, v.applied[target.ID][id])
		if err == nil {
			v.counts[target.ID]++
		}
		n.logger.Info("disk space low: handing the shard's leadership to a replica on a healthy disk",
			"shard", uint32(id), "to", target.ID, "err", err)
	}
}

// DiskSpace returns what the node last measured of the disk holding its store (at most about a
// second old). Safe for concurrent use.
func (n *Node) DiskSpace() DiskSpace { return *n.disk.space.Load() }

// checkStartSpace refuses to open the store in dir when its disk has less free space than a start
// needs: half of minFree (a node between that and minFree starts, refusing new writes, so that
// operators can read, trim and see why), and in any case room to replay the write-ahead log left
// in dir (Pebble writes it out as tables before Open returns) plus startHeadroom. A file system
// that cannot report its usage is not checked (the guard then logs that it cannot measure).
func checkStartSpace(fs vfs.FS, dir string, minFree int64) error {
	du, err := fs.GetDiskUsage(dir)
	if err != nil { // a first start: the store's directory is not there yet, its parent is
		du, err = fs.GetDiskUsage(fs.PathDir(dir))
	}
	if err != nil {
		return nil
	}
	replay := walBytes(fs, dir)
	need, setting := replay+startHeadroom, "min_free_disk is off"
	if minFree > 0 {
		half := uint64(minFree) / 2
		need = max(need, half)
		setting = fmt.Sprintf("half of min_free_disk %s is %s", fmtBytes(uint64(minFree)), fmtBytes(half))
	}
	if du.AvailBytes >= need {
		return nil
	}
	return fmt.Errorf("raftstore: not starting: %s free on the disk holding %s, and a start needs %s (%s; replaying "+
		"%s of write-ahead log and starting a new one needs %s): free space on that disk (or move the data "+
		"directory to a larger one), then start again",
		fmtBytes(du.AvailBytes), dir, fmtBytes(need), setting, fmtBytes(replay), fmtBytes(replay+startHeadroom))
}

// walBytes returns the size of the write-ahead log files in dir: an upper bound on what Pebble
// replays and flushes when it opens (it also counts logs kept for recycling). 0 for a new store.
func walBytes(fs vfs.FS, dir string) uint64 {
	names, err := fs.List(dir)
	if err != nil {
		return 0
	}
	var n uint64
	for _, name := range names {
		if !strings.HasSuffix(name, diskWALSuffix) {
			continue
		}
		if fi, err := fs.Stat(fs.PathJoin(dir, name)); err == nil {
			n += uint64(fi.Size())
		}
	}
	return n
}

// openPebble opens the store in dir, returning an error rather than waiting forever when the disk
// fills up while Pebble opens.
//
// pebble.Open replays the write-ahead log into memtables and waits for them to be flushed to
// tables before it returns. A flush that fails is logged as a "background error" and retried at
// once, without end (pebble's compaction.go: "TODO(peter): count consecutive flush errors and
// backoff"), so on a full disk Open never returned and the node logged each attempt: hundreds of
// thousands of lines a minute, and no admin address ever came up. Pebble has no way to cancel an
// Open, so it runs on its own goroutine here, and the first out-of-space background error while
// it runs ends the wait with an error. The abandoned Open is silenced, and retries once a second
// (as every flush or compaction that failed for lack of space does here, also once the store is
// open); if the disk gets room again it completes, and the store is closed at once, which
// releases the directory's lock for the next start. A process exits on New's error anyway.
func openPebble(dir string, opts *pebble.Options, logger pebbleLogger) (*pebble.DB, error) {
	const (
		waiting   = iota // New waits for Open
		handed           // Open returned and handed its result to New
		abandoned        // New gave up on this Open
	)
	var (
		state   atomic.Int32
		opening atomic.Bool // Open has not returned
		quiet   atomic.Bool // abandoned: Pebble's lines would outlive New (and a test's logger)
		noSpace = make(chan error, 1)
	)
	opening.Store(true)
	logger.quiet = &quiet
	opts.Logger = logger
	opts.EventListener = &pebble.EventListener{BackgroundError: func(err error) {
		if !vfs.IsNoSpaceError(err) {
			logger.Errorf("background error: %s", err)
			return
		}
		if opening.Load() {
			select {
			case noSpace <- err:
			default:
			}
		} else {
			logger.Errorf("background error: %s", err)
		}
		// Pebble retries a failed flush as soon as this returns, and would spin on a full disk:
		// this is its backoff. Pebble's mutex is held meanwhile, which delays commits (they
		// cannot get room on a full disk anyway) and Close, not reads.
		time.Sleep(noSpaceRetry)
	}}
	type result struct {
		db  *pebble.DB
		err error
	}
	done := make(chan result, 1)
	go func() {
		db, err := pebble.Open(dir, opts)
		opening.Store(false)
		if state.CompareAndSwap(waiting, handed) {
			done <- result{db, err}
		} else if err == nil {
			db.Close() // nobody will use it; closing releases the directory's lock
		}
	}()
	var r result
	select {
	case r = <-done:
	case err := <-noSpace:
		if state.CompareAndSwap(waiting, abandoned) {
			quiet.Store(true)
			r.err = err
		} else {
			r = <-done // Open returned meanwhile: take its result after all
		}
	}
	if r.err != nil && vfs.IsNoSpaceError(r.err) {
		return nil, fmt.Errorf("raftstore: not starting: the disk holding %s filled up while the store opened "+
			"(Pebble writes its write-ahead log out as tables before it serves): free space on that disk, then start again: %w", dir, r.err)
	}
	return r.db, r.err
}

// fmtBytes formats n bytes for people: "512.0 MiB".
func fmtBytes(n uint64) string {
	const unit = 1 << 10
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTP"[i])
}
