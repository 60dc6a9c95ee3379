package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/syncd-dev/syncd/syncd"
)

// restoreUsage is syncd restore's help.
const restoreUsage = `usage: syncd restore <backup dir> [syncd flags: -config, -data-dir, -node-id, -raft ...]

Writes the data directory of the first node of a new cluster from a backup taken with
syncctl backup, then exits; start syncd with the same flags to serve it, and the other new nodes
with -join. The node becomes the only member of every shard; the others get replicas as they
join. The data directory must hold no store. Every log gets a new epoch: a device that stored
nothing past what the backup holds continues where it was; one that did (its log moved on after
the backup) is told "epoch changed" and resyncs. The backup holds no secrets: give the node the
old cluster's token secret (-token-secret-file), or every device token is refused.
`

// runRestore is syncd restore: it seeds the data directory the rest of args configure from the
// backup named by the first argument.
func runRestore(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fmt.Fprint(stderr, restoreUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	from, rest := args[0], args[1:]
	opts, err := parseArgs(rest, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		printErr(stderr, err)
		return 2
	}
	cfg, err := opts.toConfig(stderr)
	if err != nil {
		printErr(stderr, err)
		return 2
	}
	rep, err := syncd.Restore(cfg, from)
	if err != nil {
		printErr(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "restored %d shards and the cluster map (version %d) from %s (taken %s) into %s as node %s; %d logs got a new epoch\n"+
		"start it with the same flags; other nodes join it with -join %s\n",
		len(rep.Manifest.Shards), rep.Manifest.MapIndex, from, rep.Manifest.Started.Format("2006-01-02 15:04:05Z"), cfg.Dir, cfg.NodeID, rep.Renewed, cfg.RaftAddr)
	return 0
}
