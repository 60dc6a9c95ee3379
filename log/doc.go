// Package log is syncd's data model on Pebble: conversation logs, per-user logs (the sync
// streams), dedup records, the fan-out outbox, device cursors, retention and checksums.
//
// Everything here is deterministic and goroutine-free. A replicated state machine (package
// raftstore) drives it: every mutation runs inside a [Tx] stamped with the Raft index and the
// proposer's clock ([Stamp]), so all replicas that apply the same commands in the same order end
// with byte-identical keyspaces. Nothing in this package reads the wall clock, draws random
// numbers or lets map iteration order reach the output.
//
// # Shards and keys
//
// One Pebble database serves a whole node. Each shard (one Raft group) owns the keyspace under
// its prefix 0x01 | shard(4); see keys.go for the layout. A shard's keyspace can therefore be
// iterated, snapshotted ([Shard.WriteSnapshot]) and dropped as a unit. Raft's own log and stable
// store live under a different prefix owned by raftstore.
//
// # Positions
//
// Every log (user or conversation) numbers its entries 1, 2, 3… with no holes. Each log has an
// [Epoch], fixed when the log is created; a reader always learns the epoch next to positions so a
// cursor from an older incarnation of the log is detected instead of silently misread. Reads
// answer explicitly ([ReadStatus]): entries starting exactly at the requested position, "caught
// up, head is h", "too old, first retained is f", or "epoch changed".
//
// See DESIGN.md in this folder for the invariants and trade-offs.
package log
