package raftstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/syncd-dev/syncd/log"
)

// Peer is one voter of a static cluster.
type Peer struct {
	ID   string `json:"id"`   // node id, unique in the cluster
	Addr string `json:"addr"` // raft address other nodes dial (host:port)
}

// Config configures a Node. Zero fields take the documented defaults; Validate reports every
// problem at once.
type Config struct {
	// NodeID identifies this node in Raft configurations. Required.
	NodeID string
	// Dir is the node's data directory: Pebble in Dir/db, Raft snapshots in Dir/snapshots.
	// Required.
	Dir string
	// RaftAddr is the TCP address the node's shared Raft listener binds. Default "127.0.0.1:0"
	// (a free loopback port), which only suits a single node.
	RaftAddr string
	// AdvertiseAddr is the address other nodes dial to reach RaftAddr. Default: the bound
	// listener address.
	AdvertiseAddr string
	// Shards lists the shards this node hosts from the start. Nil means one shard, 1; an empty
	// list means none (a node that will be given replicas later, see AddReplica, or whose
	// replicas a control plane places: raftstore/cluster).
	Shards []ShardID
	// Peers lists the voters of a static cluster, this node included, identical on every node.
	// Empty means a single node that is the only voter of every shard (the embedded default).
	Peers []Peer
	// PeerAddr, if set, overrides the address used to dial a peer by id (for NAT and for the
	// fault-injecting relays of tests). It must return "" to use the configured address.
	PeerAddr func(id string) string
	// TLS secures the node's listener and every connection it dials to another node (Raft,
	// forwarded proposals, calls) with mutual TLS 1.3 under the cluster CA (see tls.go). Required
	// unless Insecure is set.
	TLS *TLS
	// Insecure runs the node plane in plain TCP: anyone who can reach RaftAddr can then propose
	// any command and read every log. For tests of the transport itself and an operator's
	// explicit choice only; it excludes TLS. Default false.
	Insecure bool
	// App is the application above the node (syncd's server): what the node tells it and asks
	// of it. Nil means none: no calls are served and nobody is told of applies.
	App App

	// Timing tunes Raft; zero fields take the LAN defaults of DefaultTiming.
	Timing Timing

	// SnapshotThreshold is how many applied entries trigger a snapshot. Default 16384.
	SnapshotThreshold uint64
	// SnapshotInterval is how often the threshold is checked. Default 30s.
	SnapshotInterval time.Duration
	// TrailingLogs is how many entries stay in the Raft log after a snapshot, so a follower a
	// little behind catches up from the log rather than by snapshot. Default 10240.
	TrailingLogs uint64

	// BalanceInterval is how often the node checks whether it leads more than its share of the
	// shards and hands one over (see balance.go). Default 5s; negative disables balancing.
	BalanceInterval time.Duration

	// CacheSize is Pebble's block cache size in bytes. Default 128 MiB.
	CacheSize int64

	// MinFreeDisk is the free-space watermark of the disk holding the store, in bytes (syncd's
	// min_free_disk): while less is free, the node hands the leadership of its shards to replicas
	// on nodes with room (shedLeaders), refuses, while it still leads, the proposals that add what
	// clients ask for (AppendCommand) with ErrLowDisk (a resend of an applied one gets its
	// original answer), and takes them again once free space is back above it by an eighth. Reads, cursors, deliveries of acknowledged messages, trims and dead-letter
	// drops go on; they are what the headroom is for. New refuses to start below half of it.
	// Free space is measured once a second. Default 256 MiB: room for what a node writes once it
	// refuses (new write-ahead log files of MemTableSize, a flush, a compaction, deliveries and
	// cursors, its shards' Raft snapshots while they are small), without making a small volume
	// "full" before it holds data; raise it above the size of the largest shard's snapshot.
	// Negative turns the watermark off (a start still needs room to replay the write-ahead log).
	MinFreeDisk int64
	// FS is the store's file system (Pebble's vfs), which free space is measured on. Default
	// vfs.Default; tests wrap it to inject faults (vfs/errorfs) or to report little free space.
	FS vfs.FS
	// diskCheckEvery is how often free space is measured. Default 1s: a statfs costs
	// microseconds, and at the rates a node writes the headroom lasts far longer. Tests shorten
	// it (SetDiskCheckInterval).
	diskCheckEvery time.Duration

	// Logger receives structured logs, Raft's included. Default slog.Default().
	Logger *slog.Logger
}

