package admin

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// Cluster gathers the cluster view from every node named in this node's shard configurations.
func (s *Server) Cluster(ctx context.Context) adminapi.ClusterView {
	view := adminapi.ClusterView{Node: s.node.ID()}
	m, _ := s.cluster.Map()
	view.RF, view.MapIndex = m.RF, m.Index
	for _, mv := range m.Moves {
		v := adminapi.MoveView{ID: mv.ID, User: mv.User, Conv: mv.Conv, Subs: mv.Subs, From: uint32(mv.From), To: uint32(mv.To),
			Step: string(mv.Step), Started: time.Unix(0, mv.Started).UTC()}
		if mv.Slots != nil {
			v.Slots = mv.Slots.String()
		}
		view.Moves = append(view.Moves, v)
	}
	slices.SortFunc(view.Moves, func(a, b adminapi.MoveView) int { return cmp.Compare(a.ID, b.ID) })
	view.Overrides, view.ConvOverrides = shardsOf(m.Overrides), shardsOf(m.ConvOverrides)
	for uid := range m.Splits {
		if view.Splits == nil {
			view.Splits = map[string][]uint32{}
		}
		for _, id := range s.slots.Logs(uid) {
			view.Splits[uid] = append(view.Splits[uid], uint32(s.slots.UserShard(id)))
		}
	}
	shards := map[raftstore.ShardID]*adminapi.ShardView{}
	for _, id := range m.DataShards() {
		_, creating := m.Creating[id]
		shards[id] = &adminapi.ShardView{Shard: uint32(id), Placed: m.Replicas[id], Creating: creating}
	}
	for _, r := range m.Slots {
		if v := shards[r.Shard]; v != nil {
			v.Slots += r.Last - r.First + 1
			v.SlotRanges = append(v.SlotRanges, r.String())
		}
	}
	leaderLast := map[raftstore.ShardID]uint64{}
	for _, p := range s.node.ClusterStatus(ctx) {
		n := adminapi.ClusterNode{ID: p.ID, RaftAddr: p.Addr, Reachable: p.Status != nil, Error: p.Err, Removing: m.Nodes[p.ID].Removing}
		for _, id := range m.DataShards() {
			if slices.Contains(m.Replicas[id], p.ID) {
				n.Placed++
			}
		}
		if p.Status != nil {
			n.ClientAddr, n.AdminAddr = p.Status.Attrs[adminapi.AttrClient], p.Status.Attrs[adminapi.AttrAdmin]
			n.Format = p.Status.Attrs[adminapi.AttrFormat]
			for _, st := range p.Status.Shards {
				sv := shards[st.Shard]
				if sv == nil {
					sv = &adminapi.ShardView{Shard: uint32(st.Shard)}
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
				sv.Replicas = append(sv.Replicas, adminapi.ReplicaView{Node: p.ID, State: st.State, Term: st.Term,
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
	slices.SortFunc(view.Shards, func(a, b adminapi.ShardView) int { return cmp.Compare(a.Shard, b.Shard) })
	return view
}

// clusterRoutes serves the cluster endpoints on the admin mux:
//
//	GET  /v1/cluster                       the cluster view (adminapi.ClusterView)
//	POST /v1/nodes?id=…&raft_addr=…        register a node before it starts (it may also just
//	                                       start with -join)
//	POST /v1/nodes/{id}/remove             move a node's replicas away, then drop it from the map
//	POST /v1/shards                        add a data shard online: a new Raft group, placed like
//	                                       the others, owning no slot yet
//	POST /v1/moves?user=…&to=N             move a user's log to shard N online (new_shard=1: to a
//	                                       shard added for it); conv=… a conversation, slots=F-L
//	                                       a range of hash slots one shard owns
//	POST /v1/shards/{id}/split             add a shard and move the upper half of the shard's
//	                                       largest slot range to it
//	POST /v1/moves/{id}/cancel             cancel a move that is still copying
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
		if err := s.cluster.AddNode(ctx, id, addr); err != nil {
			writeProposeError(w, err, "")
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "raft_addr": addr, "added": true})
	})
	mux.HandleFunc("POST /v1/nodes/{id}/remove", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		if err := s.cluster.RemoveNode(ctx, id); err != nil {
			writeProposeError(w, err, "")
			return
		}
		s.logger.Warn("node removal requested; its replicas move to other nodes", "node", id)
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "removing": true})
	})
	mux.HandleFunc("POST /v1/shards", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		id, err := s.cluster.AddShard(ctx)
		if err != nil {
			writeProposeError(w, err, "")
			return
		}
		s.logger.Info("shard added; its replicas start on the nodes placed", "shard", uint32(id))
		writeJSON(w, http.StatusOK, adminapi.ShardAdded{Shard: uint32(id)})
	})
	mux.HandleFunc("POST /v1/moves", s.startMove)
	mux.HandleFunc("POST /v1/shards/{id}/split", s.splitShard)
	mux.HandleFunc("POST /v1/users/{uid}/split", s.splitUser)
	mux.HandleFunc("POST /v1/moves/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
		if err != nil {
			writeOpsError(w, http.StatusBadRequest, "bad_request", "the move id must be a number", "syncctl cluster status lists the moves and their ids")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		if err := s.cluster.CancelMove(ctx, id); err != nil {
			writeProposeError(w, err, "only a move that is still copying can be canceled; syncctl cluster status shows its step")
			return
		}
		s.logger.Warn("move canceled; the destination drops what it copied", "move", id)
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "canceled": true})
	})
}

