package raftstore

import (
	"errors"
	"io"

	"github.com/hashicorp/raft"

	"github.com/syncd-dev/syncd/log"
)

// A data shard's Raft snapshots are markers, and the state a follower installs is read from the
// store when the follower asks for it (issue #27).
//
// hashicorp/raft compacts a group's log only after a snapshot, and its file store keeps each
// snapshot's whole body. A data shard's state machine keeps its state in Pebble already (fsm.go:
// persistent, synced before a snapshot), so a body written at every snapshot is a second and third
// copy of the shard, rewritten every SnapshotThreshold entries: with 120 MB of state it was 260
// MB of the writes of a one-minute run, 2× the database on disk, and it grows with the state, not
// the traffic. So a local snapshot writes no body (a marker: its index, term and configuration),
// and opening a marker — only to send a follower that fell behind the log — streams a Pebble
// snapshot of the shard as it is then. That state is at an applied index A at or past the
// marker's index I (state only moves forward); the follower installs it, raft sends it the log
// from I+1, and its fsm skips every entry at or below A, as it does after a restart.
//
// Snapshots with a body — received from a leader (the follower restores from the file), written
// by Seed or by an earlier version — are opened as they are.
type markerSnapshots struct {
	raft.SnapshotStore // the file store that holds markers and bodies
	state              *log.Shard
}

// Open implements raft.SnapshotStore: a marker's state is streamed from the live store; a
// snapshot with a body is the file store's.
func (m *markerSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := m.SnapshotStore.Open(id)
	if err != nil || meta.Size > 0 {
		return meta, rc, err
	}
	if err := rc.Close(); err != nil {
		return nil, nil, err
	}
	snap := m.state.NewSnapshot()
	// raft sends Size bytes and the follower reads exactly that many, so the stream is sized
	// first: one pass to count, one to send. Both read the same Pebble snapshot, so the bytes
	// are the same; a shard's state streams at hundreds of MB/s, and this runs only for a
	// follower the log cannot catch up.
	size, err := snap.WriteTo(io.Discard)
	if err != nil {
		return nil, nil, errors.Join(err, snap.Close())
	}
	sized := *meta
	sized.Size = size
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := snap.WriteTo(pw)
		pw.CloseWithError(err) // nil: the reader sees EOF after the last byte
	}()
	return &sized, &streamedSnapshot{PipeReader: pr, done: done, snap: snap}, nil
}

// streamedSnapshot is a marker's state as it streams: closing it stops the writer and releases
// the Pebble snapshot.
type streamedSnapshot struct {
	*io.PipeReader
	done chan struct{}
	snap *log.Snapshot
}

func (s *streamedSnapshot) Close() error {
	s.PipeReader.Close() // a writer still writing gets io.ErrClosedPipe and ends
	<-s.done
	return s.snap.Close()
}