// App is the application above a node, the one way the node calls up (the consumer-side
// interface of hashicorp/raft's FSM, for the layer above raftstore). Its methods run on the
// node's goroutines, concurrently, from the moment New starts the shards, before New returns: an
// implementation that is not ready yet must answer so (Serve with ErrNoShard, say) rather than
// block.
type App interface {
	// Applied is called after each applied batch of a shard with its new applied index, on the
	// shard's apply goroutine: it must not block.
	Applied(shard ShardID, index uint64)
	// LogsChanged is called after an applied batch of a shard appended to logs that readers
	// follow — user logs, and the conversation logs of large groups — with those logs (All after
	// a snapshot restore: any log of the shard may have changed), on the shard's apply
	// goroutine: it must not block. Sync streams use it to wake exactly the readers that have
	// something new.
	LogsChanged(shard ShardID, logs log.Touched)
	// Serve answers a call another node made with Node.Call (say, a read of a shard this node
	// hosts for a node that does not), on the forwarding connection's goroutines, under ctx (the
	// caller's deadline). Refusals of the log package keep their sentinel across the call; other
	// errors arrive as text.
	Serve(ctx context.Context, method string, payload []byte) ([]byte, error)
	// Attrs returns facts about this node that other nodes and operators learn from its status
	// (NodeStatus.Attrs): syncd returns its client and admin addresses.
	Attrs() map[string]string
}

// Timing holds the Raft timeouts. The defaults suit a LAN or one machine: a follower that hears
// nothing for HeartbeatTimeout starts an election; the leader steps down when it cannot reach a
// quorum for LeaderLeaseTimeout; CommitTimeout bounds how long followers wait to learn a new
// commit index when the leader is idle. StaleAfter is this package's own: a replica that has not
// heard from its shard's leader for that long no longer holds its lease (lease.go) — its reads
// stop proving the shard's head, and a proposal through it stops waiting for a leader.
type Timing struct {
	HeartbeatTimeout   time.Duration // default 500ms (hashicorp default 1s, tuned for WANs)
	ElectionTimeout    time.Duration // default 500ms
	LeaderLeaseTimeout time.Duration // default 250ms
	CommitTimeout      time.Duration // default 20ms (hashicorp default 50ms)
	// StaleAfter is the replica lease: default 4 × ElectionTimeout (2s with the defaults), long
	// enough for a routine election after a leader's crash not to lapse it; at least
	// 2 × ElectionTimeout.
	StaleAfter time.Duration
}

// DefaultTiming returns the LAN defaults described on Timing.
func DefaultTiming() Timing {
	return Timing{
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
		LeaderLeaseTimeout: 250 * time.Millisecond,
		CommitTimeout:      20 * time.Millisecond,
		StaleAfter:         2 * time.Second,
	}
}

// DefaultConfig returns what the zero fields of a Config stand for, in the style of
// hashicorp/raft's DefaultConfig; each field's comment names its default. It is the one place
// those defaults are written: a Config field left zero and the same field copied from
// DefaultConfig give the same Node. NodeID, Dir, Peers and the callbacks have no default.
// Shards stays nil, since nil and empty differ (see Config.Shards); Logger stays nil,
// meaning slog.Default() as of New, so that a later slog.SetDefault still applies.
func DefaultConfig() Config {
	return Config{
		RaftAddr:          "127.0.0.1:0",
		Timing:            DefaultTiming(),
		SnapshotThreshold: 16384,
		SnapshotInterval:  30 * time.Second,
		TrailingLogs:      10240,
		BalanceInterval:   5 * time.Second,
		CacheSize:         128 << 20,
		MinFreeDisk:       256 << 20,
		FS:                vfs.Default,
		diskCheckEvery:    time.Second,
	}
}