// shardsOf is an override map as the admin API shows it, nil when empty.
func shardsOf(overrides map[string]raftstore.ShardID) map[string]uint32 {
	if len(overrides) == 0 {
		return nil
	}
	out := make(map[string]uint32, len(overrides))
	for k, s := range overrides {
		out[k] = uint32(s)
	}
	return out
}

// startMove serves POST /v1/moves: the user's log (user=), the conversation (conv=) or the range
// of hash slots (slots=first-last) moves from the shard it is routed to now to the one asked
// for, or to a new shard of its own.
func (s *Server) startMove(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	user, conv, slotsArg, toArg, fresh := q.Get("user"), q.Get("conv"), q.Get("slots"), q.Get("to"), q.Get("new_shard") == "1"
	to, err := strconv.ParseUint(toArg, 10, 32)
	kinds := 0
	for _, k := range []string{user, conv, slotsArg} {
		if k != "" {
			kinds++
		}
	}
	var span log.SlotSpan
	switch {
	case kinds != 1 || user != "" && !log.ValidLog(user) || conv != "" && !log.ValidID(conv):
		writeOpsError(w, http.StatusBadRequest, "bad_request", "give one of user=<user id>, conv=<conversation id> or slots=<first>-<last>",
			"syncctl move user <uid> -to <shard>, syncctl move conv <conversation id> -to <shard>, or syncctl slots move <first>-<last> -to <shard>")
		return
	case fresh == (toArg != ""), !fresh && (err != nil || to == 0):
		writeOpsError(w, http.StatusBadRequest, "bad_request", "give either to=<shard> or new_shard=1",
			"syncctl move user <uid> -to <shard>, or -new-shard for a shard of its own")
		return
	}
	req := cluster.MoveInfo{User: user, Conv: conv, Started: time.Now().UnixNano()}
	switch {
	case slotsArg != "":
		if span, err = log.ParseSlotSpan(slotsArg); err != nil {
			writeOpsError(w, http.StatusBadRequest, "bad_request", err.Error(), "syncctl cluster status shows each shard's slot ranges")
			return
		}
		req.Slots, req.From = &span, s.slots.SlotShard(span.First)
	case conv != "":
		req.From = s.slots.ConvShard(conv)
	default:
		req.From = s.slots.UserShard(user)
	}
	s.move(w, r, req, raftstore.ShardID(to), fresh)
}

// splitShard serves POST /v1/shards/{id}/split: a new shard takes the upper half of the shard's
// largest slot range (its only one, for a shard that has never given slots away).
func (s *Server) splitShard(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 32)
	m, _ := s.cluster.Map()
	var largest *cluster.SlotRange
	for i, sr := range m.Slots {
		if err == nil && uint64(sr.Shard) == id && (largest == nil || sr.Last-sr.First > largest.Last-largest.First) {
			largest = &m.Slots[i]
		}
	}
	switch {
	case largest == nil:
		writeOpsError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("shard %s owns no hash slots to split", r.PathValue("id")),
			"syncctl cluster status shows each shard's slot ranges")
		return
	case largest.First == largest.Last:
		writeOpsError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("shard %d's largest slot range is one slot: nothing to split", id),
			"move its keys on their own instead: syncctl move user <uid> -new-shard")
		return
	}
	span := log.SlotSpan{First: largest.First + (largest.Last-largest.First+1)/2, Last: largest.Last}
	s.move(w, r, cluster.MoveInfo{Slots: &span, From: largest.Shard, Started: time.Now().UnixNano()}, 0, true)
}

// splitUser serves POST /v1/users/{uid}/split?subs=k: the user's stream is split into k
// sub-logs (docs/MOVES.md, "Sub-logs"), carried out like a move of the user.
func (s *Server) splitUser(w http.ResponseWriter, r *http.Request) {
	uid := r.PathValue("uid")
	subs, err := strconv.Atoi(r.URL.Query().Get("subs"))
	if !log.ValidID(uid) || err != nil || subs < 2 || subs > log.MaxSubLogs {
		writeOpsError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("give a user id and subs=<2-%d>", log.MaxSubLogs),
			"syncctl split-user -user <uid> -subs 4")
		return
	}
	from := s.slots.UserShard(uid)
	s.move(w, r, cluster.MoveInfo{User: uid, Subs: subs, From: from, Started: time.Now().UnixNano()}, from, false)
}

// move starts req, to shard to or, with fresh, to a shard added for it, and answers with the
// move started.
func (s *Server) move(w http.ResponseWriter, r *http.Request, req cluster.MoveInfo, to raftstore.ShardID, fresh bool) {
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	if fresh {
		// Checked first: a move the map refuses must not leave behind the shard added for it.
		if err := s.cluster.CheckMove(req); err != nil {
			writeProposeError(w, err, "syncctl cluster status shows the shards and the moves in progress")
			return
		}
		id, err := s.cluster.AddShard(ctx)
		if err != nil {
			writeProposeError(w, err, "")
			return
		}
		to = id
	}
	req.To = to
	id, err := s.cluster.StartMove(ctx, req)
	if err != nil {
		writeProposeError(w, err, "syncctl cluster status shows the shards and the moves in progress")
		return
	}
	s.logger.Info("move requested", "move", id, "key", req.Key(), "from", uint32(req.From), "to", uint32(to))
	started := adminapi.MoveStarted{ID: id, User: req.User, Conv: req.Conv, Subs: req.Subs, From: uint32(req.From), To: uint32(to)}
	if req.Slots != nil {
		started.Slots = req.Slots.String()
	}
	writeJSON(w, http.StatusOK, started)
}
