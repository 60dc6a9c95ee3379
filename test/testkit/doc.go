// Package testkit is the one copy of the network fakes and polling helpers that tests of every
// tier share: a TCP relay and a Mesh of them to partition and slow node-to-node links, a UDP
// relay that loses, duplicates, delays and reorders packets for QUIC, a port picker that stays
// out of the kernel's ephemeral range, and Wait, which polls a condition instead of sleeping.
//
// It imports only the standard library, so raftstore, syncd, client and the process tests can
// all use it without an import cycle (test/deps_test.go enforces this).
//
// Everything runs on loopback. Relays and meshes own goroutines: Close stops them and waits, so
// a goroutine-leak check in TestMain stays clean.
package testkit
