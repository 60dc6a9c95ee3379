package syncd

import (
	"hash/fnv"

	"github.com/syncd-dev/syncd/raftstore"
)

// NumSlots is the fixed number of hash slots keys map to (raftstore.NumSlots).
const NumSlots = raftstore.NumSlots

// Key namespaces: a user and a conversation with the same id are different keys.
const (
	userKeyPrefix = "u:"
	convKeyPrefix = "c:"
)

// SlotTable maps users and conversations to shards: a key hashes to a slot, and the cluster
// map's slot table (raftstore.SlotTable) names the shard owning the slot. A server's table
// follows the cluster map, so every node routes alike whatever its own -shards says. (Per-key
// overrides, which give a hot account or a huge group a shard of its own, come with moving keys
// between shards: an override set without moving the key's data would strand it.)
//
// A SlotTable is safe for concurrent use.
type SlotTable struct {
	table func() *raftstore.SlotTable
}

// NewSlotTable returns the routing of a cluster whose slots are spread evenly over shards
// 1..shards, as a new cluster's are: for tools and tests that route like the servers.
func NewSlotTable(shards int) *SlotTable {
	t, err := raftstore.NewSlotTable(raftstore.EvenSlots(shards))
	if err != nil {
		panic(err) // EvenSlots always covers every slot
	}
	return &SlotTable{table: func() *raftstore.SlotTable { return t }}
}

// clusterSlotTable routes by node's cluster map, which the server waits for before it routes.
func clusterSlotTable(node *raftstore.Node) *SlotTable {
	return &SlotTable{table: func() *raftstore.SlotTable {
		t := node.SlotTable()
		if t == nil {
			panic("syncd: a key was routed before the cluster map was known")
		}
		return t
	}}
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

func (t *SlotTable) shardOf(key string) raftstore.ShardID { return t.table().Shard(Slot(key)) }

// Shards returns every shard that owns a slot, ascending. The slice is shared: do not modify it.
func (t *SlotTable) Shards() []raftstore.ShardID { return t.table().Shards() }
