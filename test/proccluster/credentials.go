package proccluster

// The one file that uses package syncd for what the cluster shares: the token secret (syncd's
// token.key format, which `syncctl token -data-dir` also reads), the admin token (admin.token,
// which the admin commands of `syncctl -data-dir` read), the self-signed certificate, token
// minting, and the node plane's cluster CA and node certificates (made as `syncctl cert` makes
// them). These are syncd's own helpers rather than copies, so the harness cannot drift
// from the server's formats.

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/syncd-dev/syncd/raftstore/nodecert"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/auth"
)

// credentials are the files every node of a cluster is started with.
type credentials struct {
	secret                        []byte
	fingerprint                   string
	adminToken                    string
	secretFile, certFile, keyFile string
	adminTokenFile                string
}

// loadOrCreateCredentials returns the token secret, the admin token and the certificate kept in
// dir, creating them on first use. The certificate covers localhost, ::1 and ips (only at creation: an existing one
// is reused as it is, so the fingerprint stays across runs).
func loadOrCreateCredentials(dir string, ips []string) (credentials, error) {
	secret, err := auth.LoadOrCreateSecret(dir)
	if err != nil {
		return credentials{}, err
	}
	adminToken, err := auth.LoadOrCreateAdminToken(dir)
	if err != nil {
		return credentials{}, err
	}
	hosts := []string{"localhost", "::1"}
	for _, ip := range ips {
		if !slices.Contains(hosts, ip) {
			hosts = append(hosts, ip)
		}
	}
	_, fp, err := auth.SelfSignedCert(dir, hosts)
	if err != nil {
		return credentials{}, err
	}
	return credentials{secret: secret, fingerprint: fp, adminToken: adminToken, secretFile: filepath.Join(dir, auth.TokenKeyFile),
		certFile: filepath.Join(dir, auth.TLSCertFile), keyFile: filepath.Join(dir, auth.TLSKeyFile),
		adminTokenFile: filepath.Join(dir, adminapi.TokenFile)}, nil
}

// nodeCertDir is where node id's node-plane certificate is kept: outside its data directory, so
// that a node whose data is wiped keeps its identity.
func nodeCertDir(dir, id string) string { return filepath.Join(dir, "certs", id) }

// createNodeCerts creates, on first use, the node plane's cluster CA in dir (ca.crt, ca.key) and
// for each node a certificate issued by it in nodeCertDir (node.crt, node.key and a copy of
// ca.crt), naming the node's id and its Raft host; existing ones are reused, so that a later New
// on the same dir keeps them.
func createNodeCerts(dir string, nodes []*Node) error {
	caFile, caKey := filepath.Join(dir, nodecert.CAFile), filepath.Join(dir, nodecert.CAKeyFile)
	if _, err := os.Stat(caFile); errors.Is(err, fs.ErrNotExist) {
		if err := nodecert.CreateCA(dir); err != nil {
			return err
		}
	}
	for _, n := range nodes {
		d := nodeCertDir(dir, n.ID)
		if _, err := os.Stat(filepath.Join(d, nodecert.CertFile)); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		host, _, _ := net.SplitHostPort(n.RaftAddr)
		if err := nodecert.Create(d, caFile, caKey, n.ID, []string{host}); err != nil {
			return err
		}
	}
	return nil
}

// nodeCertArgs are the flags that give node id its node-plane certificate.
func (c *Cluster) nodeCertArgs(id string) []string {
	d := nodeCertDir(c.cfg.Dir, id)
	return []string{"-node-ca", filepath.Join(c.cfg.Dir, nodecert.CAFile),
		"-node-cert", filepath.Join(d, nodecert.CertFile), "-node-key", filepath.Join(d, nodecert.KeyFile)}
}

// Token mints a token for user's device, valid for ttl from now, signed with the cluster's
// secret: every node accepts it.
func (c *Cluster) Token(user, device string, ttl time.Duration) (string, error) {
	now := time.Now()
	return auth.MintToken(c.cred.secret, auth.TokenClaims{User: user, Device: device, Issued: now, Expires: now.Add(ttl)})
}
