package cluster

import (
	"cmp"
	"maps"
	"slices"
)

// Placement decides which nodes hold a replica of each data shard. It is a pure function of the
// current assignment and the nodes that may hold replicas, so the meta leader can recompute it
// at any time and every outcome can be tested in isolation.
//
// It changes as little as possible, because every change costs a replica copy:
//   - a shard keeps the members that are still eligible;
//   - a shard short of replicas (a new shard, or a member that left or died) takes the eligible
//     nodes holding the fewest replicas;
//   - a shard with too many (the replication factor went down) drops its most loaded members;
//   - only when nothing needs repair, and the most loaded node holds two or more replicas more
//     than the least loaded, one replica moves from the one to the other (one move at a time:
//     the caller calls again once the move is done).

// place returns the desired members of every shard in shards. current holds the present
// assignment (possibly missing shards), eligible the nodes that may hold replicas, rf the
// replication factor (capped by the number of eligible nodes). settled reports whether the
// present assignment is in effect everywhere; only then is a rebalancing move made.
func place(current map[ShardID][]string, shards []ShardID, eligible []string, rf int, settled bool) map[ShardID][]string {
	out := make(map[ShardID][]string, len(shards))
	if len(eligible) == 0 {
		for _, s := range shards {
			out[s] = slices.Clone(current[s])
		}
		return out
	}
	rf = min(max(rf, 1), len(eligible))
	ok := map[string]bool{}
	for _, n := range eligible {
		ok[n] = true
	}
	load := map[string]int{}
	for _, n := range eligible {
		load[n] = 0
	}
	// Keep the eligible members.
	for _, s := range shards {
		for _, m := range current[s] {
			if ok[m] {
				out[s] = append(out[s], m)
				load[m]++
			}
		}
	}
	repaired := false
	for _, s := range slices.Sorted(slices.Values(shards)) {
		members := out[s]
		for len(members) > rf { // drop the most loaded
			i := slices.IndexFunc(members, func(m string) bool { return m == mostLoaded(members, load) })
			load[members[i]]--
			members = slices.Delete(members, i, i+1)
			repaired = true
		}
		for len(members) < rf { // add the least loaded non-members
			n := leastLoaded(eligible, load, members)
			members = append(members, n)
			load[n]++
			repaired = true
		}
		out[s] = members
	}
	if repaired || !settled {
		return normalize(out)
	}
	// One rebalancing move: from the most to the least loaded node, of a shard that has the one
	// and not the other.
	nodes := slices.Sorted(maps.Keys(load))
	hi := slices.MaxFunc(nodes, func(a, b string) int { return cmp.Or(cmp.Compare(load[a], load[b]), cmp.Compare(b, a)) })
	lo := slices.MinFunc(nodes, func(a, b string) int { return cmp.Or(cmp.Compare(load[a], load[b]), cmp.Compare(a, b)) })
	if load[hi]-load[lo] < 2 {
		return normalize(out)
	}
	for _, s := range slices.Sorted(slices.Values(shards)) {
		members := out[s]
		if slices.Contains(members, hi) && !slices.Contains(members, lo) {
			out[s] = append(slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m == hi }), lo)
			break
		}
	}
	return normalize(out)
}

// leastLoaded returns the eligible node outside members holding the fewest replicas (ties: the
// smallest id).
func leastLoaded(eligible []string, load map[string]int, members []string) string {
	best := ""
	for _, n := range eligible {
		if slices.Contains(members, n) {
			continue
		}
		if best == "" || load[n] < load[best] || (load[n] == load[best] && n < best) {
			best = n
		}
	}
	return best
}

// mostLoaded returns the member holding the most replicas (ties: the largest id).
func mostLoaded(members []string, load map[string]int) string {
	best := members[0]
	for _, m := range members[1:] {
		if load[m] > load[best] || (load[m] == load[best] && m > best) {
			best = m
		}
	}
	return best
}

// normalize sorts every member list, so assignments compare equal regardless of order.
func normalize(m map[ShardID][]string) map[ShardID][]string {
	for s := range m {
		slices.Sort(m[s])
	}
	return m
}

// shardRange returns the data shard ids 1..n.
func shardRange(n int) []ShardID {
	out := make([]ShardID, n)
	for i := range out {
		out[i] = ShardID(i + 1)
	}
	return out
}
