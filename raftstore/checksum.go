package raftstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/log"
)

// Replica checksums (issue #23): proof that the replicas of a shard hold the same state.
//
// Replicas agree only at the same Raft index, so checksums that nodes take "now" compare
// nothing. As etcd's corruption check hashes every member at one revision, a check proposes a
// ChecksumCommand through the shard's Raft log, and every replica, when it applies that entry,
// commits what it applied up to it, captures its state there (a Pebble snapshot, log.Snapshot)
// and hands the capture to a scan in the background: the state machine goes on at once, however
// large the shard. Each replica keeps its last keepChecksums results in memory and publishes them
// in its ShardStatus; Node.CheckReplicas gathers them from every member of the shard's group
// through the status call `cluster status` uses, and compares them (replicacheck.go).
//
// Payload of ChecksumCommand (op 10):
//
//	version u8 (1)
//
// The checksum is log.Shard.StateChecksum's: crc64 chained over every key and value of the
// shard's state, the applied index (the command's own) included, and the number of keys. A
// build that computes another one must send payload version 2, which this build refuses as
// invalid, as an earlier build refuses op 10 itself: a refusal writes nothing, so the replicas'
// states stay the same and such a replica is only reported as having recorded nothing.

// checksumV1 is the version of ChecksumCommand's payload.
const checksumV1 = 1

// keepChecksums is how many checksums a replica keeps: enough for a few checks of the shard in a
// row, whose results stay readable until every node has been asked; the next one drops the
// oldest (and stops its scan if it still runs).
const keepChecksums = 8

// maxScans bounds the checksum scans a node runs at once: each reads a whole shard's state, so a
// check of every shard reads at most two at a time on each node, and the others wait their turn
// holding only their snapshot.
const maxScans = 2

// ChecksumCommand asks every replica of the shard to checksum its state at the command's Raft
// index (Result.CheckIndex), in the background; the results are in each replica's
// ShardStatus.Checksums. It writes nothing. Node.CheckReplicas proposes it and compares.
func ChecksumCommand() Command { return Command{op: opChecksum, payload: checksumRequest{}} }

// checksumRequest is ChecksumCommand's payload.
type checksumRequest struct{}

func (checksumRequest) MarshalBinary() ([]byte, error) { return []byte{checksumV1}, nil }

func decodeChecksumRequest(b []byte) error {
	if len(b) != 1 || b[0] != checksumV1 {
		return fmt.Errorf("checksum request: want version %d alone, got % x", checksumV1, b)
	}
	return nil
}

// Checksum is one replica's checksum of its shard's state at the Raft index of a
// ChecksumCommand it applied.
type Checksum struct {
	// Index is the command's Raft index, and Time the proposer's clock in it (Unix ns): the same
	// on every replica.
	Index uint64 `json:"index"`
	Time  int64  `json:"time"`
	// Done is false while the scan runs. Once done, Sum and Keys are the state's checksum and
	// number of keys as of Index (log.Snapshot.StateChecksum), or Err says why there are none.
	Done bool   `json:"done"`
	Sum  uint64 `json:"sum"`
	Keys uint64 `json:"keys"`
	Err  string `json:"error,omitempty"`
	// At is when the scan ended, on this node's clock (Unix ns); 0 while it runs.
	At int64 `json:"at,omitempty"`
}

// replicaChecksums are one replica's checksums, the last keepChecksums of them in index order,
// and the scans still running. It is safe for concurrent use.
type replicaChecksums struct {
	shard  ShardID
	run    *checksummer
	logger *slog.Logger

	mu     sync.Mutex
	recs   []Checksum
	cancel map[uint64]context.CancelFunc // by index: stops its scan, while it runs
}

func newReplicaChecksums(shard ShardID, run *checksummer, logger *slog.Logger) *replicaChecksums {
	return &replicaChecksums{shard: shard, run: run, logger: logger, cancel: map[uint64]context.CancelFunc{}}
}

// start records a checksum of snap, the state as of index, and computes it in the background;
// snap is closed once it is. The oldest checksum beyond keepChecksums goes.
func (c *replicaChecksums) start(index uint64, proposed int64, snap *log.Snapshot) {
	c.mu.Lock()
	if len(c.recs) >= keepChecksums {
		old := c.recs[0].Index
		if stop := c.cancel[old]; stop != nil {
			stop() // its scan ends and finds no record to fill
			delete(c.cancel, old)
		}
		c.recs = slices.Delete(c.recs, 0, 1)
	}
	c.recs = append(c.recs, Checksum{Index: index, Time: proposed})
	ctx, stop := context.WithCancel(c.run.ctx)
	c.cancel[index] = stop
	c.mu.Unlock()
	ok := c.run.spawn(func() {
		defer snap.Close()
		sum, keys, err := c.run.scan(ctx, snap)
		c.finish(index, sum, keys, err)
	})
	if !ok {
		snap.Close()
		c.finish(index, 0, 0, ErrShutdown)
	}
}

// finish records the outcome of the scan of index, if its record is still kept.
func (c *replicaChecksums) finish(index, sum, keys uint64, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if stop := c.cancel[index]; stop != nil {
		stop()
		delete(c.cancel, index)
	}
	i := slices.IndexFunc(c.recs, func(r Checksum) bool { return r.Index == index })
	if i < 0 {
		return // dropped for a later one meanwhile
	}
	r := &c.recs[i]
	r.Done, r.At = true, time.Now().UnixNano()
	if err != nil {
		r.Err = err.Error()
		if !errors.Is(err, context.Canceled) && !errors.Is(err, ErrShutdown) {
			// Not a refusal: the replica could not read its own state. A check reports it failed.
			c.logger.Warn("state checksum failed: this replica could not read its state", "shard", uint32(c.shard), "index", index, "err", err)
		}
		return
	}
	r.Sum, r.Keys = sum, keys
}

// list returns a copy of the checksums kept, in index order.
func (c *replicaChecksums) list() []Checksum {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.recs)
}

// stop stops every scan still running (the replica is being removed).
func (c *replicaChecksums) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, stop := range c.cancel {
		stop()
	}
}

// checksummer runs a node's checksum scans: at most maxScans at once, each stopped by its own
// context (its record was dropped) or when the node closes, whose Close waits for them before it
// closes the store their snapshots read.
type checksummer struct {
	ctx   context.Context // ends when the node closes
	slots chan struct{}

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func newChecksummer(ctx context.Context) *checksummer {
	return &checksummer{ctx: ctx, slots: make(chan struct{}, maxScans)}
}

// spawn runs f in a goroutine the checksummer waits for, unless it is closed (false).
func (c *checksummer) spawn(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
	return true
}

// scan waits for a slot, then computes snap's checksum, within ctx.
func (c *checksummer) scan(ctx context.Context, snap *log.Snapshot) (sum, keys uint64, err error) {
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	defer func() { <-c.slots }()
	return snap.StateChecksum(ctx)
}

// close refuses new scans and waits for those running (the node's context has ended, so they
// stop at their next look at it).
func (c *checksummer) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.wg.Wait()
}
