package syncd

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/syncd-dev/syncd/raftstore"
)

// Node attributes a syncd node publishes in its raftstore status, so that any node can tell an
// operator where every node serves.
const (
	attrClient = "client" // QUIC address for devices
	attrAdmin  = "admin"  // admin HTTP address
)

// ClusterView answers GET /v1/cluster: every node of the cluster as the node asked could reach
// it, and every shard's replicas with their Raft state and lag.
type ClusterView struct {
	Node   string        `json:"node"` // the node that answered
	Nodes  []ClusterNode `json:"nodes"`
	Shards []ShardView   `json:"shards"`
	// RF is the cluster's replication factor and MapIndex the version of its cluster map.
	RF       int    `json:"rf"`
	MapIndex uint64 `json:"map_index"`
}

// ClusterNode is one node: its addresses, whether it answered, and how many shards it leads.
type ClusterNode struct {
	ID         string `json:"id"`
	RaftAddr   string `json:"raft_addr"`
	ClientAddr string `json:"client_addr,omitempty"`
	AdminAddr  string `json:"admin_addr,omitempty"`
	Reachable  bool   `json:"reachable"`
	Error      string `json:"error,omitempty"`
	Leads      int    `json:"leads"`              // shards it leads
	Placed     int    `json:"placed"`             // shards the cluster map places on it
	Removing   bool   `json:"removing,omitempty"` // being removed: its replicas move away
}

// ShardView is one shard: its leader, its voters, and each reachable replica's indexes.
type ShardView struct {
	Shard    uint32        `json:"shard"`
	Leader   string        `json:"leader"` // "" if no reachable node leads it
	Term     uint64        `json:"term"`
	Voters   []string      `json:"voters"`
	Placed   []string      `json:"placed"` // where the cluster map wants its replicas
	Slots    int           `json:"slots"`  // hash slots it owns in the cluster map's slot table
	Replicas []ReplicaView `json:"replicas"`
}

// ReplicaView is one node's replica of a shard. Lag is how many entries of the leader's log it
// has not applied yet (0 without a reachable leader).
type ReplicaView struct {
	Node    string `json:"node"`
	State   string `json:"state"`
	Term    uint64 `json:"term"`
	Commit  uint64 `json:"commit"`
	Applied uint64 `json:"applied"`
	Last    uint64 `json:"last"`
	Lag     uint64 `json:"lag"`
}

// Cluster gathers the cluster view from every node named in this node's shard configurations.
func (s *Server) Cluster(ctx context.Context) ClusterView {
	view := ClusterView{Node: s.node.ID()}
	m, _ := s.node.ClusterMap()
	view.RF, view.MapIndex = m.RF, m.Index
	shards := map[raftstore.ShardID]*ShardView{}
	for _, id := range m.DataShards() {
		shards[id] = &ShardView{Shard: uint32(id), Placed: m.Replicas[id]}
	}
	for _, r := range m.Slots {
		if v := shards[r.Shard]; v != nil {
			v.Slots += r.Last - r.First + 1
		}
	}
	leaderLast := map[raftstore.ShardID]uint64{}
	for _, p := range s.node.ClusterStatus(ctx) {
		n := ClusterNode{ID: p.ID, RaftAddr: p.Addr, Reachable: p.Status != nil, Error: p.Err, Removing: m.Nodes[p.ID].Removing}
		for _, id := range m.DataShards() {
			if slices.Contains(m.Replicas[id], p.ID) {
				n.Placed++
			}
		}
		if p.Status != nil {
			n.ClientAddr, n.AdminAddr = p.Status.Attrs[attrClient], p.Status.Attrs[attrAdmin]
			for _, st := range p.Status.Shards {
				sv := shards[st.Shard]
				if sv == nil {
					sv = &ShardView{Shard: uint32(st.Shard)}
					shards[st.Shard] = sv
				}
				if st.State == "leader" && st.Term >= sv.Term {
					sv.Leader, sv.Term, sv.Voters = p.ID, st.Term, nil
					for _, v := range st.Voters {
						sv.Voters = append(sv.Voters, v.ID)
					}
					leaderLast[st.Shard] = st.LastIndex
					n.Leads++
				}
				sv.Replicas = append(sv.Replicas, ReplicaView{Node: p.ID, State: st.State, Term: st.Term,
					Commit: st.CommitIndex, Applied: st.AppliedIndex, Last: st.LastIndex})
			}
		}
		view.Nodes = append(view.Nodes, n)
	}
	for id, sv := range shards {
		for i := range sv.Replicas {
			r := &sv.Replicas[i]
			if last := leaderLast[id]; last > r.Applied {
				r.Lag = last - r.Applied
			}
		}
		view.Shards = append(view.Shards, *sv)
	}
	slices.SortFunc(view.Shards, func(a, b ShardView) int { return cmp.Compare(a.Shard, b.Shard) })
	return view
}

// clusterRoutes serves the cluster endpoints on the admin mux:
//
//	GET  /v1/cluster                       the cluster view (ClusterView)
//	POST /v1/nodes?id=…&raft_addr=…        register a node before it starts (it may also just
//	                                       start with -join)
//	POST /v1/nodes/{id}/remove             move a node's replicas away, then drop it from the map
func (s *Server) clusterRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/cluster", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		writeJSON(w, http.StatusOK, s.Cluster(ctx))
	})
	mux.HandleFunc("POST /v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		id, addr := r.URL.Query().Get("id"), r.URL.Query().Get("raft_addr")
		if id == "" || addr == "" {
			writeOpsError(w, http.StatusBadRequest, "bad_request", "id and raft_addr are required", "syncctl node add <id> <raft host:port>")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		if err := s.node.AddNode(ctx, id, addr); err != nil {
			writeProposeError(w, err, "")
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "raft_addr": addr, "added": true})
	})
	mux.HandleFunc("POST /v1/nodes/{id}/remove", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		if err := s.node.RemoveNode(ctx, id); err != nil {
			writeProposeError(w, err, "")
			return
		}
		s.logger.Warn("node removal requested; its replicas move to other nodes", "node", id)
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "removing": true})
	})
}
