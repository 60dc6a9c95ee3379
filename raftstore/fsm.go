package raftstore

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/log"
)

// fsm applies committed commands of one shard to its log.Shard.
//
// It is persistent: the applied index is written in the same Pebble batch as the data, so after a
// restart raft (configured with NoSnapshotRestoreOnStart) re-delivers committed entries and the
// fsm skips every one at or below the stored applied index instead of rebuilding state. Writes
// are not fsynced here: the entries are already durable in the Raft log, which shares this
// Pebble WAL, so the next synced Raft append makes them durable too, and anything lost in a crash
// is re-applied from the Raft log.
//
// raft calls ApplyBatch, Snapshot and Restore from one goroutine; the atomics are read by others.
type fsm struct {
	shard *log.Shard
	db    *pebble.DB
	// applyTime, if set, records each ApplyBatch (the node's latencies; set before raft starts).
	applyTime prometheus.Histogram

	applied atomic.Uint64 // last index applied (or skipped as already applied)
	// applies counts commands actually applied; skips counts entries skipped because the stored
	// state already had them (the restart path).
	applies atomic.Uint64
	skips   atomic.Uint64
	// restores counts snapshots installed since start.
	restores atomic.Uint64
	// onApply, if set, is called after each batch commits with the new applied index.
	onApply func(index uint64)
	// onLogs, if set, is called after a batch that appended to logs readers follow, with those
	// logs; after a snapshot restore it is called with All set (any log may have changed).
	onLogs func(log.Touched)
	// checksums, if set, records the replica's checksums at the indexes of the ChecksumCommands
	// it applies (checksum.go).
	checksums *replicaChecksums
}

// applyResult is what ApplyFuture.Response returns for a command.
type applyResult struct {
	res Result
	err error
}

func newFSM(shard *log.Shard, db *pebble.DB) (*fsm, error) {
	f := &fsm{shard: shard, db: db}
	applied, err := shard.Applied()
	if err != nil {
		return nil, err
	}
	f.applied.Store(applied)
	return f, nil
}

// Apply implements raft.FSM.
func (f *fsm) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch implements raft.BatchingFSM: the whole batch becomes one Pebble batch, except that
// a ChecksumCommand cuts it in two. A checksum is of the state as of its own index on every
// replica, however raft batched the entries around it, so what the batch applied up to it is
// committed first, the state is captured there, and the rest of the batch goes into a new Pebble
// batch.
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	if f.applyTime != nil {
		defer since(f.applyTime, time.Now())
	}
	out := make([]any, len(logs))
	applied := f.applied.Load()
	tx := f.shard.Begin()
	defer func() { tx.Close() }()
	last, committed := applied, applied
	var touched log.Touched
	for i, l := range logs {
		if l.Index <= applied {
			f.skips.Add(1)
			continue
		}
		last = l.Index
		if l.Type != raft.LogCommand {
			continue
		}
		res, proposed := f.applyOne(tx, l)
		out[i] = res
		if res.err == nil && res.res.CheckIndex != 0 {
			touched.Add(f.commit(tx, last))
			f.checksumAt(last, proposed)
			f.applied.Store(last) // after the checksum is recorded: see replica.status
			committed = last
			tx = f.shard.Begin()
		}
	}
	if last == applied {
		return out
	}
	if last != committed {
		touched.Add(f.commit(tx, last))
		f.applied.Store(last)
	}
	if f.onApply != nil {
		f.onApply(last)
	}
	if f.onLogs != nil && !touched.Empty() {
		f.onLogs(touched)
	}
	return out
}

// commit records last as the applied index in tx and commits it, and returns the logs it
// appended to.
func (f *fsm) commit(tx *log.Tx, last uint64) log.Touched {
	if err := tx.SetApplied(last); err != nil {
		panic(fmt.Sprintf("raftstore: shard %d: record applied index: %v", f.shard.ID(), err))
	}
	if err := tx.Commit(false); err != nil {
		// The state machine cannot go on with a write it could not make: crash and let restart
		// re-apply from the durable Raft log.
		panic(fmt.Sprintf("raftstore: shard %d: commit applied batch: %v", f.shard.ID(), err))
	}
	return tx.Touched()
}

// checksumAt captures the shard's state, committed up to index, and has its checksum computed
// in the background (checksum.go). proposed is the command's proposer time.
func (f *fsm) checksumAt(index uint64, proposed int64) {
	if f.checksums == nil {
		return
	}
	f.checksums.start(index, proposed, f.shard.NewSnapshot())
}

// applyOne applies the command of l in tx and returns its answer and its proposer time.
func (f *fsm) applyOne(tx *log.Tx, l *raft.Log) (applyResult, int64) {
	cmd, err := decodeCommand(l.Data)
	if err != nil {
		return applyResult{err: rejectDecode(err)}, 0
	}
	f.applies.Add(1)
	res, err := cmd.apply(tx, log.Stamp{Index: l.Index, Time: cmd.time})
	if err != nil && !log.Rejected(err) {
		panic(fmt.Sprintf("raftstore: shard %d: apply index %d: %v", f.shard.ID(), l.Index, err))
	}
	return applyResult{res: res, err: err}, cmd.time
}

// Snapshot implements raft.FSM. It makes the applied state durable (a synced write of the
// shared WAL), because raft may compact the log entries the snapshot covers as soon as the
// snapshot is stored, and returns a marker: the state is in the store, and a follower that needs
// it gets it streamed from there (markerSnapshots).
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	if err := f.db.LogData([]byte("snapshot"), pebble.Sync); err != nil {
		return nil, fmt.Errorf("raftstore: sync before snapshot: %w", err)
	}
	return markerSnapshot{}, nil
}

// Restore implements raft.FSM: it replaces the shard's state with a snapshot from the leader.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	if err := f.shard.Restore(rc); err != nil {
		return err
	}
	applied, err := f.shard.Applied()
	if err != nil {
		return err
	}
	f.applied.Store(applied)
	f.restores.Add(1)
	if f.onApply != nil {
		f.onApply(applied)
	}
	if f.onLogs != nil {
		f.onLogs(log.Touched{All: true})
	}
	return nil
}

// markerSnapshot is a data shard's snapshot: no body (markerSnapshots).
type markerSnapshot struct{}

func (markerSnapshot) Persist(sink raft.SnapshotSink) error { return sink.Close() }

func (markerSnapshot) Release() {}
