package test

// The fault suite: each scenario starts a 3-node cluster of real syncd processes, runs the
// workload (cluster_workload_test.go) through a fault schedule, heals everything and lets the
// checker (cluster_checker_test.go) verify G1–G6 on what the devices stored and on every node's
// store. The test log holds the timeline: faults, leaders, acks, what was checked.
//
// Short mode (the default, CI) runs a few rounds per scenario, 20–40 s each. SYNCD_FAULT_LONG=1
// runs more and longer rounds:
//
//	SYNCD_FAULT_LONG=1 go test -run 'ClusterFault' -v -timeout 60m ./test/
//
// SYNCD_FAULT_SEED fixes the workload's random choices (the seed is logged).

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/test/testkit"
)

// faultRun is one scenario's context: the cluster, the workload and the schedule's scale.
type faultRun struct {
	t    *testing.T
	c    *testCluster
	w    *workload
	tl   *timeline
	long bool
}

// rounds returns short in short mode, long with SYNCD_FAULT_LONG=1.
func (f *faultRun) rounds(short, long int) int {
	if f.long {
		return long
	}
	return short
}

// pause returns short in short mode, long with SYNCD_FAULT_LONG=1: how long a fault lasts.
func (f *faultRun) pause(short, long time.Duration) time.Duration {
	if f.long {
		return long
	}
	return short
}

// hold keeps a fault in place for d while the traffic goes on. It is part of the schedule, not
// an assertion: what must hold during the fault is polled for separately.
func (f *faultRun) hold(d time.Duration) { time.Sleep(d) }

// runFault runs one scenario: start the cluster and the workload, warm up, run schedule, heal
// every relay, check that writes flow again, then run every check.
func runFault(t *testing.T, needsRelays bool, schedule func(f *faultRun)) {
	runFaultWithSpares(t, needsRelays, 0, schedule)
}

// faultMode returns the seed of a randomized run's choices, SYNCD_FAULT_SEED's or a new one, and
// whether SYNCD_FAULT_LONG=1 asks for the long run.
func faultMode(t *testing.T) (seed uint64, long bool) {
	seed = uint64(time.Now().UnixNano())
	if s := os.Getenv("SYNCD_FAULT_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SYNCD_FAULT_SEED: %v", err)
		}
		seed = v
	}
	return seed, os.Getenv("SYNCD_FAULT_LONG") == "1"
}

// runFaultWithSpares is runFault on a cluster with spare nodes (startClusterWithSpares), whose
// nodes get args besides the harness's flags.
func runFaultWithSpares(t *testing.T, needsRelays bool, spares int, schedule func(f *faultRun), args ...string) {
	if runtime.GOOS != "linux" {
		t.Skip("the cluster fault suite needs Linux (SIGKILL, SIGSTOP, parent-death signal)")
	}
	seed, long := faultMode(t)
	tl := newTimeline(t)
	tl.add("workload seed %d (rerun with SYNCD_FAULT_SEED=%d); long mode %v", seed, seed, long)
	c := startClusterWithSpares(t, 3, spares, tl, args...)
	if needsRelays && c.mesh == nil {
		t.Skip("this syncd has no -peer-dial: no relays to partition with")
	}
	w := newWorkload(t, c, seed)
	f := &faultRun{t: t, c: c, w: w, tl: tl, long: long}
	w.Start()
	w.waitProgress(20, 60*time.Second, "warm-up")
	tl.add("leaders %s", describeLeaders(c.waitLeaders(30*time.Second)))

	schedule(f)

	if c.mesh != nil {
		c.mesh.Heal()
	}
	for _, n := range c.nodes {
		if !n.Running() && !n.retired && n.Starts() > 0 {
			if err := n.Start(); err != nil {
				t.Fatal(err)
			}
			tl.add("%s restarted at the end of the schedule", n.ID)
		}
	}
	tl.add("healed; leaders %s", describeLeaders(c.waitLeaders(60*time.Second)))
	w.waitProgress(10, 90*time.Second, "after healing")
	checkAll(w, 3*time.Minute)
}

