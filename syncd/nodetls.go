package syncd

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/nodecert"
)

// certExpiryWarning is how long before its node certificate expires a node starts warning.
const certExpiryWarning = 30 * 24 * time.Hour

// nodeTLS returns the node plane's mutual-TLS configuration (nil with InsecureNodePlane, which it
// logs as a warning): the files Config names, else those in Dir, which a node of no cluster
// creates on first start. A cluster's nodes must share one CA, so a node with other peers or a
// Join address and no certificates is an error saying how to make them.
func nodeTLS(cfg Config) (*raftstore.TLS, error) {
	if cfg.InsecureNodePlane {
		cfg.Logger.Warn("node plane: TLS is OFF (insecure_node_plane): anyone who can reach the Raft address can "+
			"propose any command and read every log; remove -insecure-node-plane to turn mutual TLS on",
			"raft_addr", cfg.RaftAddr)
		return nil, nil
	}
	var (
		certs nodecert.Certs
		err   error
	)
	if cfg.NodeCAFile != "" {
		certs, err = nodecert.Load(cfg.NodeCAFile, cfg.NodeCertFile, cfg.NodeKeyFile)
	} else {
		alone := cfg.Join == ""
		for _, p := range cfg.Peers {
			alone = alone && p.ID == cfg.NodeID
		}
		certs, _, err = nodecert.LoadOrCreate(cfg.Dir, cfg.NodeID, alone)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("syncd: this node is part of a cluster (peers or join), whose nodes must share one CA, "+
				"and has no node certificates: no -node-ca/-node-cert/-node-key, and no %s, %s and %s in %s. Create the "+
				"cluster's CA once (syncctl cert create-ca -dir ./ca) and a certificate for each node (syncctl cert "+
				"create-node -dir %s -ca ./ca/ca.crt -ca-key ./ca/ca.key -node-id %s), then start again",
				nodecert.CAFile, nodecert.CertFile, nodecert.KeyFile, cfg.Dir, cfg.Dir, cfg.NodeID)
		}
	}
	if err != nil {
		return nil, err
	}
	if certs.NodeID != cfg.NodeID {
		return nil, fmt.Errorf("syncd: the node certificate %s names node %q, but this node is %q (node_id): "+
			"issue one for %q (syncctl cert create-node)", nodeCertPath(cfg), certs.NodeID, cfg.NodeID, cfg.NodeID)
	}
	if left := time.Until(certs.Cert.Leaf.NotAfter); left < certExpiryWarning {
		cfg.Logger.Warn("node plane: the node certificate expires soon; issue a new one from the cluster CA and restart "+
			"(docs/OPERATIONS.md, rotating certificates)", "cert", nodeCertPath(cfg),
			"expires", certs.Cert.Leaf.NotAfter.UTC().Format(time.RFC3339), slog.Duration("left", left.Round(time.Second)))
	}
	return &raftstore.TLS{Cert: certs.Cert, CAs: certs.CAs}, nil
}

// nodeCertPath is the node certificate file cfg uses.
func nodeCertPath(cfg Config) string {
	if cfg.NodeCertFile != "" {
		return cfg.NodeCertFile
	}
	return filepath.Join(cfg.Dir, nodecert.CertFile)
}
