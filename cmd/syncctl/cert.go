package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/syncd-dev/syncd/raftstore/nodecert"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/auth"
)

// runCert creates the node plane's certificates: a cluster CA, and a certificate per node issued
// by it (as CockroachDB's cert create-ca and create-node do). The code that makes them is
// raftstore/nodecert's, the same syncd runs on a lone node's first start.
func runCert(_ context.Context, e *env, args []string) int {
	const cmd = "cert"
	f := newFlagSet(e, cmd, "create-ca -dir DIR | create-node -dir DIR -ca CA.crt -ca-key CA.key -node-id ID [-host H ...] | create-cluster -dir DIR -nodes ID,ID,...", `
Creates the certificates of the node plane: every node's Raft port (Raft, forwarded proposals,
calls) speaks mutual TLS 1.3, and each node must present a certificate issued by the cluster's
CA that names its node id (in a syncd://node/<id> URI SAN; dialers check it).

  create-ca     a new cluster CA in -dir: ca.crt (give it to every node) and ca.key (mode
                0600; keep it off the nodes, it issues node certificates). Once per cluster.
                With them, the certificate devices pin, one for the whole cluster: tls.crt and
                tls.key (self-signed; syncctl prints its fingerprint).
  create-node   a certificate for -node-id, issued by -ca/-ca-key, valid 5 years: node.crt and
                node.key (0600) in -dir, plus a copy of ca.crt unless -dir has one, and of the
                cluster's tls.crt and tls.key (found next to -ca) unless -dir has them, so that
                every node presents the certificate devices pinned and the SDK can fail over
                between nodes. With -dir the node's data directory, syncd finds them all there;
                or pass -node-ca, -node-cert and -node-key (and -cert, -key). -host adds host
                names or IP addresses as SANs, for other tools (syncd checks the node id, not
                the address).
  create-cluster  everything a new cluster's nodes share, in -dir, creating only what is
                missing (so it can run before every start, as a compose file's first service
                does): the CA in -dir/ca (as create-ca; ca.key stays there, give the nodes
                only their own directories), a directory -dir/<id> per node of -nodes with its
                certificates (as create-node), and the token secret and admin token every node
                shares in -dir/shared (token.key, admin.token).

Neither replaces an existing file. A lone syncd with no certificates makes its own CA and
certificate in its data directory; to grow it into a cluster, issue the new nodes' certificates
from that CA (-ca <data dir>/ca.crt -ca-key <data dir>/ca.key).`, `
syncctl cert create-ca -dir ./ca
syncctl cert create-node -dir ./n1 -ca ./ca/ca.crt -ca-key ./ca/ca.key -node-id n1
syncctl cert create-node -dir ./n2 -ca ./ca/ca.crt -ca-key ./ca/ca.key -node-id n2 -host 10.0.0.2`)
	dir := f.String("dir", "", "directory to write the files into (created if missing; required)")
	caCert := f.String("ca", "", "create-node: the CA certificate file (ca.crt of create-ca)")
	caKey := f.String("ca-key", "", "create-node: the CA key file (ca.key of create-ca)")
	nodeID := f.String("node-id", "", "create-node: the node id the certificate names (syncd -node-id)")
	nodes := f.String("nodes", "", "create-cluster: the node ids, comma-separated")
	var hosts hostList
	f.Var(&hosts, "host", "create-node: a host name or IP address to add as a SAN; repeat or comma-separate")
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			f.Usage()
			return exitOK
		}
		fmt.Fprintln(e.stderr, "syncctl cert: want a subcommand: create-ca or create-node (see -h)")
		return exitUsage
	}
	sub := args[0]
	if code, ok := parse(e, f, args[1:]); !ok {
		return code
	}
	if *dir == "" {
		e.errorf(cmd+" "+sub, "-dir is required (see -h)")
		return exitUsage
	}
	switch sub {
	case "create-ca":
		if *caCert != "" || *caKey != "" || *nodeID != "" || len(hosts) > 0 {
			e.errorf(cmd+" "+sub, "takes only -dir (-ca, -ca-key, -node-id and -host are for create-node)")
			return exitUsage
		}
		if err := nodecert.CreateCA(*dir); err != nil {
			e.errorf(cmd+" "+sub, "%v", err)
			return exitFail
		}
		fmt.Fprintf(e.stdout, "created the cluster CA: %s (for every node) and %s (keep it safe, off the nodes)\n",
			filepath.Join(*dir, nodecert.CAFile), filepath.Join(*dir, nodecert.CAKeyFile))
		// The certificate devices pin, one per cluster: create-node gives it to every node.
		_, fp, err := auth.SelfSignedCert(*dir, nil)
		if err != nil {
			e.errorf(cmd+" "+sub, "%v", err)
			return exitFail
		}
		fmt.Fprintf(e.stdout, "created the certificate devices pin, for every node (create-node copies it): %s, %s; fingerprint %s\n",
			filepath.Join(*dir, auth.TLSCertFile), filepath.Join(*dir, auth.TLSKeyFile), fp)
	case "create-node":
		if *caCert == "" || *caKey == "" || *nodeID == "" {
			e.errorf(cmd+" "+sub, "-ca, -ca-key and -node-id are required (see -h)")
			return exitUsage
		}
		if err := nodecert.Create(*dir, *caCert, *caKey, *nodeID, hosts); err != nil {
			e.errorf(cmd+" "+sub, "%v", err)
			return exitFail
		}
		fmt.Fprintf(e.stdout, "created a certificate for node %s: %s, %s and %s; start syncd with -node-id %s and "+
			"-data-dir %s, or pass them as -node-ca, -node-cert and -node-key\n", *nodeID,
			filepath.Join(*dir, nodecert.CAFile), filepath.Join(*dir, nodecert.CertFile), filepath.Join(*dir, nodecert.KeyFile),
			*nodeID, *dir)
		switch fp, copied, err := auth.ShareCert(filepath.Dir(*caCert), *dir); {
		case err != nil:
			e.errorf(cmd+" "+sub, "%v", err)
			return exitFail
		case copied:
			fmt.Fprintf(e.stdout, "copied the cluster's certificate devices pin (%s, fingerprint %s) into %s\n", auth.TLSCertFile, fp, *dir)
		case fp != "":
			fmt.Fprintf(e.stdout, "kept the certificate devices pin that %s holds already (fingerprint %s)\n", *dir, fp)
		default:
			fmt.Fprintf(e.stdout, "no %s next to %s: this node makes its own certificate for devices, which then pin "+
				"one node only; copy the cluster's %s and %s into %s to give every node the same one\n",
				auth.TLSCertFile, *caCert, auth.TLSCertFile, auth.TLSKeyFile, *dir)
		}
	case "create-cluster":
		ids := strings.Split(*nodes, ",")
		if *nodes == "" || *caCert != "" || *caKey != "" || *nodeID != "" {
			e.errorf(cmd+" "+sub, "takes -dir and -nodes (and -host): the CA is the one in -dir/ca")
			return exitUsage
		}
		if err := createCluster(e, *dir, ids, hosts); err != nil {
			e.errorf(cmd+" "+sub, "%v", err)
			return exitFail
		}
	default:
		e.errorf(cmd, "unknown subcommand %q: want create-ca, create-node or create-cluster (see -h)", sub)
		return exitUsage
	}
	return exitOK
}

