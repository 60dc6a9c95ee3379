package syncd

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// Format levels. A build writes some replicated formats only once every node of the cluster
// reads them, as etcd enables a feature once the cluster version says every member has it: each
// node publishes the level of the formats it reads in its cluster-map attributes
// (adminapi.AttrFormat), and a leader proposes what a level brings only when every node of the
// map publishes at least that level. During a rolling upgrade from an earlier build an older
// follower therefore never refuses (and so never diverges on) a command its leader applied;
// once the last node runs the new build, the new formats turn on by themselves
// (docs/OPERATIONS.md, "Upgrades").
//
// Level 2 (issue #26): device cursors with their last sighting (log.CursorUpdate.Seen, the v2
// cursor record), Trim v2 (retention by device cursors), and the dead-letter process (refusal
// codes, attempts, the archive: ops 13 and 14). A node that publishes no level is at level 1.
const formatLevel = 2

// formatGate answers "does every node read level formatLevel?" from the cluster map, looked at
// again at most every formatRecheck: the answer is wanted on every cursor store.
type formatGate struct {
	cluster *cluster.Cluster
	state   atomic.Pointer[formatState]
}

type formatState struct {
	ready bool
	at    time.Time
}

// formatRecheck bounds how stale the gate's answer may be.
const formatRecheck = time.Second

// ready reports whether every node of the cluster map publishes formatLevel or more. False
// until this node has the map.
func (g *formatGate) ready() bool {
	now := time.Now()
	if st := g.state.Load(); st != nil && now.Sub(st.at) < formatRecheck {
		return st.ready
	}
	m, ok := g.cluster.Map()
	ready := ok && len(m.Nodes) > 0
	for _, n := range m.Nodes {
		if level, err := strconv.Atoi(n.Attrs[adminapi.AttrFormat]); err != nil || level < formatLevel {
			ready = false
			break
		}
	}
	g.state.Store(&formatState{ready: ready, at: now})
	return ready
}
