package syncd

import (
	"context"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/fanout"
)

// nodeShards is what the server's background work and metrics need of the node's shards; it is
// *raftstore.Node in a server and raftstoretest.Local in tests that run without Raft.
type nodeShards interface {
	fanout.Shards
	// Status reports every replica this node hosts.
	Status() []raftstore.ShardStatus
}

// retainLoop applies Config.Retention to the user logs and Config.ConvRetention to the
// conversation logs of every shard this node leads, every RetentionInterval, until ctx ends.
// Trimming only moves a log's first retained position; devices behind it get "too old" and
// rebase (G3). Failures are logged and retried next interval.
func (s *Server) retainLoop(ctx context.Context) {
	s.everyLedShard(ctx, s.cfg.RetentionInterval, func(id raftstore.ShardID) {
		if err := retainShard(ctx, s.node, id, log.TrimUserLog, s.cfg.Retention); err != nil && ctx.Err() == nil {
			s.logger.Warn("retention pass over user logs failed; retrying next interval", "shard", id, "err", err)
		}
		if s.cfg.ConvRetention == (log.Retention{}) {
			return
		}
		if err := retainShard(ctx, s.node, id, log.TrimConvLog, s.cfg.ConvRetention); err != nil && ctx.Err() == nil {
			s.logger.Warn("retention pass over conversation logs failed; retrying next interval", "shard", id, "err", err)
		}
	})
}

// everyLedShard calls pass for each shard this node leads, every interval, until ctx ends: the
// background work a shard's leader does for the shard (retention, delivery reports).
func (s *Server) everyLedShard(ctx context.Context, interval time.Duration, pass func(raftstore.ShardID)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, id := range s.node.Shards() {
			if st, err := s.node.ShardStatus(id); err == nil && st.State == "leader" {
				pass(id)
			}
		}
	}
}

// retainShard proposes a trim for each log of target's kind (user or conversation logs) of shard
// that holds more than r allows: over MaxCount entries, or an oldest entry older than MaxAge.
func retainShard(ctx context.Context, node nodeShards, shard raftstore.ShardID, target log.TrimTarget, r log.Retention) error {
	state, err := node.State(shard)
	if err != nil {
		return err
	}
	page, read := state.Users, state.ReadUser
	if target == log.TrimConvLog {
		page, read = state.Convs, state.ReadConv
	}
	for after := ""; ; {
		ids, infos, err := page(after, 256)
		if err != nil || len(ids) == 0 {
			return err
		}
		for i, id := range ids {
			if due, err := retentionDue(read, id, infos[i], r); err != nil || !due {
				if err != nil {
					return err
				}
				continue
			}
			cmd := raftstore.TrimCommand(&log.Trim{Target: target, ID: id, Retention: r})
			if _, err := node.Propose(ctx, shard, cmd); err != nil {
				return err
			}
		}
		after = ids[len(ids)-1]
	}
}

// retentionDue reports whether the log id, of info, read by read, holds more than r allows.
func retentionDue(read func(id string, epoch log.Epoch, from log.Position, lim log.Limit) (log.Read, error), id string, info log.LogInfo, r log.Retention) (bool, error) {
	if info.Head < info.First {
		return false, nil // empty
	}
	if r.MaxCount > 0 && uint64(info.Head-info.First+1) > r.MaxCount {
		return true, nil
	}
	if r.MaxAge <= 0 {
		return false, nil
	}
	oldest, err := read(id, info.Epoch, info.First, log.Limit{Count: 1})
	if err != nil || oldest.Status != log.ReadEntries {
		return false, err
	}
	return time.Since(time.Unix(0, oldest.Entries[0].Time)) > time.Duration(r.MaxAge), nil
}
