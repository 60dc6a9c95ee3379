package proccluster

// The one file that uses package syncd for what the cluster shares: the token secret (syncd's
// token.key format, which `syncctl token -data-dir` also reads), the admin token (admin.token,
// which the admin commands of `syncctl -data-dir` read), the self-signed certificate and token
// minting. These are syncd's own helpers rather than copies, so the harness cannot drift
// from the server's formats.

import (
	"path/filepath"
	"slices"
	"time"

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

// Token mints a token for user's device, valid for ttl from now, signed with the cluster's
// secret: every node accepts it.
func (c *Cluster) Token(user, device string, ttl time.Duration) (string, error) {
	now := time.Now()
	return auth.MintToken(c.cred.secret, auth.TokenClaims{User: user, Device: device, Issued: now, Expires: now.Add(ttl)})
}
