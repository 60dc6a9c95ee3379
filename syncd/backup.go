package syncd

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// RestoreReport says what Restore wrote.
type RestoreReport struct {
	Manifest adminapi.BackupManifest
	// Renewed is how many logs got a new epoch (all of them).
	Renewed int
}

// Restore writes the data directory of the first node of a new cluster, cfg's, from the backup
// in dir (syncctl backup's): every data shard as of its backed-up Raft index and the cluster map,
// with this node as the only member of every group. Start the node with cfg afterwards; other
// nodes join it (-join) and get replicas as the replication factor asks. The backup is checked
// whole (manifest, digests) before anything is written, and cfg.Dir must hold no store.
//
// Every log gets a new epoch behind a restore fence at its restored head (log.Shard.RenewEpochs):
// a device whose cursor is within what the backup holds is told to continue in the new epoch from
// where it is; one past it saw entries the backup lost and is told "epoch changed" and resyncs,
// rather than skipping the new entries that take those positions (G3).
//
// Secrets are not part of a backup: the new nodes need the old cluster's token secret, else
// every device's token is refused, and a node plane CA (the old one or a new one).
func Restore(cfg Config, dir string) (RestoreReport, error) {
	var rep RestoreReport
	b, err := os.ReadFile(filepath.Join(dir, adminapi.BackupManifestFile))
	if err != nil {
		return rep, fmt.Errorf("syncd: restore: %w (a backup directory without %s is an interrupted backup)", err, adminapi.BackupManifestFile)
	}
	m := &rep.Manifest
	if err := json.Unmarshal(b, m); err != nil {
		return rep, fmt.Errorf("syncd: restore: %s does not decode: %w", adminapi.BackupManifestFile, err)
	}
	if m.Format != adminapi.BackupFormat {
		return rep, fmt.Errorf("syncd: restore: backup format %d, this build reads %d: restore with the build that took it", m.Format, adminapi.BackupFormat)
	}
	for _, s := range m.Shards {
		if err := checkBackupFile(filepath.Join(dir, adminapi.ShardFile(s.Shard)), s); err != nil {
			return rep, fmt.Errorf("syncd: restore: shard %d: %w", s.Shard, err)
		}
	}
	if stale := adminapi.StaleBackupShards(m.Shards); len(stale) > 0 {
		return rep, fmt.Errorf("syncd: restore: the copies of shards %v miss deliveries their sources' copies no longer hold: "+
			"the backup is inconsistent (syncctl backup copies such shards again); take another", stale)
	}
	state, err := os.ReadFile(filepath.Join(dir, adminapi.ClusterStateFile))
	if err != nil {
		return rep, fmt.Errorf("syncd: restore: %w", err)
	}
	meta, index, err := cluster.RestoreState(state, cfg.NodeID, cfg.RaftAddr)
	if err != nil {
		return rep, fmt.Errorf("syncd: restore: %w", err)
	}
	shards := make([]raftstore.SeedShard, 0, len(m.Shards))
	for _, s := range m.Shards {
		path := filepath.Join(dir, adminapi.ShardFile(s.Shard))
		shards = append(shards, raftstore.SeedShard{ID: raftstore.ShardID(s.Shard), Open: func() (io.ReadCloser, error) { return os.Open(path) }})
	}
	epoch := log.Epoch(time.Now().UnixNano()) // what a log created now gets (log.newEpoch)
	res, err := raftstore.Seed(raftstore.Config{NodeID: cfg.NodeID, Dir: cfg.Dir, RaftAddr: cfg.RaftAddr, Logger: cfg.Logger}, meta, index, shards, epoch)
	if err != nil {
		return rep, fmt.Errorf("syncd: restore: %w", err)
	}
	for _, s := range m.Shards {
		if got := res.Applied[raftstore.ShardID(s.Shard)]; got != s.Index {
			return rep, fmt.Errorf("syncd: restore: shard %d's state is as of index %d, the manifest says %d", s.Shard, got, s.Index)
		}
	}
	rep.Renewed = res.Renewed
	return rep, nil
}

// checkBackupFile checks that path holds s's bytes (size and SHA-256).
func checkBackupFile(path string, s adminapi.BackupShard) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sum := sha256.New()
	n, err := io.Copy(sum, f)
	if err != nil {
		return err
	}
	if got := hex.EncodeToString(sum.Sum(nil)); n != s.Bytes || got != s.SHA256 {
		return errors.New("the file does not match the manifest (size or SHA-256): the backup is damaged")
	}
	return nil
}
