package cluster

import "context"

// LeadsMeta reports whether this node's member leads the meta group (for tests).
func (c *Cluster) LeadsMeta() bool { return c.meta.Leads() }

// ResendAddShard proposes the add-shard command of shard id again, as a resent request would
// (for tests: AddShard computes the next id itself).
func (c *Cluster) ResendAddShard(ctx context.Context, id ShardID) error {
	return c.propose(ctx, metaCommand{Op: "add-shard", Shard: id})
}
