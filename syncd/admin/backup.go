package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// backupRoutes serve the parts of a backup (syncctl backup assembles them, docs/OPERATIONS.md
// "Backup and restore"): the control plane's state, and one data shard's state at one Raft
// index, read while traffic runs from this node's replica, which must lead the shard. A shard's
// stream is the format followers install (log.Snapshot.WriteTo), taken from a Pebble snapshot of
// the replica: the state machine commits each applied batch with its index in one write, so
// every snapshot of it is the shard exactly as of one Raft index, whatever is applied meanwhile.
func (s *Server) backupRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/backup/cluster", func(w http.ResponseWriter, r *http.Request) {
		state, index, err := s.cluster.BackupState()
		if errors.Is(err, cluster.ErrMoving) {
			writeOpsError(w, http.StatusConflict, "moving", err.Error(), "syncctl cluster shows the move; back up once it is done")
			return
		}
		if err != nil {
			writeOpsError(w, http.StatusInternalServerError, "internal", err.Error(), "")
			return
		}
		w.Header().Set(adminapi.BackupIndexHeader, strconv.FormatUint(index, 10))
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(state)
	})
	mux.HandleFunc("GET /v1/backup/shards/{shard}", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.ParseUint(r.PathValue("shard"), 10, 32)
		if err != nil || n == 0 || raftstore.ShardID(n) == raftstore.MetaShard {
			writeOpsError(w, http.StatusBadRequest, "bad_request", "not a data shard: "+r.PathValue("shard"), "shard ids are listed by syncctl cluster")
			return
		}
		shard := raftstore.ShardID(n)
		// Read on the shard's leader, after a barrier: its state then holds every write
		// acknowledged before the request, which a follower's might not yet.
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		_, err = s.node.Barrier(ctx, shard)
		cancel()
		var nl *raftstore.NotLeaderError
		switch {
		case errors.Is(err, raftstore.ErrNoShard):
			writeOpsError(w, http.StatusNotFound, "not_hosted", "this node holds no replica of shard "+r.PathValue("shard"),
				"ask the shard's leader's node (syncctl cluster lists it)")
			return
		case errors.As(err, &nl):
			writeOpsError(w, http.StatusConflict, "not_leader", fmt.Sprintf("this node does not lead shard %d (its leader: %q)", shard, nl.LeaderID),
				"ask the shard's leader's node (syncctl cluster lists it)")
			return
		case err != nil:
			writeOpsError(w, http.StatusServiceUnavailable, "unavailable", err.Error(), "retry in a few seconds")
			return
		}
		state, err := s.node.State(shard)
		if err != nil {
			writeOpsError(w, http.StatusServiceUnavailable, "unavailable", err.Error(), "retry, or ask another replica's node")
			return
		}
		snap := state.NewSnapshot()
		defer snap.Close()
		applied, err := snap.Applied()
		var fan log.FanoutState
		if err == nil {
			fan, err = snap.Fanout()
		}
		if err != nil {
			writeOpsError(w, http.StatusInternalServerError, "internal", err.Error(), "")
			return
		}
		marks := make(map[uint32]uint64, len(fan.Marks))
		for src, m := range fan.Marks {
			marks[uint32(src)] = m
		}
		// A shard may take longer to stream than other answers: no write deadline but the
		// client's own (it hangs up, the write fails, the snapshot is released).
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		w.Header().Set(adminapi.BackupIndexHeader, strconv.FormatUint(applied, 10))
		w.Header().Set(adminapi.BackupFanoutHeader, adminapi.FormatFanout(fan.OutboxFirst, marks))
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Cache-Control", "no-store")
		// The stream's digest follows it as a trailer, so that a stream cut short, which HTTP
		// may end as if it were whole, is told apart from a complete one.
		w.Header().Set("Trailer", adminapi.BackupSumTrailer)
		sum := sha256.New()
		if _, err := snap.WriteTo(io.MultiWriter(w, sum)); err != nil {
			s.logger.Warn("backup of a shard cut short", "shard", shard, "err", err)
			return
		}
		w.Header().Set(adminapi.BackupSumTrailer, hex.EncodeToString(sum.Sum(nil)))
	})
}