// killNode kills n with SIGKILL and records it.
func (f *faultRun) killNode(n *clusterNode, why string) {
	f.t.Helper()
	if err := n.Kill(); err != nil {
		f.t.Fatal(err)
	}
	f.tl.add("kill -9 %s (%s)", n.ID, why)
}

// restartNode restarts n and waits until every serving node is ready.
func (f *faultRun) restartNode(n *clusterNode) {
	f.t.Helper()
	if err := n.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.c.waitReady(60 * time.Second)
	f.tl.add("%s restarted and ready", n.ID)
}

// TestClusterFaultLeaderKills: the leader of a shard (a different shard each round) is killed
// with SIGKILL; the others elect a new leader and keep taking writes; the killed node is
// restarted a few seconds later on its data and catches up. Nothing acked may be lost or
// duplicated.
func TestClusterFaultLeaderKills(t *testing.T) {
	skipShort(t)
	runFault(t, false, killLeaders)
}

// killLeaders is the schedule of the leader kills: each round the leader of another shard is
// killed, the others take writes, and it is restarted on its data.
func killLeaders(f *faultRun) {
	for round := range f.rounds(3, 10) {
		shard := raftstore.ShardID(round%clusterShards + 1)
		leaders := f.c.waitLeaders(30 * time.Second)
		victim := leaders[shard]
		f.killNode(victim, fmt.Sprintf("leader of shard %d; leaders %s", shard, describeLeaders(leaders)))
		f.w.waitProgress(5, 60*time.Second, "round "+strconv.Itoa(round+1)+", leader down")
		f.hold(f.pause(2*time.Second, 5*time.Second))
		f.restartNode(victim)
		f.w.waitProgress(5, 60*time.Second, "after the restart")
	}
}

// TestClusterFaultLargeGroupLeaderKills: the leader kills, with the group of everyone large
// (read diffusion: -large-group-threshold 3, so its six members read it from its own log as a
// source while the group of three is copied into its members' logs). Every acked message of the
// large group reaches every member's device once, contiguous from the entry that started its
// following, with the conversation log holding exactly what the devices stored.
func TestClusterFaultLargeGroupLeaderKills(t *testing.T) {
	skipShort(t)
	runFaultWithSpares(t, false, 0, killLeaders, "-large-group-threshold", "3")
}

// TestClusterFaultFollowerKill: a node leading the fewest shards (a follower of the others) is
// killed, stays down while the others take writes, and is restarted on its data; it must catch
// up from the leaders' logs.
func TestClusterFaultFollowerKill(t *testing.T) {
	skipShort(t)
	runFault(t, false, func(f *faultRun) {
		for round := range f.rounds(2, 5) {
			leaders := f.c.waitLeaders(30 * time.Second)
			victim := f.c.leastLeader(leaders)
			f.killNode(victim, "leads the fewest shards; leaders "+describeLeaders(leaders))
			f.w.waitProgress(5, 60*time.Second, "round "+strconv.Itoa(round+1)+", follower down")
			f.hold(f.pause(5*time.Second, 15*time.Second))
			f.restartNode(victim)
			f.w.waitProgress(5, 60*time.Second, "after the restart")
		}
	})
}

// TestClusterFaultMinorityPartition: one node (a different one each round) is cut off from both
// others, in both directions, for several seconds while every device keeps sending (those
// connected to the cut-off node are told it is stale, get their sends refused as unavailable and
// move to another node), then the partition heals.
func TestClusterFaultMinorityPartition(t *testing.T) {
	skipShort(t)
	runFault(t, true, func(f *faultRun) {
		for round := range f.rounds(2, 6) {
			n := f.c.nodes[round%len(f.c.nodes)]
			f.c.mesh.Partition(n.ID)
			f.tl.add("partition %s from the others", n.ID)
			f.w.waitProgress(5, 60*time.Second, "round "+strconv.Itoa(round+1)+", "+n.ID+" cut off")
			f.hold(f.pause(5*time.Second, 15*time.Second))
			f.c.mesh.Heal()
			f.tl.add("healed")
			f.c.waitReady(60 * time.Second)
			f.w.waitProgress(5, 60*time.Second, "after healing")
		}
	})
}

