package syncd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
)

// Dead letters (G5) as operators see them: the fan-out records a delivery its destination refused
// (see fanout.go); the admin endpoints below list them, replay them once the cause is fixed, or
// drop them. A dead letter is named "<source>-<destination>-<outbox position>".

// deadLetterID names the dead letter of outbox position pos of src refused by dest.
func deadLetterID(src, dest raftstore.ShardID, pos uint64) string {
	return fmt.Sprintf("%d-%d-%d", src, dest, pos)
}

// parseDeadLetterID parses an id made by deadLetterID.
func parseDeadLetterID(id string) (src, dest raftstore.ShardID, pos uint64, err error) {
	parts := strings.Split(id, "-")
	var n [3]uint64
	if len(parts) == 3 {
		for i, p := range parts {
			if n[i], err = strconv.ParseUint(p, 10, 64); err != nil {
				break
			}
		}
	}
	if len(parts) != 3 || err != nil || n[0] > 1<<32-1 || n[1] > 1<<32-1 {
		return 0, 0, 0, fmt.Errorf("bad dead letter id %q: want <source>-<destination>-<position>, as dlq list prints", id)
	}
	return raftstore.ShardID(n[0]), raftstore.ShardID(n[1]), n[2], nil
}

// DeliveryFault alters the items of a delivery batch (or a replay) just before the fan-out
// proposes them to dest, as a corrupted or misrouted delivery would arrive.
type DeliveryFault func(dest raftstore.ShardID, items []log.Delivery)

// SetDeliveryFault installs fault, or removes it when nil. It is a fault injector for tests that
// need a destination to refuse deliveries (dead letters); production code never calls it.
func (s *Server) SetDeliveryFault(fault DeliveryFault) {
	if fault == nil {
		s.fan.fault.Store(nil)
		return
	}
	s.fan.fault.Store(&fault)
}

// Replay appends dl, the dead letter (src, dl.Dest, dl.Pos) as a replica of src holds it, to its
// users' logs on dl.Dest, then drops it. It returns the number of entries appended: 0 when the
// destination had replayed it already (a repeated replay, say after a crash between the two
// steps, never duplicates). If the destination refuses again, the dead letter stays and the error
// says why. Both steps are proposals, which reach the shards' leaders from any node; reading dl is
// the caller's (the admin endpoint reads it on src's leader replica, see replayDeadLetter).
func (f *Fanout) Replay(ctx context.Context, src raftstore.ShardID, dl log.DeadLetter) (int, error) {
	dest, pos := dl.Dest, dl.Pos
	items := []log.Delivery{{Pos: pos, Users: dl.Users, Entry: dl.Entry}}
	if inject := f.fault.Load(); inject != nil {
		items = cloneItems(items)
		(*inject)(dest, items)
	}
	res, err := f.node.Propose(ctx, dest, raftstore.RedeliverCommand(&log.Redelivery{Source: src, Item: items[0]}))
	if err != nil {
		return 0, fmt.Errorf("replay %s: %w", deadLetterID(src, dest, pos), err)
	}
	f.delivered.Add(uint64(res.Deliver.Appended))
	if err := f.Drop(ctx, src, dest, pos); err != nil && !errors.Is(err, log.ErrNoDeadLetter) {
		return res.Deliver.Appended, err
	}
	f.logger.Info("dead letter replayed", "id", deadLetterID(src, dest, pos), "appended", res.Deliver.Appended)
	return res.Deliver.Appended, nil
}

// replayDeadLetter reads the dead letter (src, dest, pos) on src's leader replica, wherever it is
// (so a drop acknowledged before is seen), and replays it (Fanout.Replay). A dead letter the
// leader does not hold is log.ErrNoDeadLetter.
func (s *Server) replayDeadLetter(ctx context.Context, src, dest raftstore.ShardID, pos uint64) (int, error) {
	var a deadLetterAnswer
	if err := s.inspectLeader(ctx, src, "dead_letter", deadLetterArgs{Dest: uint32(dest), Pos: pos}, &a); err != nil {
		return 0, err
	}
	if !a.Found {
		return 0, fmt.Errorf("%w: %s", log.ErrNoDeadLetter, deadLetterID(src, dest, pos))
	}
	return s.fan.Replay(ctx, src, a.Letter)
}

