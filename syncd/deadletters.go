package syncd

import (
	"context"
	"time"

	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/fanout"
)

// Dead letters as a process (syncd/fanout/compensate.go): the leader of each shard replays the
// shard's retryable dead letters with backoff up to a cap, and archives those no longer retried
// once they are old. The pass runs often (deadLetterInterval) but reads only the shard's held
// dead letters, which are few while the cluster is healthy, and proposes only what is due.

// deadLetterPolicy turns the dead-letter settings of cfg (defaults applied) into the fan-out's
// policy: a negative cap or age turns that part off, and the process waits for every node to
// read its formats (formats.go).
func deadLetterPolicy(cfg Config, formats *formatGate) fanout.DeadLetterPolicy {
	p := fanout.DeadLetterPolicy{Off: cfg.DisableDeadLetterProcess, Ready: formats.ready, RetryBase: cfg.DeadLetterRetryBase}
	p.MaxAttempts = max(cfg.DeadLetterRetryMaxAttempts, 0)
	p.ArchiveAfter = max(cfg.DeadLetterArchiveAfter, 0)
	return p
}

// deadLetterInterval is how often the leader of a shard makes a pass: half the retry base, so a
// replay runs at most that late, within [50ms, 1m].
func deadLetterInterval(cfg Config) time.Duration {
	return min(max(cfg.DeadLetterRetryBase/2, 50*time.Millisecond), time.Minute)
}

// deadLetterLoop runs the dead-letter process on every shard this node leads until ctx ends.
// A pass that fails is logged and made again next interval.
func (s *Server) deadLetterLoop(ctx context.Context) {
	s.everyLedShard(ctx, deadLetterInterval(s.cfg), func(id raftstore.ShardID) {
		if err := s.fan.Compensate(ctx, id, time.Now()); err != nil && ctx.Err() == nil {
			s.logger.Warn("dead-letter pass failed; retrying next interval", "shard", id, "err", err)
		}
	})
}
