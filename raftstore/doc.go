// Package raftstore runs a node's shards: each shard is a hashicorp/raft group whose state machine
// applies versioned commands to a log.Shard, all shards of a node share one Pebble store (the Raft
// log, stable store and state, under per-shard key prefixes) and one TCP listener for Raft,
// forwarded proposals and calls, which speaks mutual TLS 1.3 under the cluster CA ([TLS]).
//
// Use [New] to open a node, [Node.Propose] to replicate a [Command] and get its [Result] after a
// durable quorum commit, and [Node.State] to read a shard's state on this replica. Errors from
// hashicorp/raft are mapped to this package's sentinels ([ErrNotLeader], [ErrTimeout],
// [ErrLeadershipLost], [ErrShutdown], [ErrNoShard], [ErrNoLeader]); refusals of a command are the log package's
// sentinels (see log.Rejected). The application above (syncd's server) is told of applies and
// answers other nodes' calls through the one interface it implements, [App]; [Node.Call] makes
// such a call to another node over the forwarding connection. [Node.WatchLease] says whether a
// replica still hears from its shard's leader (its lease), so that readers stop presenting a cut-off
// replica's head as the shard's.
//
// See DESIGN.md in this folder and docs/ARCHITECTURE.md for the formats and the restart and
// catch-up paths.
package raftstore