// TestClusterFaultLeaderIsolated: the node leading the most shards is cut off from its
// followers. It must step down from every shard (its lease runs out) while the other two elect
// leaders and keep taking writes; after the heal it rejoins as a follower. No write it had
// acknowledged may be lost.
func TestClusterFaultLeaderIsolated(t *testing.T) {
	skipShort(t)
	runFault(t, true, func(f *faultRun) {
		for round := range f.rounds(2, 5) {
			leaders := f.c.waitLeaders(30 * time.Second)
			n := f.c.mostLeader(leaders)
			f.c.mesh.Partition(n.ID)
			f.tl.add("partition %s, leader of the most shards (leaders %s)", n.ID, describeLeaders(leaders))
			testkit.Wait(f.t, 30*time.Second, n.ID+" to step down and the others to lead every shard", func() (bool, string) {
				stats, err := f.c.scrape(n)
				if err != nil {
					return false, err.Error()
				}
				for shard, st := range stats {
					if st.Leader {
						return false, fmt.Sprintf("%s still leads shard %d", n.ID, shard)
					}
				}
				l := f.c.leaders()
				for _, ln := range l {
					if ln == n {
						return false, describeLeaders(l)
					}
				}
				return len(l) == clusterShards, describeLeaders(l)
			})
			f.tl.add("%s stepped down; leaders %s", n.ID, describeLeaders(f.c.leaders()))
			f.w.waitProgress(5, 60*time.Second, "round "+strconv.Itoa(round+1)+", old leader isolated")
			f.hold(f.pause(3*time.Second, 10*time.Second))
			f.c.mesh.Heal()
			f.tl.add("healed")
			f.c.waitReady(60 * time.Second)
			f.w.waitProgress(5, 60*time.Second, "after healing")
		}
	})
}

// TestClusterFaultFullKill: all three nodes are killed with SIGKILL at once and restarted on
// their data: everything acked before the kill survives (G1), and the traffic resumes.
func TestClusterFaultFullKill(t *testing.T) {
	skipShort(t)
	runFault(t, false, func(f *faultRun) {
		for round := range f.rounds(2, 5) {
			for _, n := range f.c.nodes {
				f.killNode(n, "whole cluster, round "+strconv.Itoa(round+1))
			}
			f.hold(f.pause(time.Second, 3*time.Second))
			for _, n := range f.c.nodes {
				if err := n.Start(); err != nil {
					f.t.Fatal(err)
				}
			}
			f.c.waitReady(60 * time.Second)
			f.tl.add("all nodes restarted and ready; leaders %s", describeLeaders(f.c.waitLeaders(30*time.Second)))
			f.w.waitProgress(10, 90*time.Second, "after the restart")
		}
	})
}

