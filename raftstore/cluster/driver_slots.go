package cluster

import (
	"context"
	"time"

	"github.com/syncd-dev/syncd/log"
)

// Moving a range of hash slots (docs/MOVES.md, "Slot moves, shard add, split"): the steps of a
// user's move, made for every key of the range the source holds, found by enumerating the
// source's state (log.Shard.KeysInSlots) on every pass, so a key created during the copy is found
// by the pass after the fence, which sees the range's final state.

// batchBytes bounds the records one copy command of a slot move carries, so that many small
// keys travel in few commands and no command is large.
const batchBytes = 512 << 10

// dropKeys is how many keys one drop or cancel command of a slot move deletes: one command
// deleting half a shard would stall its apply.
const dropKeys = 256

// slotRun is one slot move being carried out by this node: run's steps, made for the range.
type slotRun struct {
	*run
	span log.SlotSpan
	// copied holds, per key this run staged, the last position it staged and the epoch of that
	// log; a key not in it is copied from the start, its earlier staging (another run's)
	// dropped first.
	copied map[slotKey]keyCopy
}

// slotKey names a key of the range: a user or a conversation.
type slotKey struct{ user, conv string }

type keyCopy struct {
	pos   log.Position
	epoch log.Epoch
}

func (r *slotRun) step(op log.MoveOp) *log.MoveStep {
	return &log.MoveStep{Op: op, Move: log.MoveID(r.id), From: r.from, To: r.to, Slots: &r.span}
}

// copyStep makes the destination ready and copies every key of the range to it.
func (r *slotRun) copyStep(ctx context.Context) error {
	if err := r.begin(ctx, r.step(log.MoveBegin)); err != nil {
		return err
	}
	// Until the cutover every key keeps growing on the source; passes repeat until one copies
	// little, so that what the destination holds back from the cutover on, and the activation
	// appends inside the pause, is what arrives in about one short pass, not in the whole copy.
	for pass := 0; pass < maxCopyPasses; pass++ {
		entries, err := r.copyPass(ctx, nil)
		if err != nil {
			return err
		}
		if entries < r.d.cfg.Chunk {
			break
		}
	}
	return r.advance(ctx, PhaseCutover, nil)
}

// maxCopyPasses bounds the copy step's passes over a range whose keys grow as fast as they are
// copied.
const maxCopyPasses = 8

// copyPass stages every key of the range the source holds now, past what this run copied of it,
// in batches of several keys, and returns how many log entries it copied. With final set (the
// activation), the last batch rides with it.
func (r *slotRun) copyPass(ctx context.Context, final *log.MoveStep) (entries int, err error) {
	state, err := r.d.node.State(r.from)
	if err != nil {
		return 0, err
	}
	users, convs, err := state.KeysInSlots(r.span)
	if err != nil {
		return 0, err
	}
	var batch []log.MoveKey
	size, records := 0, 0
	flush := func(last bool) error {
		s := r.step(log.MoveStage)
		if last && final != nil {
			s = final
		} else if len(batch) == 0 {
			return nil
		}
		s.Batch = batch
		if _, err := r.propose(ctx, r.to, s); err != nil {
			return err
		}
		r.bytes += int64(size)
		batch, size, records = nil, 0, 0
		return nil
	}
	keys := make([]slotKey, 0, len(users)+len(convs))
	for _, u := range users {
		keys = append(keys, slotKey{user: u})
	}
	for _, c := range convs {
		keys = append(keys, slotKey{conv: c})
	}
	for _, k := range keys {
		export, id := state.ExportUser, k.user
		if k.conv != "" {
			export, id = state.ExportConv, k.conv
		}
		for done := false; !done; {
			prev, seen := r.copied[k]
			mk := log.MoveKey{User: k.user, Conv: k.conv, Restart: !seen}
			n := 0
			epoch, last, fin, err := export(id, prev.pos, r.d.cfg.Chunk, func(rec log.Record) error {
				mk.Records = append(mk.Records, rec)
				n += len(rec.Key) + len(rec.Value)
				return nil
			})
			if err != nil {
				return 0, err
			}
			if seen && epoch != prev.epoch {
				// The key's log was reset since it was copied (a new epoch, from position 1):
				// it is copied again from the start, what was staged dropped.
				delete(r.copied, k)
				continue
			}
			done = fin
			r.copied[k] = keyCopy{pos: last, epoch: epoch}
			batch, size = append(batch, mk), size+n
			records += len(mk.Records)
			entries += int(last - prev.pos)
			if size >= batchBytes || records >= r.d.cfg.Chunk {
				if err := flush(false); err != nil {
					return 0, err
				}
			}
		}
	}
	return entries, flush(true)
}

