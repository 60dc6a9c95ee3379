package fanout

import (
	"context"
	"errors"
	"fmt"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// Dead letters (G5): the fan-out records a delivery its destination refused (see isolate in
// fanout.go); an operator lists them (syncd/admin), replays them once the cause is fixed, or drops
// them. A dead letter is named "<source>-<destination>-<outbox position>" (adminapi.DeadLetterID).

// Fault alters the items of a delivery batch (or a replay) just before the fan-out proposes them
// to dest, as a corrupted or misrouted delivery would arrive.
type Fault func(dest raftstore.ShardID, items []log.Delivery)

// SetFault installs fault, or removes it when nil. It is a fault injector for tests that need a
// destination to refuse deliveries (dead letters); production code never calls it.
func (f *Fanout) SetFault(fault Fault) {
	if fault == nil {
		f.fault.Store(nil)
		return
	}
	f.fault.Store(&fault)
}

// Replay appends dl, the dead letter (src, dl.Dest, dl.Pos) as a replica of src holds it, to its
// users' logs on dl.Dest, then drops it (from the archive if dl.Archived). It returns the number of entries appended: 0 when the
// destination had replayed it already (a repeated replay, say after a crash between the two
// steps, never duplicates). If the destination refuses again, the dead letter stays and the error
// says why. Both steps are proposals, which reach the shards' leaders from any node; reading dl is
// the caller's (the admin endpoint reads it on src's leader replica).
func (f *Fanout) Replay(ctx context.Context, src raftstore.ShardID, dl log.DeadLetter) (int, error) {
	dest, pos := dl.Dest, dl.Pos
	id := adminapi.DeadLetterID(uint32(src), uint32(dest), pos)
	items := []log.Delivery{{Pos: pos, Users: dl.Users, Entry: dl.Entry}}
	if inject := f.fault.Load(); inject != nil {
		items = cloneItems(items)
		(*inject)(dest, items)
	}
	res, err := f.node.Propose(ctx, dest, raftstore.RedeliverCommand(&log.Redelivery{Source: src, Item: items[0]}))
	if err != nil {
		return 0, fmt.Errorf("replay %s: %w", id, err)
	}
	f.delivered.Add(uint64(res.Deliver.Appended))
	if err := f.drop(ctx, src, &log.DeadLetterDrop{Dest: dest, Pos: pos, Archived: dl.Archived}); err != nil && !errors.Is(err, log.ErrNoDeadLetter) {
		return res.Deliver.Appended, err
	}
	f.logger.Info("dead letter replayed", "id", id, "appended", res.Deliver.Appended)
	return res.Deliver.Appended, nil
}

// Drop deletes the held dead letter (src, dest, pos) without delivering it.
func (f *Fanout) Drop(ctx context.Context, src, dest raftstore.ShardID, pos uint64) error {
	return f.drop(ctx, src, &log.DeadLetterDrop{Dest: dest, Pos: pos})
}

// DropArchived deletes the archived dead letter (src, dest, pos) without delivering it.
func (f *Fanout) DropArchived(ctx context.Context, src, dest raftstore.ShardID, pos uint64) error {
	return f.drop(ctx, src, &log.DeadLetterDrop{Dest: dest, Pos: pos, Archived: true})
}

func (f *Fanout) drop(ctx context.Context, src raftstore.ShardID, r *log.DeadLetterDrop) error {
	_, err := f.node.Propose(ctx, src, raftstore.DropDeadLetterCommand(r))
	if err != nil {
		return fmt.Errorf("drop %s: %w", adminapi.DeadLetterID(uint32(src), uint32(r.Dest), r.Pos), err)
	}
	return nil
}
