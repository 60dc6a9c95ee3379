package syncd

import (
	"log/slog"

	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/admin"
)

// The descriptor budget (docs/OPERATIONS.md, "File descriptors"; docs/DECISIONS.md, D47).
//
// Sockets and the store's files share one per-process limit, RLIMIT_NOFILE, whose soft value
// the Go runtime raises to the hard one when the process starts. The store must never find it
// spent: a Pebble that cannot create a table or a log fails its flushes and compactions, and
// Raft cannot snapshot. What strangers can make the node hold is capped (the admin server's
// connections, the node plane's connections pending authentication; clients share one UDP
// socket), so the store's share is safe whenever the limit covers
//
//	storeFDs                      Pebble's table cache and its other files
//	+ admin.DefaultMaxConns       the admin HTTP server's connections
//	+ MaxPendingHandshakes        node-plane connections not yet authenticated
//	+ nodeLinkFDs                 authenticated node-plane connections (the cluster's own)
//	+ processFDs                  listeners, the QUIC socket, epoll, stdio, the log
//
// which is 2,024 with the defaults. The node warns at start when the limit is lower; it does not
// refuse to start, since a small node may well run within less.
const (
	// storeFDs is Pebble's default table cache (Options.MaxOpenFiles, 1,000) and 64 more for its
	// write-ahead logs, MANIFEST, OPTIONS and lock files and the Raft snapshots being written.
	storeFDs = 1000 + 64
	// nodeLinkFDs is what a node's authenticated node-plane connections take: up to 3 pooled and
	// one pipelined connection per shard and peer each way (8 × 5 groups × 2 peers = 80 for the
	// default 4 shards on three nodes, 144 for 8), the forwarder's and the calls' pools, and room
	// for more shards.
	nodeLinkFDs = 512
	// processFDs covers the rest of the process.
	processFDs = 64
	// needFDs is the limit the budget asks for.
	needFDs = storeFDs + admin.DefaultMaxConns + raftstore.MaxPendingHandshakes + nodeLinkFDs + processFDs
)

// checkFDLimit logs the descriptor limit against needFDs: a warning saying how to raise it when
// it is lower, a debug line otherwise.
func checkFDLimit(logger *slog.Logger) {
	limit, ok := fdLimit()
	switch {
	case !ok:
	case limit < needFDs:
		logger.Warn("the open-file limit is below what the node may need: the store could fail to create files "+
			"once the sockets the node allows are open; raise it (ulimit -n, systemd LimitNOFILE=, docker --ulimit nofile=)",
			"fd_limit", limit, "fd_need", needFDs, "see", "docs/OPERATIONS.md, \"File descriptors\"")
	default:
		logger.Debug("open-file limit", "fd_limit", limit, "fd_need", needFDs)
	}
}
