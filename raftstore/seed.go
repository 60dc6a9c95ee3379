package raftstore

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"

	"github.com/syncd-dev/syncd/log"
)

// Seeding a node from a backup (issue #26: backup and restore). A backup holds every data shard's
// state at one Raft index (a log snapshot stream, the format followers receive) and the meta
// group's state. Seed writes them into an empty data directory as if this node were the only
// member of every group and had just installed each one as a Raft snapshot, as etcd's snapshot
// restore does: each group's snapshot store holds the state at the shard's index with a
// configuration naming this node alone, so the node starts, elects itself and serves; other nodes
// join it and receive the state the usual way. Nothing of the old cluster's membership survives.

// SeedIndexGap is how far past its backed-up Raft index a restored data shard's group goes on. A
// message id names its shard and the Raft index of its append, so an index the lost cluster used
// after the backup must never be used again: 2^40 entries is more than a shard commits in years.
const SeedIndexGap = 1 << 40

// SeedShard is one data shard of a backup.
type SeedShard struct {
	ID ShardID
	// Open returns the shard's state as a log snapshot stream ([log.Snapshot.WriteTo]).
	Open func() (io.ReadCloser, error)
}

// SeedResult reports what Seed wrote.
type SeedResult struct {
	// Applied is each data shard's Raft index, as the backup held it (the restored group goes on
	// from SeedIndexGap past it).
	Applied map[ShardID]uint64
	// Renewed is how many logs got a new epoch (every user and conversation log).
	Renewed int
}

// Seed writes a new node's data directory, cfg.Dir, from a backup: the data shards' states and
// meta, the meta group's state (bytes its MetaFSM restores from) at Raft index metaIndex. Every
// group's only member is cfg.NodeID at its advertised address. cfg.Dir must hold no store yet.
// Destinations' fan-out marks are reconciled with their sources' restored outboxes before the
// node ever starts (log.Shard.RaiseOutbox), and every log gets a new epoch, at least epoch (a
// time, as a new log's), behind a restore fence (log.Shard.RenewEpochs): the backup may be older
// than what devices hold, and a device past it must be told, not rewound.
func Seed(cfg Config, meta []byte, metaIndex uint64, shards []SeedShard, epoch log.Epoch) (SeedResult, error) {
	cfg = cfg.withDefaults()
	addr := cmp.Or(cfg.AdvertiseAddr, cfg.RaftAddr)
	if host, _, err := net.SplitHostPort(addr); err != nil || host == "" || net.ParseIP(host).IsUnspecified() {
		return SeedResult{}, fmt.Errorf("raftstore: seed: %q is not an address other nodes can dial: give the node's advertised Raft address", addr)
	}
	if cfg.NodeID == "" {
		return SeedResult{}, errors.New("raftstore: seed: no node id")
	}
	dbDir := filepath.Join(cfg.Dir, "db")
	for _, dir := range []string{dbDir, filepath.Join(cfg.Dir, "snapshots")} {
		if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
			return SeedResult{}, fmt.Errorf("raftstore: seed: %s holds a store already: restore into an empty data directory", dir)
		}
	}
	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return SeedResult{}, fmt.Errorf("raftstore: create data dir: %w", err)
	}
	cache := pebble.NewCache(cfg.CacheSize)
	defer cache.Unref()
	db, err := openPebble(dbDir, pebbleOptions(cache, cfg.FS), newPebbleLogger(cfg.Logger))
	if err != nil {
		return SeedResult{}, fmt.Errorf("raftstore: seed: open store in %s: %w", cfg.Dir, err)
	}
	res, err := seed(cfg, db, addr, meta, metaIndex, shards, epoch)
	return res, errors.Join(err, db.Close())
}

func seed(cfg Config, db *pebble.DB, addr string, meta []byte, metaIndex uint64, shards []SeedShard, epoch log.Epoch) (SeedResult, error) {
	res := SeedResult{Applied: map[ShardID]uint64{}}
	states := map[ShardID]*log.Shard{}
	for _, sh := range shards {
		state, err := log.OpenShard(db, log.ShardID(sh.ID))
		if err != nil {
			return res, err
		}
		rc, err := sh.Open()
		if err != nil {
			return res, err
		}
		err = state.Restore(rc)
		if err = errors.Join(err, rc.Close()); err != nil {
			return res, fmt.Errorf("raftstore: seed shard %d: %w", sh.ID, err)
		}
		if res.Applied[sh.ID], err = state.Applied(); err != nil {
			return res, err
		}
		states[sh.ID] = state
	}
	// Every destination's mark for a source, which may be past what the source's backup holds.
	for src, state := range states {
		var floor uint64
		for _, dest := range states {
			m, err := dest.SourceMark(log.ShardID(src))
			if err != nil {
				return res, err
			}
			floor = max(floor, m)
		}
		if err := state.RaiseOutbox(floor); err != nil {
			return res, err
		}
		n, err := state.RenewEpochs(epoch)
		if err != nil {
			return res, err
		}
		res.Renewed += n
	}
	alone := raft.Configuration{Servers: []raft.Server{{ID: raft.ServerID(cfg.NodeID), Address: raft.ServerAddress(addr)}}}
	for id, state := range states {
		// A message's id is its shard and Raft index: the lost cluster may have committed entries
		// past the backup's index, whose ids devices hold, so the restored group goes on far past
		// them (SeedIndexGap). A data shard's state machine keeps its own state
		// (NoSnapshotRestoreOnStart), so its applied index must be the snapshot's.
		index := res.Applied[id] + SeedIndexGap
		tx := state.Begin()
		if err := errors.Join(tx.SetApplied(index), tx.Commit(true)); err != nil {
			return res, err
		}
		snap := state.NewSnapshot()
		err := writeSeedSnapshot(cfg, db, id, index, alone, func(w io.Writer) error { _, err := snap.WriteTo(w); return err })
		if err = errors.Join(err, snap.Close()); err != nil {
			return res, fmt.Errorf("raftstore: seed shard %d: %w", id, err)
		}
	}
	err := writeSeedSnapshot(cfg, db, MetaShard, max(metaIndex, 1), alone, func(w io.Writer) error { _, err := w.Write(meta); return err })
	if err != nil {
		return res, fmt.Errorf("raftstore: seed the meta group: %w", err)
	}
	return res, nil
}

// writeSeedSnapshot stores shard's state (written by write) as its group's Raft snapshot at
// index, in term 1, with configuration conf, and records the term, which also marks the group
// as on this node's disk (ShardsOnDisk).
func writeSeedSnapshot(cfg Config, db *pebble.DB, shard ShardID, index uint64, conf raft.Configuration, write func(io.Writer) error) error {
	snaps, err := raft.NewFileSnapshotStoreWithLogger(snapshotDir(cfg.Dir, shard), 2, newRaftLogger(cfg.Logger, shard))
	if err != nil {
		return err
	}
	_, trans := raft.NewInmemTransport("") // encodes the configuration's peers for the snapshot's meta
	defer trans.Close()
	sink, err := snaps.Create(raft.SnapshotVersionMax, index, 1, conf, 1, trans)
	if err != nil {
		return err
	}
	if err := write(sink); err != nil {
		return errors.Join(err, sink.Cancel())
	}
	if err := sink.Close(); err != nil {
		return err
	}
	logs, err := newRaftLog(db, shard)
	if err != nil {
		return err
	}
	return logs.SetUint64([]byte("CurrentTerm"), 1) // hashicorp/raft's key for the current term
}
