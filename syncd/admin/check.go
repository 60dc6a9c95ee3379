package admin

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// checkRoutes serves the replica checks on the admin mux (issue #23):
//
//	POST /v1/shards/check[?wait=10s]        check the replicas of every data shard
//	POST /v1/shards/{id}/check[?wait=10s]   of one
//
// A check proposes a checksum command to each shard (raftstore.CheckReplicas): every replica
// checksums its state at that command's Raft index, and the answer lists each one's checksum and
// whether they agree (adminapi.ReplicaCheckReport). It is a POST: it appends an entry to each
// shard's Raft log and makes every replica read its whole state once.
func (s *Server) checkRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/shards/check", func(w http.ResponseWriter, r *http.Request) {
		m, _ := s.cluster.Map()
		s.checkShards(w, r, m.DataShards())
	})
	mux.HandleFunc("POST /v1/shards/{id}/check", func(w http.ResponseWriter, r *http.Request) {
		m, _ := s.cluster.Map()
		id, err := strconv.ParseUint(r.PathValue("id"), 10, 32)
		if err != nil || id == 0 || id > uint64(m.Shards) {
			writeOpsError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no data shard %q (the cluster has shards 1 to %d)", r.PathValue("id"), m.Shards),
				"syncctl cluster status lists the shards")
			return
		}
		s.checkShards(w, r, []raftstore.ShardID{raftstore.ShardID(id)})
	})
}

// checkShards checks the replicas of shards, waiting as long as ?wait= says for their checksums,
// and answers with the report.
func (s *Server) checkShards(w http.ResponseWriter, r *http.Request, shards []raftstore.ShardID) {
	wait := adminapi.DefaultCheckWait
	if v := r.URL.Query().Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > adminapi.MaxCheckWait {
			writeOpsError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("wait=%q: want a duration above 0 and at most %v", v, adminapi.MaxCheckWait),
				"syncctl shard check -wait 30s")
			return
		}
		wait = d
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	report := adminapi.ReplicaCheckReport{Node: s.node.ID(), WaitMS: wait.Milliseconds(), Shards: []adminapi.ShardCheck{}}
	for _, c := range s.node.CheckReplicas(ctx, shards) {
		sc := adminapi.ShardCheck{Shard: uint32(c.Shard), Index: c.Index, Verdict: string(c.Verdict), Replicas: []adminapi.ReplicaChecksum{}}
		if c.Err != nil {
			sc.Error = c.Err.Error()
		}
		if c.Verdict == raftstore.VerdictMismatch {
			report.Mismatches++
		}
		for _, rs := range c.Replicas {
			rc := adminapi.ReplicaChecksum{Node: rs.Node, Voter: rs.Voter, State: rs.State, Status: string(rs.Status), Applied: rs.Applied, Note: rs.Note}
			if sum := rs.Checksum; sum.Done && sum.Err == "" {
				rc.Checksum, rc.Keys = fmt.Sprintf("%016x", sum.Sum), sum.Keys
			}
			if at := rs.Checksum.At; at != 0 {
				t := time.Unix(0, at).UTC()
				rc.ComputedAt = &t
			}
			sc.Replicas = append(sc.Replicas, rc)
		}
		report.Shards = append(report.Shards, sc)
	}
	writeJSON(w, http.StatusOK, report)
}
