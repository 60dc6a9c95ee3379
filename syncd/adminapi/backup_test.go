package adminapi

import (
	"maps"
	"slices"
	"testing"
)

// TestStaleBackupShards: a shard's copy is stale when another shard's copy has trimmed from its
// outbox what the first has not applied; a copy at (or past) the trim point, or a source that
// trimmed nothing, is not.
func TestStaleBackupShards(t *testing.T) {
	shards := []BackupShard{
		{Shard: 1, OutboxFirst: 11, Marks: map[uint32]uint64{2: 5}},       // trimmed up to 10
		{Shard: 2, OutboxFirst: 6, Marks: map[uint32]uint64{1: 10, 3: 0}}, // has applied 1's 10
		{Shard: 3, OutboxFirst: 1, Marks: map[uint32]uint64{1: 9, 2: 5}},  // misses 1's 10
	}
	if got := StaleBackupShards(shards); !slices.Equal(got, []uint32{3}) {
		t.Errorf("stale %v, want [3]", got)
	}
	shards[2].Marks[1] = 10
	if got := StaleBackupShards(shards); len(got) != 0 {
		t.Errorf("stale %v, want none", got)
	}
	shards[0].Marks[2] = 4 // 2 trimmed up to 5
	if got := StaleBackupShards(shards); !slices.Equal(got, []uint32{1}) {
		t.Errorf("stale %v, want [1]", got)
	}
}

// TestFanoutHeader: the fan-out state survives its header text, with and without marks, and a
// damaged text is refused.
func TestFanoutHeader(t *testing.T) {
	for _, marks := range []map[uint32]uint64{{}, {1: 7}, {3: 1, 1: 9, 2: 0}} {
		first, got, err := ParseFanout(FormatFanout(42, marks))
		if err != nil || first != 42 || !maps.Equal(got, marks) {
			t.Errorf("%v: %d %v %v", marks, first, got, err)
		}
	}
	for _, bad := range []string{"", "x;1=2", "4;1=", "4;1:2", "4;1=2,"} {
		if _, _, err := ParseFanout(bad); err == nil {
			t.Errorf("%q was not refused", bad)
		}
	}
}
