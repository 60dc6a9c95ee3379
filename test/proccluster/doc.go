// Package proccluster runs a syncd cluster as child processes of the calling program: real
// cmd/syncd binaries on loopback, each node with its own data directory, addresses and log file,
// all sharing one token secret, one admin token and one certificate, so that one device token,
// one admin token and one pinned fingerprint work on every node, and each with a node
// certificate of one cluster CA, so that the node plane runs mutual TLS as a real cluster's does.
// It is the one process-cluster harness of the repository, used by cmd/localcluster (the "try a
// cluster" command), by cmd/syncbench's cluster scenario and by the fault suite in test/.
//
// A cluster is laid out by New (addresses, directories, credentials; nothing runs yet), started
// by Cluster.Start, and its nodes are then killed (SIGKILL), paused (SIGSTOP), resumed, stopped
// (SIGTERM, then SIGKILL after a grace period) and started again on the same data and addresses,
// one at a time through Node or all at once through Cluster. Readiness (/readyz), the cluster
// view (/v1/cluster), the shard leaders and Raft indexes (/metrics) are read over each node's
// admin HTTP API (with the cluster's admin token: Node.AdminDo, Node.AdminRequest), never from the
// server's packages, so the harness sees what an operator sees.
//
//	bins, err := proccluster.Build(ctx, proccluster.BuildConfig{Dir: dir})
//	c, err := proccluster.New(proccluster.Config{Syncd: bins.Syncd, Dir: dir, Nodes: 3, Shards: 4})
//	err = c.Start()
//	err = c.WaitReady(ctx, time.Minute)
//	leaders := c.Leaders(ctx)
//	err = c.Node(1).Kill()
//	err = c.Node(1).Start()
//	err = c.Stop(10 * time.Second)
//
// What belongs to one user of the harness stays with it: the fault suite's relay mesh (it passes
// each node's -peer-dial map as extra flags, Node.SetArgs), its timeline and checker, the
// benchmark's CPU accounting and profiles, localcluster's directory layout file and messages.
//
// Imports from the server are kept to what has no admin-API equivalent, each in one file: the
// token secret, the admin token, the certificates and token minting (credentials.go, package
// syncd/auth: the one token format and TLS helper), the JSON type of the cluster view and the
// admin token's header (adminapi.go) and the shard id type (metrics.go, package raftstore). Free
// ports come from testkit.PickAddr.
//
// Node processes get a parent-death signal on Linux (procattr_linux.go), so that no node
// outlives the program that started it and keeps its ports, and their own process group on
// Unix, so that Ctrl-C in a terminal reaches the parent alone, which then stops them in order.
package proccluster
