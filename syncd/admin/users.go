package admin

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
)

// ResetUserLog drops the whole log of uid and its device cursors and restarts it empty under a
// new epoch ([log.Tx.ResetUser]); every device of the user is then told "epoch changed" and
// resyncs. It returns the new epoch.
func (s *Server) ResetUserLog(ctx context.Context, uid string) (log.Epoch, error) {
	if !log.ValidID(uid) {
		return 0, fmt.Errorf("%w: bad user id %q", log.ErrInvalid, uid)
	}
	shard := s.slots.UserShard(uid)
	if _, err := s.node.Propose(ctx, shard, raftstore.TrimCommand(&log.Trim{Target: log.ResetUserLog, ID: uid})); err != nil {
		return 0, err
	}
	state, err := s.node.State(shard)
	if err != nil {
		return 0, err
	}
	info, err := state.UserInfo(uid) // applied here: this node proposed it as the leader
	return info.Epoch, err
}

// userRoutes serves the user-log endpoints on the admin mux:
//
//	POST /v1/users/{uid}/reset    reset the user's log: {"user", "epoch"}
func (s *Server) userRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/users/{uid}/reset", func(w http.ResponseWriter, r *http.Request) {
		uid := r.PathValue("uid")
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		epoch, err := s.ResetUserLog(ctx, uid)
		if err != nil {
			writeProposeError(w, err, "check the user id: only a user who has a log can be reset")
			return
		}
		s.logger.Warn("user log reset by an operator; the user's devices will resync", "user", uid, "epoch", uint64(epoch))
		writeJSON(w, http.StatusOK, map[string]any{"user": uid, "epoch": uint64(epoch)})
	})
}