// deadLetterArgs are the arguments of the "dead_letter" inspection.
type deadLetterArgs struct {
	Dest uint32 `json:"dest"`
	Pos  uint64 `json:"pos"`
}

// deadLetterAnswer is the answer of the "dead_letter" inspection; Found is false when the source
// shard holds no such dead letter (never replayed, or dropped since).
type deadLetterAnswer struct {
	Found  bool           `json:"found"`
	Letter log.DeadLetter `json:"letter"`
}

// opDeadLetter is the "dead_letter" inspection: one dead letter, with its entry, from a replica
// of its source shard.
func opDeadLetter(_ *Server, state *log.Shard, _ raftstore.ShardID, args json.RawMessage) (any, error) {
	a, err := decodeArgs[deadLetterArgs]("dead_letter", args)
	if err != nil {
		return nil, err
	}
	dl, ok, err := state.DeadLetter(raftstore.ShardID(a.Dest), a.Pos)
	if err != nil {
		return nil, err
	}
	return deadLetterAnswer{Found: ok, Letter: dl}, nil
}

// Drop deletes the dead letter (src, dest, pos) without delivering it.
func (f *Fanout) Drop(ctx context.Context, src, dest raftstore.ShardID, pos uint64) error {
	_, err := f.node.Propose(ctx, src, raftstore.DropDeadLetterCommand(&log.DeadLetterDrop{Dest: dest, Pos: pos}))
	if err != nil {
		return fmt.Errorf("drop %s: %w", deadLetterID(src, dest, pos), err)
	}
	return nil
}

// DeadLetterView is one dead letter as the admin endpoint lists it. The body is not shown, only
// its size: operators triage by ids and reason, not by reading users' messages.
type DeadLetterView struct {
	ID        string    `json:"id"`
	Source    uint32    `json:"source"`
	Dest      uint32    `json:"dest"`
	Pos       uint64    `json:"pos"`
	Users     []string  `json:"users"`
	Reason    string    `json:"reason"`
	FailedAt  time.Time `json:"failed_at"`
	MsgID     string    `json:"msg_id"`
	Conv      string    `json:"conv"`
	ConvSeq   uint64    `json:"conv_seq"`
	Kind      string    `json:"kind"`
	Sender    string    `json:"sender"`
	Time      time.Time `json:"time"`
	BodyBytes int       `json:"body_bytes"`
}

// DeadLetterList is the answer of GET /v1/deadletters.
type DeadLetterList struct {
	Total uint64           `json:"total"` // dead letters held by all the data shards of the cluster
	Items []DeadLetterView `json:"items"` // at most limit of them, in id order per shard, shards in order
}

// listDeadLetters returns up to limit dead letters of every data shard, each shard read on a
// replica wherever one is (so any node lists the whole cluster's), and how many they hold in all.
// It fails when no replica of some shard can be read: a list that silently left a shard out
// would tell an operator that its dead letters are gone.
func (s *Server) listDeadLetters(ctx context.Context, limit int) (DeadLetterList, error) {
	out := DeadLetterList{Items: []DeadLetterView{}}
	for _, src := range s.slots.Shards() {
		var a deadLettersAnswer
		if err := s.inspectShard(ctx, src, "dead_letters", deadLettersArgs{Limit: limit - len(out.Items)}, &a); err != nil {
			return out, err
		}
		out.Total += a.Count
		out.Items = append(out.Items, a.Items...)
	}
	return out, nil
}

// deadLettersArgs are the arguments of the "dead_letters" inspection: list at most Limit (0: only
// count them).
type deadLettersArgs struct {
	Limit int `json:"limit"`
}

