package cluster

import (
	"github.com/syncd-dev/syncd/log"
)

// Routing maps users and conversations to shards — "which shard holds X?" in one call: a key
// hashes to a slot, and the cluster map's slot table (SlotTable) names the shard owning the slot. A server's table
// follows the cluster map, so every node routes alike whatever its own -shards says. A moved
// user or conversation is pinned to its shard by an override in the map, which a move sets
// once the key's state is there (moves.go).
//
// A Routing is safe for concurrent use.
type Routing struct {
	table func() *SlotTable
}

// Even returns the routing of a cluster whose slots are spread evenly over shards 1..shards, as
// a new cluster's are: for tools and tests that route like the servers.
func Even(shards int) *Routing {
	t, err := NewSlotTable(EvenSlots(shards))
	if err != nil {
		panic(err) // EvenSlots always covers every slot
	}
	return &Routing{table: func() *SlotTable { return t }}
}

// Routing routes by the slot table of this node's cluster map; the server waits for the map
// before it routes, so a nil table at routing time is a bug and panics.
func (c *Cluster) Routing() *Routing {
	return &Routing{table: func() *SlotTable {
		t := c.SlotTable()
		if t == nil {
			panic("cluster: a key was routed before the cluster map was known")
		}
		return t
	}}
}

// UserShard returns the shard holding user uid's log: the shard the cluster map's overrides pin a
// moved user to, else the one owning the user's slot.
func (t *Routing) UserShard(uid string) ShardID {
	st := t.table()
	if s, ok := st.UserOverride(uid); ok {
		return s
	}
	return st.Shard(log.UserSlot(uid))
}

// ConvShard returns the home shard of conversation conv, where its order is decided: the shard
// the cluster map's overrides pin a moved conversation to, else the one owning its slot.
func (t *Routing) ConvShard(conv string) ShardID {
	st := t.table()
	if s, ok := st.ConvOverride(conv); ok {
		return s
	}
	return st.Shard(log.ConvSlot(conv))
}

// Replaced returns a channel closed once the cluster map changes after this call: take it before
// reading the table, and no change is missed.
func (t *Routing) Replaced() <-chan struct{} { return t.table().Replaced() }

// Split returns how user uid's stream is split into sub-logs, if the cluster map says it is:
// sub-log i is the user log log.SubLog(uid, i), routed by UserShard like any user's.
func (t *Routing) Split(uid string) (SplitInfo, bool) { return t.table().Split(uid) }

// Logs returns the user logs holding uid's stream: uid's own, then, if the stream is split, each
// other sub-log's (log.SubLog), in sub-log order.
func (t *Routing) Logs(uid string) []string {
	logs := []string{uid}
	if split, ok := t.Split(uid); ok {
		for i := 1; i < split.Subs; i++ {
			logs = append(logs, log.SubLog(uid, i))
		}
	}
	return logs
}

// SlotShard returns the shard owning hash slot slot in the slot table.
func (t *Routing) SlotShard(slot int) ShardID { return t.table().Shard(slot) }

// Shards returns every shard a key may route to (it owns a slot, holds a moved user or receives
// one), ascending. The slice is shared: do not modify it.
func (t *Routing) Shards() []ShardID { return t.table().Shards() }
