package syncd

import (
	"context"
	"errors"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
)

// Delivery reports: how a sender learns that a message was delivered (PROTOCOL §8.8).
//
// A message is delivered once one device of the recipient stored it: its cursor ack passed the
// user-log entry that carries it. Cursor acks land on the recipient's shard, the member's
// delivered mark lives with the conversation on its home shard, and the sender learns the step
// as a conversation entry (kind delivered) fanned out to its log. So the leader of each shard,
// every DeliveryReportInterval, takes the logs whose devices acked past what was reported
// (log.Shard.DeliveryDue), appends one KindDelivered per conversation concerned, up to the
// newest message acked, and then records the log as reported (log.Tx.MarkReported).
//
// Exactly-once without a protocol of its own: a delivered append that does not move the member's
// mark writes nothing (a NoOp), so a report repeated after a crash, a timeout or a leader change
// between the two proposals changes nothing, and the mark never goes backwards. Coalescing comes
// from the interval: however many acks a log took in one interval, one entry per conversation
// carries them. A conversation that refuses for good (the user left it) is skipped; any other
// failure leaves the log due, and the next round reports it again.

// Bounds of one round on one shard: the logs it reports and the entries it reads from each,
// so that a burst of acks spreads over rounds instead of making one round long.
const (
	deliveryLogsPerRound    = 256
	deliveryEntriesPerRound = 4096
)

// deliveryLoop reports the deliveries of the user logs of every shard this node leads, every
// DeliveryReportInterval, until ctx ends.
func (s *Server) deliveryLoop(ctx context.Context) {
	s.everyLedShard(ctx, s.cfg.DeliveryReportInterval, func(id raftstore.ShardID) {
		if err := s.reportDeliveries(ctx, id); err != nil && ctx.Err() == nil {
			s.logger.Debug("delivery reports failed; retrying next round", "shard", id, "err", err)
		}
	})
}

// reportDeliveries reports what the devices of shard's user logs acked since the last report.
func (s *Server) reportDeliveries(ctx context.Context, shard raftstore.ShardID) error {
	state, err := s.node.State(shard)
	if err != nil {
		return err
	}
	due, err := state.DeliveryDue(deliveryLogsPerRound, deliveryEntriesPerRound)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range due {
		if err := s.reportLog(ctx, d); err != nil {
			errs = append(errs, err)
			continue
		}
		cmd := raftstore.MarkReportedCommand(&log.MarkReported{Log: d.Log, Cursor: log.Cursor{Epoch: d.Epoch, Pos: d.To}})
		if _, err := s.node.Propose(ctx, shard, cmd); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// reportLog appends the delivered mark of d's user to every conversation d names. It stops at
// the first failure that may pass, leaving the log due.
func (s *Server) reportLog(ctx context.Context, d log.DeliveryDue) error {
	for _, c := range d.Convs {
		app := &log.Append{Kind: log.KindDelivered, Conv: c.Conv, Sender: d.User, ReadUpTo: c.UpTo,
			StatusFanoutLimit: int64(s.cfg.StatusFanoutLimit)}
		res, err := s.node.Propose(ctx, s.slots.ConvShard(c.Conv), raftstore.AppendCommand(app))
		switch {
		case err == nil && res.Append.NoOp:
			s.metrics.deliveryReported(reportNoop)
		case err == nil:
			s.metrics.deliveryReported(reportAdvanced)
		case log.Rejected(err) && !passing(err):
			s.metrics.deliveryReported(reportRefused)
		default:
			s.metrics.deliveryReported(reportError)
			return err
		}
	}
	return nil
}

// passing reports whether err is a refusal that lasts only while the conversation moves between
// shards: the report is retried, not skipped.
func passing(err error) bool {
	return errors.Is(err, log.ErrMoving) || errors.Is(err, log.ErrMoved) || errors.Is(err, log.ErrNotYet)
}

// observeRead records how long after its append the newest message a read receipt marks read
// was read (syncd_read_after_seconds): the read stage of a message, after sent and delivered.
// Only when the conversation's home replica is on this node, so that the figure costs one local
// point read and never a hop to another node; in a cluster where every node holds every shard,
// that is every receipt.
func (s *Server) observeRead(home raftstore.ShardID, conv string, upTo log.Position) {
	state, err := s.node.State(home)
	if err != nil || upTo == 0 {
		return
	}
	r, err := state.ReadConv(conv, 0, upTo, log.Limit{Count: 1})
	if err != nil || r.Status != log.ReadEntries || r.Entries[0].Seq != upTo {
		return // trimmed, or not there
	}
	s.metrics.observeReadAfter(time.Since(time.Unix(0, r.Entries[0].Time)))
}
