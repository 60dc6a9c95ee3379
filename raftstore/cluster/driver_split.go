package cluster

import (
	"context"

	"github.com/syncd-dev/syncd/log"
)

// splitRun carries out the split of a user's stream into sub-logs (MoveInfo.Subs;
// docs/MOVES.md, "Sub-logs"): a move of the user that copies nothing and stays on its shard.
// Its cutover switches every shard's later records of the user to the sub-logs; its fence waits
// until the user's shard has every record routed to its own log before the switch, and takes
// that log's head as the gate no sub-log's entries pass before it (SplitInfo); its
// switch records the split.
type splitRun struct {
	*run
	subs int
}

// copyStep: there is nothing to copy.
func (r *splitRun) copyStep(ctx context.Context) error {
	return r.advance(ctx, PhaseCutover, nil)
}

// cutoverStep splits the user on every data shard and records where each switched.
func (r *splitRun) cutoverStep(ctx context.Context, m ClusterMap) error {
	s := r.step(log.MoveSplit)
	s.Subs = r.subs
	return r.cutover(ctx, m, s)
}

// fenceStep waits until the user's shard has applied every shard's records up to its split,
// then records the split with the own log's head as its gate.
func (r *splitRun) fenceStep(ctx context.Context, mv *MoveInfo) error {
	if err := r.waitCutovers(ctx, mv); err != nil {
		return err
	}
	state, err := r.d.node.State(r.from)
	if err != nil {
		return err
	}
	info, err := state.UserInfo(r.user)
	if err != nil {
		return err
	}
	r.gate = &SplitInfo{Subs: r.subs, Gate: uint64(info.Head), Epoch: uint64(info.Epoch)}
	if err := r.advance(ctx, PhaseDrop, nil); err != nil {
		return err
	}
	r.d.cfg.Logger.Info("split", "move", r.id, "user", r.user, "sub_logs", r.subs, "gate", info.Head)
	return nil
}

// dropStep: the split is recorded, and nothing was copied to drop.
func (r *splitRun) dropStep(ctx context.Context) error { return r.d.node.EndMove(ctx, r.id) }

// cancelStep: a split canceled before its cutover changed nothing.
func (r *splitRun) cancelStep(ctx context.Context) error { return r.d.node.EndMove(ctx, r.id) }
