// Package test holds the tests that span packages: the dependency rules of the layout
// (deps_test.go), end-to-end tests of servers and SDK clients over real QUIC (in-process servers
// from syncd/syncdtest), crash tests with real processes killed with SIGKILL, and the process
// fault suite of clusters under kills, pauses and partitions (cluster_*_test.go, on the harness
// test/proccluster and the relays of test/testkit; see docs/RELIABILITY.md).
//
// go test -short skips the process suites and long tests, for a fast local loop.
package test
