package raftstore

import "github.com/syncd-dev/syncd/log"

// ShardID names one Raft group (shard). IDs are never reused. It is the log package's ShardID,
// so ids flow between the layers without conversions.
type ShardID = log.ShardID
