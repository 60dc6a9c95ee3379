package adminapi

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Backups (GET /v1/backup/cluster, GET /v1/backup/shards/{shard}; syncctl backup, syncd restore).
const (
	// BackupIndexHeader carries the Raft index a backup part is as of: the cluster map's index
	// for the cluster state, the shard's applied index for a shard's state.
	BackupIndexHeader = "X-Syncd-Index"
	// BackupFanoutHeader carries a shard copy's fan-out state (FormatFanout): its outbox's first
	// retained position and its marks per source shard, which StaleBackupShards compares.
	BackupFanoutHeader = "X-Syncd-Fanout"
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
	// OutboxFirst is the first outbox position its copy retains, and Marks, per source shard, the
	// highest outbox position of it the copy has applied (BackupFanoutHeader).
	OutboxFirst uint64            `json:"outbox_first"`
	Marks       map[uint32]uint64 `json:"marks,omitempty"`
}

// StaleBackupShards returns the shards of a backup whose copy misses a delivery another shard's
// copy no longer holds in its outbox: the record was delivered and trimmed between the two
// copies, so neither has it. Copy them again: a later copy has applied at least what every
// earlier one trimmed. None: no outbox record is lost between the copies.
func StaleBackupShards(shards []BackupShard) []uint32 {
	var stale []uint32
	for _, dest := range shards {
		for _, src := range shards {
			if src.Shard != dest.Shard && src.OutboxFirst > 1 && dest.Marks[src.Shard] < src.OutboxFirst-1 {
				stale = append(stale, dest.Shard)
				break
			}
		}
	}
	return stale
}

// FormatFanout encodes a copy's fan-out state for BackupFanoutHeader: "first;src=mark,...".
func FormatFanout(first uint64, marks map[uint32]uint64) string {
	ids := make([]uint32, 0, len(marks))
	for id := range marks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	pairs := make([]string, len(ids))
	for i, id := range ids {
		pairs[i] = fmt.Sprintf("%d=%d", id, marks[id])
	}
	return strconv.FormatUint(first, 10) + ";" + strings.Join(pairs, ",")
}

// ParseFanout decodes FormatFanout's text.
func ParseFanout(s string) (first uint64, marks map[uint32]uint64, err error) {
	head, rest, _ := strings.Cut(s, ";")
	if first, err = strconv.ParseUint(head, 10, 64); err != nil {
		return 0, nil, fmt.Errorf("fan-out state %q: %w", s, err)
	}
	marks = map[uint32]uint64{}
	if rest == "" {
		return first, marks, nil
	}
	for kv := range strings.SplitSeq(rest, ",") {
		k, v, ok := strings.Cut(kv, "=")
		id, err1 := strconv.ParseUint(k, 10, 32)
		m, err2 := strconv.ParseUint(v, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return 0, nil, fmt.Errorf("fan-out state %q: bad mark %q", s, kv)
		}
		marks[uint32(id)] = m
	}
	return first, marks, nil
}
