package cluster

import (
	"fmt"
	"testing"
)

// The slot table spreads keys over every shard, keeps users and conversations apart, and never
// changes its answer for a key.
func TestSlotTableSpreadsAndIsStable(t *testing.T) {
	shards := []ShardID{1, 2, 3, 4, 5, 6, 7, 8}
	st := Even(len(shards))
	if got := st.Shards(); fmt.Sprint(got) != fmt.Sprint(shards) {
		t.Fatalf("Shards() = %v, want %v", got, shards)
	}
	counts := map[ShardID]int{}
	for i := 0; i < 8000; i++ {
		uid := fmt.Sprintf("user-%d", i)
		s := st.UserShard(uid)
		if s != st.UserShard(uid) || s != Even(len(shards)).UserShard(uid) {
			t.Fatalf("UserShard(%q) is not stable", uid)
		}
		counts[s]++
	}
	for _, s := range shards {
		if counts[s] < 700 || counts[s] > 1300 { // 1000 expected
			t.Errorf("shard %d got %d of 8000 users", s, counts[s])
		}
	}
	same := 0
	for i := 0; i < 1000; i++ {
		id := fmt.Sprint("x", i)
		if st.UserShard(id) == st.ConvShard(id) {
			same++
		}
	}
	if same > 250 { // one in eight expected by chance
		t.Errorf("user and conversation with the same id share a shard %d times in 1000", same)
	}
}
