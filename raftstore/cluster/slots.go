package cluster

import (
	"fmt"

	"slices"
	"strconv"

	"github.com/syncd-dev/syncd/log"
)

// NumSlots is the fixed number of hash slots. Keys hash to slots and the cluster map's slot
// table gives each slot to a shard, so moving a slot moves a fixed share of keys; the count never
// changes once data exists.
const NumSlots = log.NumSlots

// SlotRange gives the hash slots First..Last (inclusive) to Shard.
type SlotRange struct {
	First int     `json:"first"`
	Last  int     `json:"last"`
	Shard ShardID `json:"shard"`
}

// String gives the range's slots as "first-last", or "n" for one slot.
func (r SlotRange) String() string {
	if r.First == r.Last {
		return strconv.Itoa(r.First)
	}
	return strconv.Itoa(r.First) + "-" + strconv.Itoa(r.Last)
}

// EvenSlots spreads the slots evenly over data shards 1..shards: the slot table of a new cluster.
// Slot i goes to shard i*shards/NumSlots+1, which is the layout every release before the table
// lived in the cluster map computed from the shard count, so maps written then read the same.
func EvenSlots(shards int) []SlotRange {
	return rangesOf(func(slot int) ShardID { return ShardID(slot*shards/NumSlots + 1) })
}

// rangesOf returns the slot table giving each slot to owner(slot), as ranges: adjacent slots of
// one shard make one range.
func rangesOf(owner func(slot int) ShardID) []SlotRange {
	var out []SlotRange
	for i := range NumSlots {
		s := owner(i)
		if n := len(out); n > 0 && out[n-1].Shard == s {
			out[n-1].Last = i
		} else {
			out = append(out, SlotRange{First: i, Last: i, Shard: s})
		}
	}
	return out
}

// SlotTable is the lookup form of a cluster map's slot ranges: which shard owns each hash slot.
// It is immutable and safe for concurrent use.
type SlotTable struct {
	owner  [NumSlots]ShardID
	ranges []SlotRange
	shards []ShardID
	users  map[string]ShardID // per-user overrides (moved users), before the slots
	convs  map[string]ShardID // per-conversation overrides (moved conversations)
	splits map[string]SplitInfo
	// replaced is closed when the cluster map's next version replaces this table (Replaced).
	replaced chan struct{}
}

// NewSlotTable checks that ranges give every slot to exactly one data shard, in order, and
// builds the table.
func NewSlotTable(ranges []SlotRange) (*SlotTable, error) {
	t := &SlotTable{ranges: slices.Clone(ranges), replaced: make(chan struct{})}
	next := 0
	for _, r := range ranges {
		if r.First != next || r.Last < r.First || r.Last >= NumSlots {
			return nil, fmt.Errorf("raftstore: slot table: range %d-%d does not continue at slot %d", r.First, r.Last, next)
		}
		if r.Shard == MetaShard {
			return nil, fmt.Errorf("raftstore: slot table: slots %d-%d given to the meta shard", r.First, r.Last)
		}
		for i := r.First; i <= r.Last; i++ {
			t.owner[i] = r.Shard
		}
		t.shards = append(t.shards, r.Shard)
		next = r.Last + 1
	}
	if next != NumSlots {
		return nil, fmt.Errorf("raftstore: slot table: slots %d-%d belong to no shard", next, NumSlots-1)
	}
	slices.Sort(t.shards)
	t.shards = slices.Compact(t.shards)
	return t, nil
}

// Shard returns the shard that owns slot, which must be in [0, NumSlots).
func (t *SlotTable) Shard(slot int) ShardID { return t.owner[slot] }

// UserOverride returns the shard user uid is pinned to by the cluster map's overrides (a moved
// user), if any: it takes precedence over the user's slot.
func (t *SlotTable) UserOverride(uid string) (ShardID, bool) {
	s, ok := t.users[uid]
	return s, ok
}

// Replaced returns a channel closed once a newer version of the cluster map replaces this table
// on this node: a reader that takes it before reading the table learns of every later change.
// It never closes for a table that is not the node's (NewSlotTable's).
func (t *SlotTable) Replaced() <-chan struct{} { return t.replaced }

// Split returns how user uid's stream is split into sub-logs, if it is (moves.go).
func (t *SlotTable) Split(uid string) (SplitInfo, bool) {
	s, ok := t.splits[uid]
	return s, ok
}

// ConvOverride returns the shard conversation conv is pinned to by the cluster map's overrides
// (a moved conversation), if any: it takes precedence over the conversation's slot.
func (t *SlotTable) ConvOverride(conv string) (ShardID, bool) {
	s, ok := t.convs[conv]
	return s, ok
}

// Shards returns every shard that owns a slot, holds an overridden key or receives a move,
// ascending: the shards keys may route to. The slice is shared: do not modify it.
func (t *SlotTable) Shards() []ShardID { return t.shards }

// withKeys returns a copy of t that also routes by the overrides of users and conversations and
// counts their shards among its Shards: the overrides' shards and those moves are copying to.
func (t *SlotTable) withKeys(users, convs map[string]ShardID, receiving []ShardID, splits map[string]SplitInfo) *SlotTable {
	out := *t
	out.users, out.convs, out.splits = users, convs, splits
	out.replaced = make(chan struct{})
	out.shards = slices.Clone(t.shards)
	for _, s := range users {
		out.shards = append(out.shards, s)
	}
	for _, s := range convs {
		out.shards = append(out.shards, s)
	}
	out.shards = append(out.shards, receiving...)
	slices.Sort(out.shards)
	out.shards = slices.Compact(out.shards)
	return &out
}

// Ranges returns the table as ranges, as the cluster map holds it.
func (t *SlotTable) Ranges() []SlotRange { return slices.Clone(t.ranges) }