// withDefaults returns a copy of c with every zero field set from DefaultConfig, the one place
// the defaults are written.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.RaftAddr = cmp.Or(c.RaftAddr, d.RaftAddr)
	if c.Shards == nil {
		c.Shards = []ShardID{1}
	}
	c.Timing.HeartbeatTimeout = cmp.Or(c.Timing.HeartbeatTimeout, d.Timing.HeartbeatTimeout)
	c.Timing.ElectionTimeout = cmp.Or(c.Timing.ElectionTimeout, d.Timing.ElectionTimeout)
	c.Timing.LeaderLeaseTimeout = cmp.Or(c.Timing.LeaderLeaseTimeout, d.Timing.LeaderLeaseTimeout)
	c.Timing.CommitTimeout = cmp.Or(c.Timing.CommitTimeout, d.Timing.CommitTimeout)
	// Derived from the election timeout, so that slower timings get a longer lease by themselves
	// (DefaultTiming's 2s is this for its 500ms).
	c.Timing.StaleAfter = cmp.Or(c.Timing.StaleAfter, 4*c.Timing.ElectionTimeout)
	c.SnapshotThreshold = cmp.Or(c.SnapshotThreshold, d.SnapshotThreshold)
	c.SnapshotInterval = cmp.Or(c.SnapshotInterval, d.SnapshotInterval)
	c.TrailingLogs = cmp.Or(c.TrailingLogs, d.TrailingLogs)
	c.BalanceInterval = cmp.Or(c.BalanceInterval, d.BalanceInterval)
	c.CacheSize = cmp.Or(c.CacheSize, d.CacheSize)
	c.MinFreeDisk = cmp.Or(c.MinFreeDisk, d.MinFreeDisk)
	if c.FS == nil {
		c.FS = d.FS
	}
	c.diskCheckEvery = cmp.Or(c.diskCheckEvery, d.diskCheckEvery)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports every problem with the configuration (after defaults), joined.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if !log.ValidID(c.NodeID) {
		errs = append(errs, fmt.Errorf("raftstore: NodeID %q must be 1-%d printable ASCII characters", c.NodeID, log.MaxIDLen))
	}
	if c.Dir == "" {
		errs = append(errs, errors.New("raftstore: Dir is required"))
	}
	switch {
	case c.TLS == nil && !c.Insecure:
		errs = append(errs, errors.New("raftstore: TLS is required (mutual TLS on the node plane); set Insecure to run it in plain TCP"))
	case c.TLS != nil && c.Insecure:
		errs = append(errs, errors.New("raftstore: TLS and Insecure exclude each other"))
	case c.TLS != nil:
		if err := c.TLS.validate(c.NodeID); err != nil {
			errs = append(errs, err)
		}
	}
	seen := map[ShardID]bool{}
	for _, s := range c.Shards {
		if s == 0 || seen[s] {
			errs = append(errs, fmt.Errorf("raftstore: shard id %d is zero or repeated", s))
		}
		seen[s] = true
	}
	if len(c.Peers) > 0 {
		ids, self := map[string]bool{}, false
		for _, p := range c.Peers {
			if p.ID == "" || p.Addr == "" || ids[p.ID] {
				errs = append(errs, fmt.Errorf("raftstore: peer %q/%q: id and address required, ids unique", p.ID, p.Addr))
			}
			ids[p.ID] = true
			self = self || p.ID == c.NodeID
		}
		if !self && len(c.Shards) > 0 {
			// Peers are the voters of the shards bootstrapped here; a node that starts with no
			// shards (it joins later) is not among them.
			errs = append(errs, fmt.Errorf("raftstore: Peers must include this node (%q)", c.NodeID))
		}
	}
	// Negative durations would panic in time.NewTicker deep inside a running node; say so now.
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"SnapshotInterval", c.SnapshotInterval}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("raftstore: %s %v must not be negative (0 means the default)", d.name, d.v))
		}
	}
	if c.CacheSize < 0 {
		errs = append(errs, fmt.Errorf("raftstore: CacheSize %d must not be negative (0 means the default)", c.CacheSize))
	}
	t := c.Timing
	if t.LeaderLeaseTimeout > t.HeartbeatTimeout {
		errs = append(errs, errors.New("raftstore: Timing.LeaderLeaseTimeout must not exceed HeartbeatTimeout"))
	}
	if t.ElectionTimeout < t.HeartbeatTimeout {
		errs = append(errs, errors.New("raftstore: Timing.ElectionTimeout must be at least HeartbeatTimeout"))
	}
	if t.StaleAfter < 2*t.ElectionTimeout {
		errs = append(errs, fmt.Errorf("raftstore: Timing.StaleAfter %v must be at least 2 × ElectionTimeout (%v): "+
			"a routine election would lapse the lease", t.StaleAfter, 2*t.ElectionTimeout))
	}
	return errors.Join(errs...)
}