// createCluster creates in dir what is missing of a cluster's files: the CA and the
// certificate devices pin (dir/ca), each node's certificates (dir/<id>, with copies of both),
// and the token secret and admin token every node shares (dir/shared). What exists is kept, so
// running it again changes nothing. The CA's key is only in dir/ca: a node is given its own
// directory and dir/shared, never the key that issues nodes.
func createCluster(e *env, dir string, ids []string, hosts []string) error {
	caDir := filepath.Join(dir, "ca")
	caCert, caKey := filepath.Join(caDir, nodecert.CAFile), filepath.Join(caDir, nodecert.CAKeyFile)
	if _, err := os.Stat(caCert); errors.Is(err, fs.ErrNotExist) {
		if err := nodecert.CreateCA(caDir); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "created the cluster CA in %s\n", caDir)
	} else if err != nil {
		return err
	}
	_, fp, err := auth.SelfSignedCert(caDir, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "the certificate devices pin: %s, fingerprint %s\n", filepath.Join(caDir, auth.TLSCertFile), fp)
	for _, id := range ids {
		nodeDir := filepath.Join(dir, id)
		if _, err := os.Stat(filepath.Join(nodeDir, nodecert.CertFile)); errors.Is(err, fs.ErrNotExist) {
			if err := nodecert.Create(nodeDir, caCert, caKey, id, append(slices.Clone(hosts), id)); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "created node %s's certificate in %s\n", id, nodeDir)
		} else if err != nil {
			return err
		}
		if _, _, err := auth.ShareCert(caDir, nodeDir); err != nil {
			return err
		}
	}
	shared := filepath.Join(dir, "shared")
	if _, err := auth.LoadOrCreateSecret(shared); err != nil {
		return err
	}
	if _, err := auth.LoadOrCreateAdminToken(shared); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "the token secret and the admin token every node shares: %s, %s\n",
		filepath.Join(shared, auth.TokenKeyFile), filepath.Join(shared, adminapi.TokenFile))
	return nil
}

// hostList collects -host values: each use adds, and a value may hold several, comma-separated.
type hostList []string

// String implements flag.Value.
func (h *hostList) String() string { return strings.Join(*h, ",") }

// Set implements flag.Value.
func (h *hostList) Set(s string) error {
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*h = append(*h, p)
		}
	}
	return nil
}
