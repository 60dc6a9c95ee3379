package fanout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// Dead letters as a process (issue 26): a dead letter keeps its refusal's code, whose class
// (log.ClassOfRejection) says whether the same delivery may succeed later without an operator.
// The leader of each source shard compensates: it replays the retryable ones, with exponential
// backoff, up to a cap of attempts, then leaves them to the operator; and it archives those no
// longer retried once they are older than an age. Nothing leaves the archive but by an
// operator's replay or drop.
//
// The attempts and the next try live in the replicated record (log.Tx.AttemptDeadLetter), not in
// the leader's memory: a leader change or a restart neither restarts the backoff nor forgets
// the cap, every replica lists the same schedule (syncctl dlq list), and the proposer decides
// the next try, so replicas never compute a time of their own. An attempt costs one Raft entry,
// which the backoff and the cap keep rare.

// DeadLetterPolicy configures the dead-letter process; the zero value turns each part off.
type DeadLetterPolicy struct {
	// Off records dead letters as before the process (no code, no schedule: the v1 request) and
	// never proposes an attempt or an archive. A cluster upgrading from a version without the
	// process runs with it until every node has this one (an older node refuses those commands).
	Off bool
	// Ready, if set, reports whether every node of the cluster applies the process's commands
	// (syncd publishes each node's format level): until it does, the process is off as with Off,
	// so a rolling upgrade never has a newer leader propose what an older follower refuses.
	Ready func() bool
	// RetryBase is how long after its refusal a retryable dead letter is first replayed; each
	// refused replay doubles the wait, up to maxRetryDelay. Zero: no automatic replays.
	RetryBase time.Duration
	// MaxAttempts caps the automatic replays of one dead letter; after the last refused one it
	// waits for the operator (DeadLetter.GaveUp). Zero: no automatic replays.
	MaxAttempts int
	// ArchiveAfter moves a dead letter that is not being retried to the archive once it is this
	// old (since it failed). Zero: never.
	ArchiveAfter time.Duration
}

// on reports whether the process runs now: not turned off, and every node ready for it.
func (p DeadLetterPolicy) on() bool { return !p.Off && (p.Ready == nil || p.Ready()) }

// maxRetryDelay bounds one wait between automatic replays, however many attempts the cap allows.
const maxRetryDelay = 24 * time.Hour

// maxReplaysPerPass bounds the replays of one pass over one shard, so that a burst of dead
// letters due at once spreads over passes instead of holding a pass for long.
const maxReplaysPerPass = 64

// nextTry returns when to replay a dead letter refused done times so far (the first replay has
// done 0), measured from now; 0 when it is not to be replayed again.
func (p DeadLetterPolicy) nextTry(now time.Time, done uint32) int64 {
	if p.Off || p.RetryBase <= 0 || int64(done) >= int64(p.MaxAttempts) {
		return 0
	}
	d := maxRetryDelay
	if done < 32 && p.RetryBase < maxRetryDelay>>done {
		d = p.RetryBase << done
	}
	return now.Add(d).UnixNano()
}

// retrying reports whether the compensation still means to replay dl.
func (p DeadLetterPolicy) retrying(dl *log.DeadLetter) bool {
	return dl.NextTry != 0 && int64(dl.Attempts) < int64(p.MaxAttempts) && p.RetryBase > 0
}

// Compensated returns how many dead letters this node's compensation replayed with success.
func (f *Fanout) Compensated() uint64 { return f.compensated.Load() }

// CompensationRefused returns how many automatic replays the destination refused again and
// that were scheduled once more.
func (f *Fanout) CompensationRefused() uint64 { return f.compRefused.Load() }

// CompensationGaveUp returns how many dead letters this node's compensation gave up: the cap of
// attempts reached, or a replay refused for a reason not retried.
func (f *Fanout) CompensationGaveUp() uint64 { return f.gaveUp.Load() }

// Archived returns how many dead letters this node's compensation moved to the archive.
func (f *Fanout) Archived() uint64 { return f.archived.Load() }

