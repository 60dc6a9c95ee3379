package raftstoretest

import (
	"crypto/tls"
	"path/filepath"
	"testing"

	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/nodecert"
)

// Node-plane certificates for in-process nodes, made by raftstore/nodecert as syncctl and syncd
// make them, so that test clusters run with mutual TLS on like real ones.

// TLS returns the mutual-TLS configuration of node id from the certificates in dir, creating a
// cluster CA and the node's certificate there on first use, exactly as syncd's embedded single
// node does (nodecert.LoadOrCreate): for tests of one node, which dials nobody. It takes no
// testing.TB so that a test's child process can call it too.
func TLS(dir, id string) (*raftstore.TLS, error) {
	certs, _, err := nodecert.LoadOrCreate(dir, id, true)
	if err != nil {
		return nil, err
	}
	return FromCerts(certs), nil
}

// ClusterTLS creates a cluster CA in dir/ca and, for each of ids, a certificate issued by it in
// dir/<id> (as `syncctl cert create-ca` and `create-node` do), and returns each node's mutual-TLS
// configuration by id.
func ClusterTLS(t testing.TB, dir string, ids ...string) map[string]*raftstore.TLS {
	t.Helper()
	if err := nodecert.CreateCA(filepath.Join(dir, "ca")); err != nil {
		t.Fatal(err)
	}
	out := map[string]*raftstore.TLS{}
	for _, id := range ids {
		out[id] = FromCerts(issueNodeCert(t, dir, id))
	}
	return out
}

// issueNodeCert issues a certificate for node id from the CA in dir/ca, into dir/<id>.
func issueNodeCert(t testing.TB, dir, id string) nodecert.Certs {
	t.Helper()
	ca, d := filepath.Join(dir, "ca"), filepath.Join(dir, id)
	if err := nodecert.Create(d, filepath.Join(ca, nodecert.CAFile), filepath.Join(ca, nodecert.CAKeyFile), id, nil); err != nil {
		t.Fatal(err)
	}
	certs, err := nodecert.Load(filepath.Join(d, nodecert.CAFile), filepath.Join(d, nodecert.CertFile), filepath.Join(d, nodecert.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	return certs
}

// FromCerts is the raftstore configuration of certificates loaded by raftstore/nodecert.
func FromCerts(c nodecert.Certs) *raftstore.TLS {
	return &raftstore.TLS{Cert: c.Cert, CAs: c.CAs}
}

// NodeCert issues a certificate of the cluster's CA for node id (one that need not be a member),
// as `syncctl cert create-node` would: for tests that play a node, or someone holding a node's
// key. Call it from the test goroutine, once per id.
func (c *Cluster) NodeCert(id string) tls.Certificate {
	c.t.Helper()
	return issueNodeCert(c.t, c.certDir, id).Cert
}
