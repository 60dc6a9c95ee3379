// Package raftstoretest runs real raftstore clusters inside one test process: real Raft, real
// Pebble on temp dirs, real TCP on loopback, with a testkit.Mesh of relays between every pair of
// nodes so a test can partition, stop and restart nodes and check that replicas end identical.
package raftstoretest