// Compensate makes one pass of the dead-letter process over the dead letters src holds, as this
// node's replica of src has them (call it on src's leader): it replays those due (NextTry ≤ now)
// and archives those not retried and older than ArchiveAfter. A replay is Replay, exactly-once
// however often it is repeated; a refused one is recorded as an attempt with its next try.
// Errors that are not refusals (a destination without a leader, a timeout) leave the dead
// letter as it was, for the next pass.
func (f *Fanout) Compensate(ctx context.Context, src raftstore.ShardID, now time.Time) error {
	p := f.cfg.DeadLetters
	if !p.on() {
		return nil
	}
	state, err := f.node.State(src)
	if err != nil {
		return err
	}
	var errs []error
	replays := 0
	var dest raftstore.ShardID
	var pos uint64
	for {
		page, err := state.DeadLetters(dest, pos, 256)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		if len(page) == 0 {
			return errors.Join(errs...)
		}
		for i := range page {
			dl := &page[i]
			dest, pos = dl.Dest, dl.Pos
			switch {
			case p.retrying(dl):
				if dl.NextTry > now.UnixNano() || replays >= maxReplaysPerPass {
					continue
				}
				replays++
				if err := f.retry(ctx, src, dl, now); err != nil {
					errs = append(errs, err)
				}
			case p.ArchiveAfter > 0 && now.UnixNano()-dl.FailedAt >= int64(p.ArchiveAfter):
				cmd := raftstore.ArchiveDeadLetterCommand(&log.DeadLetterArchive{Dest: dl.Dest, Pos: dl.Pos})
				if _, err := f.node.Propose(ctx, src, cmd); err != nil && !errors.Is(err, log.ErrNoDeadLetter) {
					errs = append(errs, fmt.Errorf("archive %s: %w", adminapi.DeadLetterID(uint32(src), uint32(dl.Dest), dl.Pos), err))
					continue
				}
				f.archived.Add(1)
				f.logger.Info("dead letter archived (list with syncctl dlq list -archived)",
					"id", adminapi.DeadLetterID(uint32(src), uint32(dl.Dest), dl.Pos), "class", dl.Class().String(), "attempts", dl.Attempts)
			}
		}
	}
}

// retry replays dl once; a refusal is recorded as an attempt, scheduled again while its class is
// retryable and the cap allows, else given up.
func (f *Fanout) retry(ctx context.Context, src raftstore.ShardID, dl *log.DeadLetter, now time.Time) error {
	id := adminapi.DeadLetterID(uint32(src), uint32(dl.Dest), dl.Pos)
	_, err := f.Replay(ctx, src, *dl)
	if err == nil {
		f.compensated.Add(1)
		return nil
	}
	if !refused(err) && !errors.Is(err, log.ErrNotYet) {
		return err // not the destination's answer: the next pass tries again, no attempt counted
	}
	code, _ := log.RejectionCode(err)
	attempt := dl.Attempts + 1
	var next int64
	if log.ClassOfRejection(code) == log.ClassRetryable {
		next = f.cfg.DeadLetters.nextTry(now, attempt)
	}
	cmd := raftstore.DeadLetterAttemptCommand(&log.DeadLetterAttempt{Dest: dl.Dest, Pos: dl.Pos, Attempt: attempt,
		Code: code, Reason: err.Error(), NextTry: next})
	if _, perr := f.node.Propose(ctx, src, cmd); perr != nil {
		if errors.Is(perr, log.ErrNoDeadLetter) {
			return nil // an operator replayed or dropped it meanwhile
		}
		return fmt.Errorf("record attempt %d of %s: %w", attempt, id, perr)
	}
	if next == 0 {
		f.gaveUp.Add(1)
		f.logger.Warn("dead letter compensation gave up; it waits for an operator (syncctl dlq list)",
			"id", id, "attempts", attempt, "class", log.ClassOfRejection(code).String(), "reason", err)
		return nil
	}
	f.compRefused.Add(1)
	f.logger.Info("dead letter replay refused again; retrying later", "id", id, "attempts", attempt,
		"next_try", time.Unix(0, next).UTC(), "reason", err)
	return nil
}
