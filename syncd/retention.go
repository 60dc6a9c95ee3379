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
// rebase (G3). With Retention.MinAge set, user logs keep what their active devices have not
// acked, up to the bounds (log.Retention). Failures are logged and retried next interval.
func (s *Server) retainLoop(ctx context.Context) {
	s.everyLedShard(ctx, s.cfg.RetentionInterval, func(id raftstore.ShardID) {
		r := s.cfg.Retention
		if !s.formats.ready() { // Trim v1: the bounds alone, which every node applies
			r.MinAge, r.InactiveAfter = 0, 0
		}
		if err := retainShard(ctx, s.node, id, log.TrimUserLog, r, s.metrics); err != nil && ctx.Err() == nil {
			s.logger.Warn("retention pass over user logs failed; retrying next interval", "shard", id, "err", err)
		}
		if s.cfg.ConvRetention == (log.Retention{}) {
			return
		}
		if err := retainShard(ctx, s.node, id, log.TrimConvLog, s.cfg.ConvRetention, s.metrics); err != nil && ctx.Err() == nil {
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
// that r would shorten now (log.Shard.RetentionDue, on this node's clock; the trim itself decides
// on the command's, so every replica trims to the same position). Trims of user logs are counted
// in m.
func retainShard(ctx context.Context, node nodeShards, shard raftstore.ShardID, target log.TrimTarget, r log.Retention, m *metrics) error {
	state, err := node.State(shard)
	if err != nil {
		return err
	}
	page := state.Users
	if target == log.TrimConvLog {
		page = state.Convs
	}
	for after := ""; ; {
		ids, infos, err := page(after, 256)
		if err != nil || len(ids) == 0 {
			return err
		}
		for i, id := range ids {
			if due, err := state.RetentionDue(target, id, time.Now().UnixNano(), r); err != nil || !due {
				if err != nil {
					return err
				}
				continue
			}
			cmd := raftstore.TrimCommand(&log.Trim{Target: target, ID: id, Retention: r})
			res, err := node.Propose(ctx, shard, cmd)
			if err != nil {
				return err
			}
			if target == log.TrimUserLog {
				observeUserTrim(state, m, id, infos[i], log.Position(res.First))
			}
		}
		after = ids[len(ids)-1]
	}
}

// observeUserTrim counts in m what the trim of uid's log, of info before it, to first dropped:
// its entries, and the stored device cursors of its epoch it moved past (a device syncing from
// one is answered too_old and rebases). The cursors are read after the trim, from the leader's
// replica, which applied it.
func observeUserTrim(state *log.Shard, m *metrics, uid string, info log.LogInfo, first log.Position) {
	if m == nil || first <= info.First {
		return
	}
	cs, err := state.Cursors(uid)
	if err != nil {
		return // only the count of devices is lost
	}
	passed := 0
	for _, c := range cs {
		if next := c.Cursor.Pos + 1; c.Cursor.Epoch == info.Epoch && next >= info.First && next < first {
			passed++
		}
	}
	m.observeUserTrim(int(first-info.First), passed)
}
