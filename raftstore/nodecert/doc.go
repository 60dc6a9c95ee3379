// Package nodecert holds the certificates of the node plane: the cluster CA (CreateCA), node
// certificates that name their node in a syncd://node/<id> URI SAN (Create, URI, ID), and the
// files a node keeps them in (CAFile, CAKeyFile, CertFile, KeyFile; Load, LoadOrCreate).
// raftstore verifies its peers with ID; syncd, `syncctl cert` and the test harnesses make and
// read the files here.
//
// It also holds the few helpers every certificate and key file syncd writes goes through (Issue,
// AddHosts, KeyPair, LoadKeyPair, FileExists, WriteFileAtomic, WritePair), so that syncd/auth's
// device TLS certificates, browser certificates and token secrets are written exactly as the
// node certificates are, by one copy of the code.
//
// It sits under raftstore, the tier that verifies node certificates, and is a leaf: it imports
// only the standard library and proto/ident (the rules for node ids), so that syncctl can issue
// node certificates without linking raftstore, the state machine or Raft.
package nodecert
