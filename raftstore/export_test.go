package raftstore

import (
	"encoding/binary"
	"fmt"
	"io"
	"time"
)

// TransferLeadershipAt is TransferLeadership to a target whose replica has applied
// targetApplied (for tests of the guard in transferLeadership).
func (n *Node) TransferLeadershipAt(shard ShardID, id string, targetApplied uint64) error {
	return n.transferTo(shard, id, targetApplied)
}

// CurrentTerm returns the Raft term of this node's replica of shard (for tests).
func (n *Node) CurrentTerm(shard ShardID) uint64 {
	r, _ := n.replica(shard)
	return r.raft.CurrentTerm()
}

// ForwardProposal returns the bytes a forwarding connection carries for one proposal of cmd to
// shard, mux header included, with cmd.Time as it is (Propose would strip it): what an outsider
// writes to a node's Raft port, for the node-plane tests.
func ForwardProposal(shard ShardID, cmd Command) ([]byte, error) {
	data, err := cmd.encode()
	if err != nil {
		return nil, err
	}
	req := fwdRequest{id: 1, kind: fwdPropose, shard: shard, command: data}
	return append(binary.BigEndian.AppendUint32([]byte(fwdMagic), 0), req.encode()...), nil
}

// ReadForwardAnswer reads one answer from a forwarding connection: the node's Result and error,
// or the error that ended the connection.
func ReadForwardAnswer(r io.Reader) (Result, error) {
	body, err := readFrame(r)
	if err != nil {
		return Result{}, fmt.Errorf("reading the answer: %w", err)
	}
	resp, err := decodeFwdResponse(body)
	if err != nil {
		return Result{}, err
	}
	return resp.res, resp.err
}

// RaftHeader is the mux header that opens a Raft connection for shard.
func RaftHeader(shard ShardID) []byte {
	return binary.BigEndian.AppendUint32([]byte(muxMagic), uint32(shard))
}

// SetDiskCheckInterval makes a node of cfg measure its free disk space every d instead of every
// second (for tests).
func SetDiskCheckInterval(cfg *Config, d time.Duration) { cfg.diskCheckEvery = d }

// FlushStore starts a flush of the node's store's memtables and does not wait for it (for
// tests: the disk-full tests make it fail).
func (n *Node) FlushStore() error {
	_, err := n.db.AsyncFlush()
	return err
}

// NoSpaceRetry is how often Pebble retries a write that failed for lack of space (for tests).
const NoSpaceRetry = noSpaceRetry