// TestClusterFaultNodeReplaced: under traffic a fourth node joins the cluster (-join) and takes
// its share of replicas, then a first node is removed (syncctl node remove, through the admin
// endpoint): its replicas move to the others, it leaves the cluster map and is stopped for good.
// Devices connected to it move to other nodes (the SDK's fallback addresses). Nothing acked is
// lost or duplicated, and the replicas that remain are identical.
func TestClusterFaultNodeReplaced(t *testing.T) {
	skipShort(t)
	runFaultWithSpares(t, false, 1, func(f *faultRun) {
		n2, n4 := f.c.nodes[1], f.c.nodes[3]
		if err := n4.Start(); err != nil {
			f.t.Fatal(err)
		}
		f.tl.add("n4 started with -join")
		testkit.Wait(f.t, 120*time.Second, "n4 to hold replicas", func() (bool, string) {
			v, err := f.c.clusterView(f.c.nodes[0])
			if err != nil {
				return false, err.Error()
			}
			for _, n := range v.Nodes {
				if n.ID == "n4" {
					return n.Placed > 0 && n.Reachable, fmt.Sprintf("n4 placed %d", n.Placed)
				}
			}
			return false, "n4 not in the map yet"
		})
		f.w.waitProgress(5, 60*time.Second, "n4 joined")
		if code, body, err := f.c.do(f.c.nodes[0], http.MethodPost, "/v1/nodes/n2/remove"); err != nil || code != http.StatusOK {
			f.t.Fatalf("remove n2: %d %s %v", code, body, err)
		}
		f.tl.add("n2 removal requested")
		testkit.Wait(f.t, 180*time.Second, "n2 to hold nothing and leave the map", func() (bool, string) {
			v, err := f.c.clusterView(f.c.nodes[0])
			if err != nil {
				return false, err.Error()
			}
			for _, n := range v.Nodes {
				if n.ID == "n2" {
					return false, fmt.Sprintf("n2 still in the map, placed %d", n.Placed)
				}
			}
			for _, s := range v.Shards {
				if slices.Contains(s.Voters, "n2") || s.Leader == "" {
					return false, fmt.Sprintf("shard %d: leader %q voters %v", s.Shard, s.Leader, s.Voters)
				}
			}
			return true, ""
		})
		if err := n2.Stop(30 * time.Second); err != nil {
			f.t.Fatal(err)
		}
		n2.retired = true
		f.tl.add("n2 left the cluster and was stopped")
		f.w.waitProgress(10, 90*time.Second, "after n2 left")
	})
}

// hit is the fault of a move's (or a split's) round, what: with cut, victim is cut off from the
// other nodes for a while, then healed; otherwise it is killed, and restarted once the workload
// has made progress without it.
func (f *faultRun) hit(victim *clusterNode, cut bool, what string) {
	if cut {
		f.c.mesh.Partition(victim.ID)
		f.w.waitProgress(5, 60*time.Second, what)
		f.hold(f.pause(3*time.Second, 10*time.Second))
		f.c.mesh.Heal()
		f.tl.add("healed")
		f.c.waitReady(60 * time.Second)
		return
	}
	f.killNode(victim, what)
	f.w.waitProgress(5, 60*time.Second, what)
	f.restartNode(victim)
}

