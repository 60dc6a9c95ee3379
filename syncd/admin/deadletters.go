package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/peer"
)

// Dead letters (G5) as operators see them: the fan-out records a delivery its destination refused
// (syncd/fanout); the admin endpoints below list them, replay them once the cause is fixed, or
// drop them. A dead letter is named "<source>-<destination>-<outbox position>".

// replayDeadLetter reads the dead letter (src, dest, pos), held or archived, on src's leader
// replica, wherever it is (so a drop acknowledged before is seen), and replays it
// (fanout.Fanout.Replay). A dead letter the leader has in neither table is log.ErrNoDeadLetter.
func (s *Server) replayDeadLetter(ctx context.Context, src, dest raftstore.ShardID, pos uint64) (int, error) {
	var a peer.DeadLetterAnswer
	if err := s.peer.Run(ctx, src, peer.OpDeadLetter, true, peer.DeadLetterArgs{Dest: uint32(dest), Pos: pos}, &a); err != nil {
		return 0, err
	}
	if !a.Found {
		return 0, fmt.Errorf("%w: %s", log.ErrNoDeadLetter, adminapi.DeadLetterID(uint32(src), uint32(dest), pos))
	}
	return s.fan.Replay(ctx, src, a.Letter.Log())
}

// opDeadLetter is the "dead_letter" inspection: one dead letter, with its entry, from a replica
// of its source shard.
func (s *Server) opDeadLetter(_ context.Context, state *log.Shard, req peer.Request) (any, error) {
	var a peer.DeadLetterArgs
	if err := req.Decode(&a); err != nil {
		return nil, err
	}
	dl, ok, err := state.DeadLetter(raftstore.ShardID(a.Dest), a.Pos)
	if err == nil && !ok {
		dl, ok, err = state.ArchivedDeadLetter(raftstore.ShardID(a.Dest), a.Pos)
	}
	if err != nil || !ok {
		return peer.DeadLetterAnswer{}, err
	}
	return peer.DeadLetterAnswer{Found: true, Letter: peer.FromDeadLetter(&dl, true)}, nil
}

// listDeadLetters returns up to limit dead letters of every data shard, each shard read on a
// replica wherever one is (so any node lists the whole cluster's), and how many they hold in all.
// It fails when no replica of some shard can be read: a list that silently left a shard out
// would tell an operator that its dead letters are gone.
func (s *Server) listDeadLetters(ctx context.Context, limit int, archived bool) (adminapi.DeadLetterList, error) {
	out := adminapi.DeadLetterList{Items: []adminapi.DeadLetterView{}}
	for _, src := range s.slots.Shards() {
		var a peer.DeadLetters
		args := peer.DeadLettersArgs{Limit: limit - len(out.Items), Archived: archived}
		if err := s.peer.Run(ctx, src, peer.OpDeadLetters, false, args, &a); err != nil {
			return out, err
		}
		out.Total += a.Count
		for _, dl := range a.Items {
			out.Items = append(out.Items, deadLetterView(src, dl))
		}
	}
	return out, nil
}

// opDeadLetters is the "dead_letters" inspection: a replica of a source shard's dead letters, as
// views (sizes, not bodies, so that an answer stays small).
func (s *Server) opDeadLetters(_ context.Context, state *log.Shard, req peer.Request) (any, error) {
	var a peer.DeadLettersArgs
	if err := req.Decode(&a); err != nil {
		return nil, err
	}
	var out peer.DeadLetters
	st, err := state.DeadLetterStats()
	out.Count = st.Held
	read := state.DeadLetters
	if a.Archived {
		out.Count, read = st.Archived, state.ArchivedDeadLetters
	}
	if err != nil || out.Count == 0 || a.Limit <= 0 {
		return out, err
	}
	dls, err := read(0, 0, min(a.Limit, maxDeadLetterList))
	if err != nil {
		return nil, err
	}
	for i := range dls {
		out.Items = append(out.Items, peer.FromDeadLetter(&dls[i], false))
	}
	return out, nil
}

// maxDeadLetterList bounds one shard's answer to a list, whatever the caller asks.
const maxDeadLetterList = 1000

// deadLetterView is how an operator sees dead letter dl of shard src: ids, reason and sizes,
// not the body (operators triage by ids and reason, not by reading users' messages).
func deadLetterView(src raftstore.ShardID, dl peer.DeadLetter) adminapi.DeadLetterView {
	e := dl.Entry
	ldl := dl.Log()
	at := func(ns int64) *time.Time {
		if ns == 0 {
			return nil
		}
		t := time.Unix(0, ns).UTC()
		return &t
	}
	return adminapi.DeadLetterView{
		Class: ldl.Class().String(), Attempts: dl.Attempts, NextTry: at(dl.NextTry), GaveUp: ldl.GaveUp(), ArchivedAt: at(dl.ArchivedAt),
		ID: adminapi.DeadLetterID(uint32(src), dl.Dest, dl.Pos), Source: uint32(src), Dest: dl.Dest, Pos: dl.Pos,
		Users: dl.Users, Reason: dl.Reason, FailedAt: time.Unix(0, dl.FailedAt).UTC(),
		MsgID: e.MsgID.Log().String(), Conv: e.Conv, ConvSeq: e.ConvSeq, Kind: log.Kind(e.Kind).String(),
		Sender: e.Sender, Time: time.Unix(0, e.Time).UTC(), BodyBytes: dl.BodyBytes,
	}
}

