package syncd

import (
	"hash/fnv"
	"slices"

	"github.com/syncd-dev/syncd/raftstore"
)

// NumSlots is the fixed number of hash slots keys map to. Shards own slots, so moving a slot moves
// a fixed share of keys; the count never changes once data exists.
const NumSlots = 4096

// Key namespaces: a user and a conversation with the same id are different keys.
const (
	userKeyPrefix = "u:"
	convKeyPrefix = "c:"
)

// SlotTable maps users and conversations to shards through the shard that owns the key's hash
// slot. (Per-key overrides, which give a hot account or a huge group a shard of its own, come with
// the cluster's meta shard.)
//
// A SlotTable is immutable once built and safe for concurrent use.
type SlotTable struct {
	slots [NumSlots]raftstore.ShardID
}

// NewSlotTable spreads the slots evenly over shards, in the order given.
func NewSlotTable(shards []raftstore.ShardID) *SlotTable {
	t := &SlotTable{}
	for i := range t.slots {
		t.slots[i] = shards[i*len(shards)/NumSlots]
	}
	return t
}

// Slot returns the hash slot of a key: FNV-1a (64-bit), folded. The function is part of the
// persisted layout (it decides where data lives), so it must never change. CRC32 was rejected:
// it is linear, so keys differing only in their namespace prefix landed in related slots.
func Slot(key string) int {
	h := fnv.New64a()
	h.Write([]byte(key))
	v := h.Sum64()
	return int((v ^ v>>32) % NumSlots)
}

// UserShard returns the shard holding user uid's log.
func (t *SlotTable) UserShard(uid string) raftstore.ShardID { return t.shardOf(userKeyPrefix + uid) }

// ConvShard returns the home shard of conversation conv, where its order is decided.
func (t *SlotTable) ConvShard(conv string) raftstore.ShardID { return t.shardOf(convKeyPrefix + conv) }

func (t *SlotTable) shardOf(key string) raftstore.ShardID { return t.slots[Slot(key)] }

// Shards returns every shard that owns a slot, ascending.
func (t *SlotTable) Shards() []raftstore.ShardID {
	out := slices.Clone(t.slots[:])
	slices.Sort(out)
	return slices.Compact(out)
}