// TestClusterFaultMoves: users' logs, conversations and ranges of hash slots of the workload move
// to another shard while it runs (a user, a conversation, then the half of a shard's slot range
// holding a workload user: a split's move), and in the middle of each move a fault hits it: the
// leader of the source shard (the node driving the move) is killed, or the leader of the shard it
// moves to, or the driver is cut off from the other nodes (a minority partition) and healed;
// the long run meets each kind of move with each fault. A new leader resumes the move from the
// step the cluster map holds; the move ends with the key pinned to its new shard (or the slots
// given to it), and the checker finds every acked entry exactly once, in order, on the key's new
// shard, the devices with every message, and every replica identical.
func TestClusterFaultMoves(t *testing.T) {
	skipShort(t)
	runFault(t, true, func(f *faultRun) {
		f.w.moved, f.w.movedConvs = map[string]raftstore.ShardID{}, map[string]raftstore.ShardID{}
		slots := cluster.Even(clusterShards)
		owner := map[int]raftstore.ShardID{} // the slot table as the moves changed it
		for i := range log.NumSlots {
			owner[i] = slots.SlotShard(i)
		}
		userShard := func(u string) raftstore.ShardID {
			if s, ok := f.w.moved[u]; ok {
				return s
			}
			return owner[log.UserSlot(u)]
		}
		convShard := func(c string) raftstore.ShardID {
			if s, ok := f.w.movedConvs[c]; ok {
				return s
			}
			return owner[log.ConvSlot(c)]
		}
		for round := range f.rounds(3, 9) {
			// Rounds move a user, a conversation, then slots, in turn; the faults are taken in
			// turn too, shifted each third round, so nine rounds meet every pair.
			var kind, key string
			var from raftstore.ShardID
			var span log.SlotSpan
			switch round % 3 {
			case 0:
				kind, key = "user", wlUserName(round%len(f.w.devs))
				from = userShard(key)
			case 1:
				kind, key = "conv", f.w.convs[(round/3)%len(f.w.convs)].id
				from = convShard(key)
			case 2:
				// The half of a shard's slot range that holds a workload user routed by its slot.
				kind = "slots"
				for i := range f.w.devs {
					if u := f.w.devs[(round+i)%len(f.w.devs)].user; userShard(u) == owner[log.UserSlot(u)] {
						key = u
						break
					}
				}
				slot := log.UserSlot(key)
				from = owner[slot]
				lo, hi := slot, slot
				for lo > 0 && owner[lo-1] == from {
					lo--
				}
				for hi < log.NumSlots-1 && owner[hi+1] == from {
					hi++
				}
				if mid := lo + (hi-lo+1)/2; slot < mid && hi > lo {
					span = log.SlotSpan{First: lo, Last: mid - 1}
				} else {
					span = log.SlotSpan{First: mid, Last: hi}
				}
				key = span.String()
			}
			to := from%clusterShards + 1
			leaders := f.c.waitLeaders(30 * time.Second)
			fault, victim := "kill the leader of the source shard (the move's driver)", leaders[from]
			switch (round + round/3) % 3 {
			case 1:
				fault, victim = "kill the leader of the destination shard", leaders[to]
			case 2:
				fault = "cut the move's driver off from the others"
			}
			n := f.c.nodes[(slices.Index(f.c.nodes, victim)+1)%len(f.c.nodes)]
			path := fmt.Sprintf("/v1/moves?%s=%s&to=%d", kind, url.QueryEscape(key), to)
			moving := func(m adminapi.MoveView) bool { return m.User == key || m.Conv == key || m.Slots == key }
			done := func(v adminapi.ClusterView) bool {
				switch kind {
				case "conv":
					return v.ConvOverrides[key] == uint32(to)
				case "user":
					return v.Overrides[key] == uint32(to)
				}
				return slotsOwnedBy(v, span, to)
			}
			// An operator asks again when the answer does not come (an election under way): the
			// request may have been recorded — then the repeat is refused as already moving, or,
			// if the move ended meanwhile, as a move to where the key is — so the status is
			// looked at first, as an operator would.
			testkit.Wait(f.t, 60*time.Second, "the move of "+key+" to be recorded", func() (bool, string) {
				if v, err := f.c.clusterView(n); err == nil {
					if done(v) || slices.ContainsFunc(v.Moves, moving) {
						return true, ""
					}
				}
				code, body, err := f.c.do(n, http.MethodPost, path)
				return code == http.StatusOK || code == http.StatusConflict && strings.Contains(body, "already moving"),
					fmt.Sprintf("POST %s: %d %s %v", path, code, body, err)
			})
			f.tl.add("move of %s %s from shard %d to %d asked through %s; %s: %s", kind, key, from, to, n.ID, fault, victim.ID)
			f.hit(victim, (round+round/3)%3 == 2, "round "+strconv.Itoa(round+1)+", "+fault)
			testkit.Wait(f.t, 120*time.Second, "the move of "+key+" to end", func() (bool, string) {
				v, err := f.c.clusterView(n)
				if err != nil {
					return false, err.Error()
				}
				return len(v.Moves) == 0 && done(v), fmt.Sprintf("moves %+v, overrides %v %v", v.Moves, v.Overrides, v.ConvOverrides)
			})
			switch kind {
			case "user":
				f.w.moved[key] = to
			case "conv":
				f.w.movedConvs[key] = to
			default:
				// The workload's keys the source held in those slots moved with them; those pinned
				// elsewhere stay.
				for _, d := range f.w.devs {
					if span.Contains(log.UserSlot(d.user)) && userShard(d.user) == from {
						f.w.moved[d.user] = to
					}
				}
				for _, cv := range f.w.convs {
					if span.Contains(log.ConvSlot(cv.id)) && convShard(cv.id) == from {
						f.w.movedConvs[cv.id] = to
					}
				}
				for i := span.First; i <= span.Last; i++ {
					owner[i] = to
				}
			}
			f.tl.add("%s %s moved to shard %d", kind, key, to)
			f.w.waitProgress(5, 60*time.Second, "after the move")
		}
	})
}

