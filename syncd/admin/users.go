package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// ResetUserLog drops the whole log of uid and its device cursors and restarts it empty under a
// new epoch ([log.Tx.ResetUser]); every device of the user is then told "epoch changed" and
// resyncs. It returns the new epoch.
func (s *Server) ResetUserLog(ctx context.Context, uid string) (log.Epoch, error) {
	if !log.ValidID(uid) {
		return 0, fmt.Errorf("%w: bad user id %q", log.ErrInvalid, uid)
	}
	// A split user's stream is reset whole: every sub-log, each under a new epoch of its own.
	for _, id := range s.slots.Logs(uid)[1:] {
		_, err := s.node.Propose(ctx, s.slots.UserShard(id), raftstore.TrimCommand(&log.Trim{Target: log.ResetUserLog, ID: id}))
		if err != nil && !errors.Is(err, log.ErrInvalid) { // invalid: a sub-log that has no entry yet, nothing to reset
			return 0, fmt.Errorf("reset %s: %w", id, err)
		}
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

// tokenClockSkew is auth.MaxClockSkew, which this package may not import (test/deps_test.go): a
// revocation covers the tokens issued up to that long after it (syncd's revokes), which stay
// valid that much longer than the maximum token lifetime, so it is kept that much longer.
// TestRevokeDeviceEverywhere checks the two agree.
const tokenClockSkew = 30 * time.Second

// RevokeDevice revokes device of uid now: every node refuses its tokens issued up to this
// second and closes its sessions (raftstore.Node.RevokeDevice). The revocation is replicated in
// the meta shard, so it holds on every node and across restarts, until no token it covers can
// be valid any more.
func (s *Server) RevokeDevice(ctx context.Context, uid, device string) (adminapi.Revocation, error) {
	if !log.ValidID(uid) || !log.ValidID(device) {
		return adminapi.Revocation{}, fmt.Errorf("%w: bad user or device id %q/%q", log.ErrInvalid, uid, device)
	}
	now := time.Now().Unix()
	r := cluster.Revocation{User: uid, Device: device, Before: now,
		Until: now + int64((s.maxTokenLifetime+tokenClockSkew+time.Second-1)/time.Second)}
	if err := s.cluster.RevokeDevice(ctx, r); err != nil {
		return adminapi.Revocation{}, err
	}
	return adminapi.Revocation{User: r.User, Device: r.Device, Before: r.Before, Until: r.Until}, nil
}

// userRoutes serves the user endpoints on the admin mux:
//
//	POST /v1/users/{uid}/reset                  reset the user's log: {"user", "epoch"}
//	POST /v1/users/{uid}/devices/{dev}/revoke   revoke the device's tokens: adminapi.Revocation
func (s *Server) userRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/users/{uid}/devices/{dev}/revoke", func(w http.ResponseWriter, r *http.Request) {
		uid, dev := r.PathValue("uid"), r.PathValue("dev")
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		rev, err := s.RevokeDevice(ctx, uid, dev)
		if errors.Is(err, log.ErrInvalid) {
			writeOpsError(w, http.StatusBadRequest, "bad_request", err.Error(), "user and device ids are 1-128 printable ASCII characters, no space")
			return
		}
		if err != nil {
			writeProposeError(w, err, "")
			return
		}
		s.logger.Warn("device revoked by an operator: its tokens issued until now are refused, its sessions close", "user", uid, "device", dev)
		writeJSON(w, http.StatusOK, rev)
	})
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
