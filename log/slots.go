package log

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Hash slots: the unit a shard's keyspace is divided into and moved by. A key hashes to one of
// NumSlots slots, and the cluster map's slot table names the shard owning each. The function is
// here, not in the routing package, because a slot move (rangemove.go) must tell on every
// replica, at apply, which of a shard's keys are in the range it moves.

// NumSlots is the fixed number of hash slots. It never changes once data exists.
const NumSlots = 4096

// Key namespaces hashed into slots: a user and a conversation with the same id are different keys.
const (
	userSlotPrefix = "u:"
	convSlotPrefix = "c:"
)

// UserSlot returns the hash slot of user uid's log.
func UserSlot(uid string) int { return slotOf(userSlotPrefix + uid) }

// ConvSlot returns the hash slot of conversation conv.
func ConvSlot(conv string) int { return slotOf(convSlotPrefix + conv) }

// slotOf is FNV-1a (64-bit), folded. It is part of the persisted layout (it decides where data
// lives), so it must never change. CRC32 was rejected: it is linear, so keys differing only in
// their namespace prefix landed in related slots.
func slotOf(key string) int {
	h := fnv.New64a()
	h.Write([]byte(key))
	v := h.Sum64()
	return int((v ^ v>>32) % NumSlots)
}

// SlotSpan is the hash slots First..Last, inclusive.
type SlotSpan struct {
	First int `json:"first"`
	Last  int `json:"last"`
}

// String gives the span as "first-last".
func (r SlotSpan) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// ParseSlotSpan parses a span as String gives it, or one slot as "n".
func ParseSlotSpan(s string) (SlotSpan, error) {
	first, last, ok := strings.Cut(s, "-")
	if !ok {
		last = first
	}
	f, err1 := strconv.Atoi(first)
	l, err2 := strconv.Atoi(last)
	span := SlotSpan{First: f, Last: l}
	if err1 != nil || err2 != nil || !span.Valid() {
		return span, fmt.Errorf("slots %q: want <first>-<last> within 0-%d", s, NumSlots-1)
	}
	return span, nil
}

// Valid reports whether the span names at least one slot, all of them in [0, NumSlots).
func (r SlotSpan) Valid() bool { return 0 <= r.First && r.First <= r.Last && r.Last < NumSlots }

// Contains reports whether slot is in the span.
func (r SlotSpan) Contains(slot int) bool { return r.First <= slot && slot <= r.Last }

// Overlaps reports whether the spans share a slot.
func (r SlotSpan) Overlaps(o SlotSpan) bool { return r.First <= o.Last && o.First <= r.Last }