// deadLettersAnswer is the answer of the "dead_letters" inspection: how many dead letters the
// shard holds, and the first of them.
type deadLettersAnswer struct {
	Count uint64           `json:"count"`
	Items []DeadLetterView `json:"items"`
}

// opDeadLetters is the "dead_letters" inspection: a replica of a source shard's dead letters, as
// views (sizes, not bodies, so that an answer stays small).
func opDeadLetters(_ *Server, state *log.Shard, src raftstore.ShardID, args json.RawMessage) (any, error) {
	a, err := decodeArgs[deadLettersArgs]("dead_letters", args)
	if err != nil {
		return nil, err
	}
	var out deadLettersAnswer
	if out.Count, err = state.DeadLetterCount(); err != nil || out.Count == 0 || a.Limit <= 0 {
		return out, err
	}
	dls, err := state.DeadLetters(0, 0, a.Limit)
	if err != nil {
		return nil, err
	}
	for _, dl := range dls {
		e := &dl.Entry
		out.Items = append(out.Items, DeadLetterView{
			ID: deadLetterID(src, dl.Dest, dl.Pos), Source: uint32(src), Dest: uint32(dl.Dest), Pos: dl.Pos,
			Users: dl.Users, Reason: dl.Reason, FailedAt: time.Unix(0, dl.FailedAt).UTC(),
			MsgID: e.MsgID.String(), Conv: e.Conv, ConvSeq: uint64(e.ConvSeq), Kind: e.Kind.String(),
			Sender: e.Sender, Time: time.Unix(0, e.Time).UTC(), BodyBytes: len(e.Body),
		})
	}
	return out, nil
}

// deadLetterRoutes serves the dead-letter endpoints on the admin mux. Any node answers for the
// whole cluster: the list reads a replica of each source shard wherever one is, a replay reads
// its dead letter on the source shard's leader, and the replay's writes and the drop are
// proposals, which reach the leaders. A list may show for a moment a dead letter just replayed
// or dropped (a follower's replica trails its leader); a replay never acts on one whose drop was
// acknowledged, and replaying one just replayed appends nothing (the destination remembers the
// replay).
//
//	GET    /v1/deadletters[?limit=N]      list (DeadLetterList), default and maximum limit 1000
//	POST   /v1/deadletters/{id}/replay    replay one: {"id", "appended"}
//	DELETE /v1/deadletters/{id}           drop one: {"id", "dropped": true}
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
		list, err := s.listDeadLetters(r.Context(), limit)
		if err != nil {
			writeProposeError(w, err, "")
			return
		}
		writeJSON(w, http.StatusOK, list)
	})
	handle := func(pattern string, op func(ctx context.Context, src, dest raftstore.ShardID, pos uint64) (any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			id := r.PathValue("id")
			src, dest, pos, err := parseDeadLetterID(id)
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
		return map[string]any{"id": deadLetterID(src, dest, pos), "appended": n}, err
	})
	handle("DELETE /v1/deadletters/{id}", func(ctx context.Context, src, dest raftstore.ShardID, pos uint64) (any, error) {
		return map[string]any{"id": deadLetterID(src, dest, pos), "dropped": true}, s.fan.Drop(ctx, src, dest, pos)
	})
}

// OpsError is the JSON body of an admin endpoint's error answer.
type OpsError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty"` // what to do
}

func writeOpsError(w http.ResponseWriter, status int, code, msg, hint string) {
	writeJSON(w, status, OpsError{Code: code, Message: msg, Hint: hint})
}

// writeProposeError answers an error of a read or a proposal with a status and a hint;
// refusedHint is the hint for a refusal by the state machine (409).
func writeProposeError(w http.ResponseWriter, err error, refusedHint string) {
	var nl *raftstore.NotLeaderError
	switch {
	case errors.Is(err, log.ErrNoDeadLetter):
		writeOpsError(w, http.StatusNotFound, "not_found", err.Error(), "list the current ones with syncctl dlq list")
	case log.Rejected(err), errors.Is(err, raftstore.ErrMetaRefused):
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
	_ = enc.Encode(v) // the client hung up: nothing to do
}
