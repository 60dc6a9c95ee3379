package raftstore

// ShardID names one Raft group (shard). IDs are never reused.
type ShardID uint32
