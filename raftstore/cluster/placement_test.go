package cluster

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

func loads(m map[ShardID][]string) map[string]int {
	l := map[string]int{}
	for _, members := range m {
		for _, n := range members {
			l[n]++
		}
	}
	return l
}

// TestPlaceExamples walks through a cluster's life: first placement, a node joining (moves one
// replica at a time until balanced), a node leaving (its replicas re-placed at once).
func TestPlaceExamples(t *testing.T) {
	shards := shardRange(8)
	nodes := []string{"n1", "n2", "n3"}
	m := place(nil, shards, nodes, 3, true)
	for s, members := range m {
		if !slices.Equal(members, nodes) {
			t.Fatalf("3 nodes, rf 3: shard %d on %v", s, members)
		}
	}
	// A fourth node joins: nothing needs repair, so it takes replicas one move per call.
	nodes = append(nodes, "n4")
	moves := 0
	for {
		next := place(m, shards, nodes, 3, true)
		if maps.EqualFunc(next, m, slices.Equal) {
			break
		}
		changed := 0
		for s := range next {
			if !slices.Equal(next[s], m[s]) {
				changed++
			}
		}
		if changed != 1 {
			t.Fatalf("a rebalancing call changed %d shards", changed)
		}
		m, moves = next, moves+1
	}
	l := loads(m)
	if l["n4"] < 5 || l["n1"] > 7 || moves != l["n4"] {
		t.Fatalf("after the join: loads %v in %d moves", l, moves)
	}
	// n2 leaves: every shard it held gets another node in the same call.
	next := place(m, shards, []string{"n1", "n3", "n4"}, 3, true)
	for s, members := range next {
		if len(members) != 3 || slices.Contains(members, "n2") {
			t.Fatalf("after n2 left: shard %d on %v", s, members)
		}
		for _, keep := range m[s] {
			if keep != "n2" && !slices.Contains(members, keep) {
				t.Fatalf("shard %d lost member %s needlessly: %v → %v", s, keep, m[s], members)
			}
		}
	}
	// Unsettled: repairs happen, rebalancing waits.
	if got := place(m, shards, []string{"n1", "n2", "n3", "n4", "n5"}, 3, false); !maps.EqualFunc(got, m, slices.Equal) {
		t.Fatalf("an unsettled assignment was rebalanced: %v", got)
	}
	// Fewer nodes than rf: every shard on every node.
	for _, members := range place(m, shards, []string{"n3"}, 3, true) {
		if !slices.Equal(members, []string{"n3"}) {
			t.Fatalf("one node left: %v", members)
		}
	}
}

// TestPlaceProperties checks, for random clusters, that placement never strays from its rules.
func TestPlaceProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		shards := shardRange(rapid.IntRange(1, 12).Draw(t, "shards"))
		all := []string{"n1", "n2", "n3", "n4", "n5", "n6"}
		eligible := rapid.SliceOfNDistinct(rapid.SampledFrom(all), 1, len(all), rapid.ID[string]).Draw(t, "eligible")
		slices.Sort(eligible)
		rf := rapid.IntRange(1, 5).Draw(t, "rf")
		current := map[ShardID][]string{}
		for _, s := range shards {
			current[s] = rapid.SliceOfNDistinct(rapid.SampledFrom(all), 0, 4, rapid.ID[string]).Draw(t, fmt.Sprint("shard", s))
		}
		settled := rapid.Bool().Draw(t, "settled")
		got := place(current, shards, eligible, rf, settled)
		want := min(rf, len(eligible))
		repairs := false
		for _, s := range shards {
			members := got[s]
			if len(members) != want || len(slices.Compact(slices.Clone(members))) != want {
				t.Fatalf("shard %d: %v, want %d distinct members", s, members, want)
			}
			kept := 0
			for _, m := range members {
				if !slices.Contains(eligible, m) {
					t.Fatalf("shard %d on ineligible %s", s, m)
				}
				if slices.Contains(current[s], m) {
					kept++
				}
			}
			eligibleBefore := 0
			for _, m := range current[s] {
				if slices.Contains(eligible, m) {
					eligibleBefore++
				}
			}
			if eligibleBefore != want || eligibleBefore != len(current[s]) {
				repairs = true // short, long, or holding an ineligible member
			}
			// A member that was eligible is dropped only to get down to rf, or by the one move.
			if kept < min(eligibleBefore, want)-1 {
				t.Fatalf("shard %d: kept %d of %d eligible members: %v → %v", s, kept, eligibleBefore, current[s], members)
			}
		}
		if repairs {
			return
		}
		// Nothing needed repair: unsettled, nothing moves; settled, at most one shard changes,
		// by one member.
		changed := 0
		for _, s := range shards {
			before := slices.Sorted(slices.Values(current[s]))
			if !slices.Equal(before, got[s]) {
				changed++
			}
		}
		if (!settled && changed != 0) || changed > 1 {
			t.Fatalf("settled=%v: %d shards changed without a repair: %v → %v", settled, changed, current, got)
		}
	})
}