// deadLetterRoutes serves the dead-letter endpoints on the admin mux. Any node answers for the
// whole cluster: the list reads a replica of each source shard wherever one is, a replay reads
// its dead letter on the source shard's leader, and the replay's writes and the drop are
// proposals, which reach the leaders. A list may show for a moment a dead letter just replayed
// or dropped (a follower's replica trails its leader); a replay never acts on one whose drop was
// acknowledged, and replaying one just replayed appends nothing (the destination remembers the
// replay).
//
//	GET    /v1/deadletters[?limit=N][&archived=1]  list the held (or archived) ones (adminapi.DeadLetterList), default and maximum limit 1000
//	POST   /v1/deadletters/{id}/replay    replay one, held or archived: {"id", "appended"}
//	DELETE /v1/deadletters/{id}           drop one, held or archived: {"id", "dropped": true}
func (s *Server) deadLetterRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/deadletters", func(w http.ResponseWriter, r *http.Request) {
		limit := 1000
		if v := r.URL.Query().Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				writeOpsError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("bad limit %q", v), "pass a positive number")
				return
			}
			limit = min(n, limit)
		}
		archived := false
		if v := r.URL.Query().Get("archived"); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				writeOpsError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("bad archived %q", v), "pass archived=1 or leave it out")
				return
			}
			archived = b
		}
		list, err := s.listDeadLetters(r.Context(), limit, archived)
		if err != nil {
			writeProposeError(w, err, "")
			return
		}
		writeJSON(w, http.StatusOK, list)
	})
	handle := func(pattern string, op func(ctx context.Context, src, dest raftstore.ShardID, pos uint64) (any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			id := r.PathValue("id")
			s32, d32, pos, err := adminapi.ParseDeadLetterID(id)
			src, dest := raftstore.ShardID(s32), raftstore.ShardID(d32)
			if err != nil {
				writeOpsError(w, http.StatusBadRequest, "bad_request", err.Error(), "")
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
			defer cancel()
			res, err := op(ctx, src, dest, pos)
			if err != nil {
				writeProposeError(w, err, "the destination still refuses it: fix the cause, or drop it")
				return
			}
			writeJSON(w, http.StatusOK, res)
		})
	}
	handle("POST /v1/deadletters/{id}/replay", func(ctx context.Context, src, dest raftstore.ShardID, pos uint64) (any, error) {
		n, err := s.replayDeadLetter(ctx, src, dest, pos)
		return map[string]any{"id": adminapi.DeadLetterID(uint32(src), uint32(dest), pos), "appended": n}, err
	})
	handle("DELETE /v1/deadletters/{id}", func(ctx context.Context, src, dest raftstore.ShardID, pos uint64) (any, error) {
		// A held one is dropped; failing that, an archived one (the two never share an id).
		err := s.fan.Drop(ctx, src, dest, pos)
		if errors.Is(err, log.ErrNoDeadLetter) {
			err = s.fan.DropArchived(ctx, src, dest, pos)
		}
		return map[string]any{"id": adminapi.DeadLetterID(uint32(src), uint32(dest), pos), "dropped": true}, err
	})
}

func writeOpsError(w http.ResponseWriter, status int, code, msg, hint string) {
	writeJSON(w, status, adminapi.OpsError{Code: code, Message: msg, Hint: hint})
}

// writeProposeError answers an error of a read or a proposal with a status and a hint;
// refusedHint is the hint for a refusal by the state machine (409).
func writeProposeError(w http.ResponseWriter, err error, refusedHint string) {
	var nl *raftstore.NotLeaderError
	switch {
	case errors.Is(err, log.ErrNoDeadLetter):
		writeOpsError(w, http.StatusNotFound, "not_found", err.Error(), "list the current ones with syncctl dlq list")
	case log.Rejected(err), errors.Is(err, cluster.ErrMetaRefused):
		writeOpsError(w, http.StatusConflict, "refused", err.Error(), refusedHint)
	case errors.Is(err, raftstore.ErrNoShard):
		writeOpsError(w, http.StatusServiceUnavailable, "no_shard", err.Error(),
			"no node hosting the shard answered: check the cluster with syncctl cluster status")
	case errors.As(err, &nl):
		writeOpsError(w, http.StatusServiceUnavailable, "not_leader", err.Error(), "ask the shard's leader: "+nl.LeaderAddr)
	default:
		writeOpsError(w, http.StatusServiceUnavailable, "unavailable", err.Error(), "retry; if it persists, check syncctl status")
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	// Read by operators and scripts, never embedded in a page: "<", ">" and "&" stay as they are.
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client hung up: nothing to do
}
