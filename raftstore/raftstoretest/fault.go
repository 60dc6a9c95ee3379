package raftstoretest

import (
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/syncd-dev/syncd/raftstore"
)

// CorruptState writes a key that no command wrote into shard's state in the store of a stopped
// node whose data directory is dir (raftstore.Config.Dir; the store is its "db" directory), as a
// disk or a bug might: from then on that replica's state differs from its peers' at every index,
// and only a check of the whole state (a replica check, a snapshot) sees it. The key is under the
// shard's state prefix (log's key layout: 0x01 | shard u32 | table tag) with a tag no table uses,
// so no read of the log package trips over it. Restart the node on dir afterwards.
func CorruptState(t testing.TB, dir string, shard raftstore.ShardID) {
	t.Helper()
	db, err := pebble.Open(filepath.Join(dir, "db"), &pebble.Options{Logger: quietPebble{}})
	if err != nil {
		t.Fatalf("open the store of %s (is its node stopped?): %v", dir, err)
	}
	key := binary.BigEndian.AppendUint32([]byte{0x01}, uint32(shard))
	key = append(key, 0xfe)
	key = append(key, "injected fault"...)
	err = db.Set(key, []byte("stray"), pebble.Sync)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("corrupt shard %d in %s: %v", shard, dir, err)
	}
}
