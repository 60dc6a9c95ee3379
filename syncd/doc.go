// Package syncd is the syncd server: a node that serves devices over QUIC (docs/PROTOCOL.md) on
// top of the node's shards (raftstore). It authenticates connections (syncd/auth), answers
// requests by proposing to the conversation's home shard (routing by raftstore/cluster), streams each
// device's user log from its cursor and pushes new entries as they are applied, and runs the
// fan-out (syncd/fanout), the admin HTTP server (syncd/admin) and the node-to-node reads of
// shards hosted elsewhere (syncd/peer).
//
// Create a server with NewServer(cfg), where zero fields of Config take the defaults of
// DefaultConfig, then call Run until its context ends.
//
// See DESIGN.md in this folder and docs/ARCHITECTURE.md.
package syncd
