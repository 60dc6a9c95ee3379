// Package fanout moves every conversation entry from its home shard's outbox into the user logs
// of its recipients, on whatever shards those users live (DESIGN §4, G5, G6), and keeps the
// deliveries a destination refuses as dead letters for an operator to replay or drop.
//
// It works over two small interfaces it declares, Shards (the node's replicas and proposals,
// provided by *raftstore.Node) and Router (provided by *cluster.Routing), so its tests run on real
// Pebble shards without Raft. fanout.go explains the ordered, idempotent stream per (source,
// destination) pair and how failures are told apart.
package fanout
