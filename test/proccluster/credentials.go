package proccluster

// The one file that uses package syncd for what the cluster shares: the token secret (syncd's
// token.key format, which `syncctl token -data-dir` also reads), the self-signed certificate and
// token minting. These are syncd's own helpers rather than copies, so the harness cannot drift
// from the server's formats.

import (
	"path/filepath"
	"slices"
	"time"

	"github.com/syncd-dev/syncd/syncd/auth"
)

// credentials are the files every node of a cluster is started with.
type credentials struct {
	secret                        []byte
	fingerprint                   string
	secretFile, certFile, keyFile string
}

// loadOrCreateCredentials returns the token secret and the certificate kept in dir, creating them
// on first use. The certificate covers localhost, ::1 and ips (only at creation: an existing one
// is reused as it is, so the fingerprint stays across runs).
func loadOrCreateCredentials(dir string, ips []string) (credentials, error) {
	secret, err := auth.LoadOrCreateSecret(dir)
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
	return credentials{secret: secret, fingerprint: fp, secretFile: filepath.Join(dir, auth.TokenKeyFile),
		certFile: filepath.Join(dir, auth.TLSCertFile), keyFile: filepath.Join(dir, auth.TLSKeyFile)}, nil
}

// Token mints a token for user's device, valid for ttl from now, signed with the cluster's
// secret: every node accepts it.
func (c *Cluster) Token(user, device string, ttl time.Duration) (string, error) {
	now := time.Now()
	return auth.MintToken(c.cred.secret, auth.TokenClaims{User: user, Device: device, Issued: now, Expires: now.Add(ttl)})
}
