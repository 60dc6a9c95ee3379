package adminapi

import (
	"strconv"
	"time"
)

// Backups (GET /v1/backup/cluster, GET /v1/backup/shards/{shard}; syncctl backup, syncd restore).
const (
	// BackupIndexHeader carries the Raft index a backup part is as of: the cluster map's index
	// for the cluster state, the shard's applied index for a shard's state.
	BackupIndexHeader = "X-Syncd-Index"
	// BackupSumTrailer is the HTTP trailer after a shard's state: the SHA-256 of the stream, hex.
	// Its absence means the stream was cut short.
	BackupSumTrailer = "X-Syncd-Sha256"
	// BackupManifestFile names the manifest in a backup directory; ClusterStateFile the control
	// plane's state; a shard's state is in ShardFile(id).
	BackupManifestFile = "manifest.json"
	ClusterStateFile   = "cluster.json"
	// BackupFormat is the version of the backup directory's layout and manifest.
	BackupFormat = 1
)

// ShardFile names the file of data shard id's state in a backup directory.
func ShardFile(id uint32) string { return "shard-" + strconv.FormatUint(uint64(id), 10) + ".snap" }

// BackupManifest describes a backup directory: what syncctl backup copied, from where, and the
// digests syncd restore checks before it writes anything.
type BackupManifest struct {
	Format  int       `json:"format"`  // BackupFormat
	Version string    `json:"version"` // the build of syncctl that took it
	Started time.Time `json:"started"` // when the backup began: everything acknowledged before is in it
	Done    time.Time `json:"done"`
	// MapIndex is the cluster map's Raft index, the same before and after the shards were copied.
	MapIndex uint64        `json:"map_index"`
	Shards   []BackupShard `json:"shards"`
}

// BackupShard is one data shard's state in a backup.
type BackupShard struct {
	Shard  uint32 `json:"shard"`
	Index  uint64 `json:"index"` // the Raft index its state is as of
	Node   string `json:"node"`  // the node whose replica it was read from
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}