// slotsOwnedBy reports whether the cluster view gives every slot of span to shard.
func slotsOwnedBy(v adminapi.ClusterView, span log.SlotSpan, shard raftstore.ShardID) bool {
	for _, sv := range v.Shards {
		if sv.Shard != uint32(shard) {
			continue
		}
		for _, r := range sv.SlotRanges {
			if got, err := log.ParseSlotSpan(r); err == nil && got.First <= span.First && span.Last <= got.Last {
				return true
			}
		}
	}
	return false
}

// TestClusterFaultSplits: users' streams of the workload are split into sub-logs while it runs,
// and right after each split is asked for a fault hits it: the leader of the user's shard (the
// node driving the split) is killed, or the leader of another shard (whose outbox must cut over
// to the sub-logs), or the driver is cut off from the other nodes and healed; the long run meets
// each fault. A new leader resumes the split from the step the cluster map holds; the checker
// finds every acked entry exactly once in the user's sub-logs, each contiguous, each
// conversation's entries in order on the user's devices across the split, and every replica
// identical.
func TestClusterFaultSplits(t *testing.T) {
	skipShort(t)
	runFault(t, true, func(f *faultRun) {
		f.w.split = map[string]int{}
		slots := cluster.Even(clusterShards)
		for round := range f.rounds(1, 3) {
			user, subs := wlUserName(round%len(f.w.devs)), 2+round%3
			from := slots.UserShard(user)
			other := from%clusterShards + 1
			leaders := f.c.waitLeaders(30 * time.Second)
			fault, victim := "kill the leader of the user's shard (the split's driver)", leaders[from]
			switch round % 3 {
			case 1:
				fault, victim = "kill the leader of another shard, which must cut over", leaders[other]
			case 2:
				fault = "cut the split's driver off from the others"
			}
			n := f.c.nodes[(slices.Index(f.c.nodes, victim)+1)%len(f.c.nodes)]
			path := fmt.Sprintf("/v1/users/%s/split?subs=%d", user, subs)
			splitting := func(v adminapi.ClusterView) bool {
				return len(v.Splits[user]) == subs || slices.ContainsFunc(v.Moves, func(m adminapi.MoveView) bool { return m.User == user && m.Subs != 0 })
			}
			// As with a move, an operator whose request got no answer looks at the status first.
			testkit.Wait(f.t, 60*time.Second, "the split of "+user+" to be recorded", func() (bool, string) {
				if v, err := f.c.clusterView(n); err == nil && splitting(v) {
					return true, ""
				}
				code, body, err := f.c.do(n, http.MethodPost, path)
				return code == http.StatusOK, fmt.Sprintf("POST %s: %d %s %v", path, code, body, err)
			})
			f.tl.add("split of %s into %d sub-logs asked through %s; %s: %s", user, subs, n.ID, fault, victim.ID)
			f.hit(victim, round%3 == 2, "round "+strconv.Itoa(round+1)+", "+fault)
			testkit.Wait(f.t, 120*time.Second, "the split of "+user+" to end", func() (bool, string) {
				v, err := f.c.clusterView(n)
				if err != nil {
					return false, err.Error()
				}
				return len(v.Moves) == 0 && len(v.Splits[user]) == subs, fmt.Sprintf("moves %+v, splits %v", v.Moves, v.Splits)
			})
			f.w.split[user] = subs
			f.tl.add("%s split into %d sub-logs", user, subs)
			f.w.waitProgress(5, 60*time.Second, "after the split")
		}
	})
}