// cutoverStep switches every shard's outbox to send the range's users' later records to the
// destination, and records where each switched. The users of the range the map pins to other
// shards stay where they are (log.MoveStep.Pinned): no user move runs while the range moves
// (MoveInfo conflicts), so the map's pins hold for every shard's cutover.
func (r *slotRun) cutoverStep(ctx context.Context, m ClusterMap) error {
	step := r.step(log.MoveCutover)
	for uid, at := range m.Overrides {
		if at != r.from && r.span.Contains(log.UserSlot(uid)) {
			if step.Pinned == nil {
				step.Pinned = map[string]log.ShardID{}
			}
			step.Pinned[uid] = at
		}
	}
	return r.cutover(ctx, m, step)
}

// fenceStep waits until the source has every record routed to it, copies most of the tail,
// fences the range, copies the rest with the activation (which carries the fence's position, the
// barrier the range's conversations wait behind at every destination) and switches the map: the
// range's writes pause from the fence to the switch.
func (r *slotRun) fenceStep(ctx context.Context, mv *MoveInfo) error {
	if err := r.waitCutovers(ctx, mv); err != nil {
		return err
	}
	if _, err := r.copyPass(ctx, nil); err != nil {
		return err
	}
	fenced := time.Now()
	res, err := r.propose(ctx, r.from, r.step(log.MoveFence))
	if err != nil {
		return err
	}
	activate := r.step(log.MoveActivate)
	activate.Fence = res.Move
	if _, err := r.copyPass(ctx, activate); err != nil {
		return err
	}
	if err := r.advance(ctx, PhaseDrop, nil); err != nil {
		return err
	}
	r.switched(fenced)
	return nil
}

// dropStep waits until the source's fan-out has delivered up to the fence, lifts the barrier of
// the range's conversations on the destination, deletes the range's keys from the source in
// chunks and forgets the move.
func (r *slotRun) dropStep(ctx context.Context) error {
	if err := r.settle(ctx, r.step(log.MoveFence), r.step(log.MoveSettle)); err != nil {
		return err
	}
	if _, err := r.propose(ctx, r.from, r.step(log.MoveDrop)); err != nil {
		return err
	}
	if err := r.eachKeyBatch(ctx, log.MoveDrop, r.from); err != nil {
		return err
	}
	if _, err := r.propose(ctx, r.from, r.step(log.MoveDropped)); err != nil {
		return err
	}
	return r.d.node.EndMove(ctx, r.id)
}

// eachKeyBatch proposes op to shard for the range's keys the source holds, dropKeys at a time.
func (r *slotRun) eachKeyBatch(ctx context.Context, op log.MoveOp, shard ShardID) error {
	state, err := r.d.node.State(r.from)
	if err != nil {
		return err
	}
	users, convs, err := state.KeysInSlots(r.span)
	if err != nil {
		return err
	}
	var batch []log.MoveKey
	for _, u := range users {
		batch = append(batch, log.MoveKey{User: u})
	}
	for _, c := range convs {
		batch = append(batch, log.MoveKey{Conv: c})
	}
	for len(batch) > 0 {
		n := min(len(batch), dropKeys)
		s := r.step(op)
		s.Batch = batch[:n]
		if _, err := r.propose(ctx, shard, s); err != nil {
			return err
		}
		batch = batch[n:]
	}
	return nil
}

// cancelStep drops what a canceled move copied to the destination, key by key, and forgets the
// move.
func (r *slotRun) cancelStep(ctx context.Context) error {
	if err := r.eachKeyBatch(ctx, log.MoveCancel, r.to); err != nil {
		return err
	}
	if _, err := r.propose(ctx, r.to, r.step(log.MoveCancel)); err != nil {
		return err
	}
	r.d.cfg.Logger.Info("move canceled", "move", r.id, "key", r.key, "from", uint32(r.from), "to", uint32(r.to))
	return r.d.node.EndMove(ctx, r.id)
}
