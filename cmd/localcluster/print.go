package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// printReady writes the node table and the commands to try the cluster with: tokens from the
// shared secret (and the admin token, which syncctl finds in dir), a send through one node and a pull through another, the cluster status, and a
// kill -9 to watch failover. syncctl is the syncctl command to print; dir is the cluster
// directory.
func printReady(w io.Writer, dir, syncctl string, info readyInfo, took time.Duration) {
	fmt.Fprintf(w, "\nlocalcluster: %d nodes ready after %.1fs; data in %s\n\n", len(info.Nodes), took.Seconds(), dir)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tCLIENTS (QUIC)\tADMIN (HTTP)\tPID\tLOG")
	for _, n := range info.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", n.ID, n.Client, n.Admin, n.PID, n.Log)
	}
	tw.Flush()

	first := info.Nodes[0]
	sender := info.Nodes[min(1, len(info.Nodes)-1)]
	puller := info.Nodes[min(2, len(info.Nodes)-1)]
	sc, q := shellQuote(syncctl), shellQuote
	fmt.Fprintf(w, "\nEvery node uses the same token secret (%s), admin token (%s) and certificate:\n  fingerprint %s\n",
		info.SecretFile, info.AdminTokenFile, info.Fingerprint)
	fmt.Fprintf(w, "Nodes talk to each other in mutual TLS, each with a certificate of the cluster CA %s (in %s)\n",
		filepath.Join(dir, "ca.crt"), filepath.Join(dir, "certs", "<node>"))
	fmt.Fprintf(w, "\nTry it from another terminal:\n\n")
	fmt.Fprintf(w, "  # device tokens, signed with the shared secret: valid on every node\n")
	fmt.Fprintf(w, "  ALICE=$(%s token -data-dir %s -user alice -device phone)\n", sc, q(dir))
	fmt.Fprintf(w, "  BOB=$(%s token -data-dir %s -user bob -device laptop)\n\n", sc, q(dir))
	fmt.Fprintf(w, "  # alice sends through %s, bob pulls through %s\n", sender.ID, puller.ID)
	fmt.Fprintf(w, "  %s send -addr %s -fingerprint %s -token \"$ALICE\" -store %s -conv d:alice:bob -peer bob -body \"hi bob\"\n",
		sc, sender.Client, info.Fingerprint, q(dir+"/syncctl-store/alice/phone"))
	fmt.Fprintf(w, "  %s pull -addr %s -fingerprint %s -token \"$BOB\" -store %s\n\n",
		sc, puller.Client, info.Fingerprint, q(dir+"/syncctl-store/bob/laptop"))
	fmt.Fprintf(w, "  # nodes, shards, leaders and replica lag, asked of any node (-data-dir: where syncctl finds the admin token)\n")
	fmt.Fprintf(w, "  %s cluster status -admin %s -data-dir %s\n", sc, first.Admin, q(dir))
	fmt.Fprintf(w, "\n  # an operator gives a hot account a shard of its own, then splits shard 1 in two, online:\n"+
		"  # devices keep syncing from their cursors; cluster status shows each move's step and the slot ranges\n")
	fmt.Fprintf(w, "  %s move user bob -new-shard -admin %s -data-dir %s\n", sc, first.Admin, q(dir))
	fmt.Fprintf(w, "  %s shard split 1 -admin %s -data-dir %s\n", sc, first.Admin, q(dir))
	fmt.Fprintf(w, "  # bob's next pull goes on from his cursor: only the new message\n")
	fmt.Fprintf(w, "  %s send -addr %s -fingerprint %s -token \"$ALICE\" -store %s -conv d:alice:bob -peer bob -body \"after the moves\"\n",
		sc, sender.Client, info.Fingerprint, q(dir+"/syncctl-store/alice/phone"))
	fmt.Fprintf(w, "  %s pull -addr %s -fingerprint %s -token \"$BOB\" -store %s\n",
		sc, puller.Client, info.Fingerprint, q(dir+"/syncctl-store/bob/laptop"))
	if len(info.Nodes) >= 3 {
		victim := info.Nodes[1]
		fmt.Fprintf(w, "\n  # failover: kill %s hard, then ask again: it is unreachable and, after an election of a\n"+
			"  # second or two (its shards show leader NONE until then), the other nodes lead its shards\n", victim.ID)
		fmt.Fprintf(w, "  kill -9 %d\n", victim.PID)
		fmt.Fprintf(w, "  %s cluster status -admin %s -data-dir %s\n", sc, first.Admin, q(dir))
	}
	fmt.Fprintf(w, "\nCtrl-C (or kill -INT %d) stops every node; run the same command again to restart them with their data.\n\n", os.Getpid())
}

// shellQuote returns s quoted for a POSIX shell if it needs quoting.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:=+,@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
