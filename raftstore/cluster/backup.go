package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ErrMoving refuses a backup while a move or split is in progress: its shards are captured at
// different moments, so a move's source and destination could disagree about which holds what.
var ErrMoving = errors.New("cluster: a move is in progress")

// BackupState returns the control plane's state for a backup: the cluster map and revocations,
// as the meta group's snapshots hold them, and the map's index, which a backup compares before
// and after it copies the shards (a change in between means a move or a node change raced it).
// It refuses while a move or split is in progress (ErrMoving).
func (c *Cluster) BackupState() (state []byte, index uint64, err error) {
	st := c.fsm.state()
	if len(st.Moves) > 0 {
		return nil, 0, fmt.Errorf("%w (%d): wait for it to finish (syncctl cluster) or cancel it, then back up", ErrMoving, len(st.Moves))
	}
	b, err := json.Marshal(st)
	return b, st.Index, err
}

// RestoreState turns a backed-up state (BackupState's) into the first state of a new cluster
// whose only node is id at raftAddr: every data shard is placed on it alone and the old nodes
// are forgotten. What says where users and conversations live (the slot table, overrides,
// splits) and the revocations are kept as they were. Nodes that join later get replicas as the
// replication factor asks.
func RestoreState(state []byte, id, raftAddr string) ([]byte, uint64, error) {
	var st metaState
	if err := json.Unmarshal(state, &st); err != nil {
		return nil, 0, fmt.Errorf("cluster: the backup's cluster state does not decode: %w", err)
	}
	if st.Shards <= 0 {
		return nil, 0, errors.New("cluster: the backup's cluster state has no data shards")
	}
	if len(st.Moves) > 0 {
		return nil, 0, fmt.Errorf("%w in the backup's cluster state: back up again once it is done", ErrMoving)
	}
	st.Nodes = map[string]NodeInfo{id: {ID: id, RaftAddr: raftAddr}}
	replicas := map[ShardID][]string{}
	for s := range st.Replicas {
		replicas[s] = []string{id}
	}
	for s := ShardID(1); s <= ShardID(st.Shards); s++ {
		replicas[s] = []string{id}
	}
	st.Replicas, st.Creating = replicas, nil
	b, err := json.Marshal(st)
	return b, st.Index, err
}
