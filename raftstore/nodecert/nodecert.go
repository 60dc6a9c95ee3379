package nodecert

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/proto/ident"
)

// Certificates of the node plane. Every node's one TCP listener (Raft, forwarded proposals,
// calls) accepts only mutual TLS 1.3 connections, and every connection a node dials is the
// same: both sides present a certificate issued by the cluster CA, an ECDSA P-256 key pair kept
// by the operator (ca.crt, ca.key). A node certificate names its node id in exactly one URI
// subject alternative name,
//
//	syncd://node/<id>
//
// (URI; the id is path-escaped), which is what peers check: a dialer expects the node id it
// dials. The common name repeats the id for people reading the certificate; it is not checked.
// Host names and addresses (-host of `syncctl cert create-node`) may be added as SANs for other
// tools but are not checked by syncd either, so a node keeps its certificate behind NAT, a relay
// or a new address.
//
// The same code issues the certificates for `syncctl cert create-ca` / `create-node`, for the
// embedded single node's first start (LoadOrCreate) and for the test harnesses.

// Files of the node plane's certificates, PEM encoded, as syncctl writes them and as syncd looks
// for them in its data directory.
const (
	CAFile    = "ca.crt"   // the cluster CA's certificate(s), "CERTIFICATE" blocks
	CAKeyFile = "ca.key"   // the CA's ECDSA P-256 key, "PRIVATE KEY" (PKCS #8), mode 0600
	CertFile  = "node.crt" // the node's certificate, issued by the CA
	KeyFile   = "node.key" // the node's ECDSA P-256 key, "PRIVATE KEY" (PKCS #8), mode 0600
)

// Validity of generated node-plane certificates; a node certificate never outlives its CA.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	nodeValidity = 5 * 365 * 24 * time.Hour
)

// The scheme and host of the URI SAN that names a node.
const (
	nodeURIScheme = "syncd"
	nodeURIHost   = "node"
)

// URI returns the URI a certificate for node id names it by: syncd://node/<id>.
func URI(id string) *url.URL {
	return &url.URL{Scheme: nodeURIScheme, Host: nodeURIHost, Path: "/" + id}
}

// ID returns the node id cert names in its syncd://node/<id> URI SAN. A certificate with no
// such URI, more than one, or one whose id is not 1-128 printable ASCII characters is an error:
// it is not a node certificate. ID checks nothing else (the TLS handshake verifies the
// chain); safe for concurrent use.
func ID(cert *x509.Certificate) (string, error) {
	var id string
	n := 0
	for _, u := range cert.URIs {
		if u.Scheme != nodeURIScheme || u.Host != nodeURIHost {
			continue
		}
		n++
		id = strings.TrimPrefix(u.Path, "/")
		if u.User != nil || u.Opaque != "" || u.RawQuery != "" || u.Fragment != "" || !strings.HasPrefix(u.Path, "/") || !ident.Valid(id) {
			return "", fmt.Errorf("syncd: certificate %q: %s is not a node URI (%s)", cert.Subject.CommonName, u, URI("<id>"))
		}
	}
	switch n {
	case 0:
		return "", fmt.Errorf("syncd: certificate %q names no node (no %s URI): not a syncd node certificate", cert.Subject.CommonName, URI("<id>"))
	case 1:
		return id, nil
	default:
		return "", fmt.Errorf("syncd: certificate %q names %d nodes; a node certificate names one", cert.Subject.CommonName, n)
	}
}

// Certs is what a node proves and trusts on the node plane. Its fields are read-only once
// loaded; it is then safe for concurrent use.
type Certs struct {
	Cert   tls.Certificate // this node's certificate (Leaf set) and key
	CAs    *x509.CertPool  // the cluster CA certificates peers' certificates must chain to
	NodeID string          // the node id Cert names
}

// CreateCA creates a new cluster CA in dir (created 0700 if missing): a self-signed ECDSA P-256
// CA certificate valid for 10 years (CAFile, 0644) and its key (CAKeyFile, 0600). It refuses to
// replace either file: a cluster has one CA, and a new one would not trust the node certificates
// issued by the old.
func CreateCA(dir string) error { return createCA(dir, false) }

// createCA is CreateCA; with replaceKey, a key left without its certificate by an interrupted
// first start is replaced.
func createCA(dir string, replaceKey bool) error {
	certPath, keyPath := filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile)
	for _, p := range []string{certPath, keyPath} {
		if p == keyPath && replaceKey {
			continue
		}
		if ok, err := FileExists(p); err != nil || ok {
			return existsErr(p, err, "a cluster has one CA: issue node certificates from it (syncctl cert create-node), or pick another directory")
		}
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "syncd cluster CA", Organization: []string{"syncd"}},
		NotBefore:             now.Add(-time.Hour), // tolerate peers whose clock is a little behind
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // it signs node certificates only, no intermediate CAs
	}
	certPEM, keyPEM, err := Issue(tmpl, nil, nil)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("syncd: create CA directory: %w", err)
	}
	return WritePair(certPath, certPEM, keyPath, keyPEM)
}

// Create issues a certificate for node id, signed by the CA in caCertFile and caKeyFile, valid
// for 5 years (never beyond the CA), for server and client authentication, naming id in its URI
// SAN (URI) and common name and hosts (IP addresses or DNS names, optional) as SANs. It writes
// the certificate and its new key into dir (created 0700 if missing) as CertFile (0644) and
// KeyFile (0600), and a copy of the CA certificate as CAFile unless dir has one already, so that
// dir holds what syncd looks for in a data directory. It refuses to replace a node certificate or
// key, and to write a certificate that dir's own ca.crt would not trust.
func Create(dir, caCertFile, caKeyFile, id string, hosts []string) error {
	if !ident.Valid(id) || strings.ContainsAny(id, "=,") {
		return fmt.Errorf("syncd: node id %q must be 1-%d printable ASCII characters, no space, '=' or ','", id, ident.MaxLen)
	}
	ca, caPEM, err := readCA(caCertFile)
	if err != nil {
		return err
	}
	caKey, err := readSigner(caKeyFile)
	if err != nil {
		return err
	}
	if pub, ok := caKey.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(ca.PublicKey) {
		return fmt.Errorf("syncd: CA key %s does not belong to the CA certificate %s", caKeyFile, caCertFile)
	}
	return createNode(dir, ca, caPEM, caKey, id, hosts, false)
}

// createNode is Create with the CA read; with replaceKey, a key left without its certificate by
// an interrupted first start is replaced.
func createNode(dir string, ca *x509.Certificate, caPEM []byte, caKey crypto.Signer, id string, hosts []string, replaceKey bool) error {
	certPath, keyPath, dirCA := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile), filepath.Join(dir, CAFile)
	for _, p := range []string{certPath, keyPath} {
		if p == keyPath && replaceKey {
			continue
		}
		if ok, err := FileExists(p); err != nil || ok {
			return existsErr(p, err, "delete both node.crt and node.key to issue new ones, or pick another directory")
		}
	}
	now := time.Now()
	notAfter := now.Add(nodeValidity)
	if ca.NotAfter.Before(notAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: id, Organization: []string{"syncd"}},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{URI(id)},
	}
	if err := AddHosts(tmpl, hosts); err != nil {
		return err
	}
	certPEM, keyPEM, err := Issue(tmpl, ca, caKey)
	if err != nil {
		return err
	}
	haveCA, err := FileExists(dirCA)
	if err != nil {
		return fmt.Errorf("syncd: %w", err)
	}
	if haveCA {
		pool, err := readCAPool(dirCA)
		if err != nil {
			return err
		}
		block, _ := pem.Decode(certPEM)
		leaf, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return fmt.Errorf("syncd: parse the new certificate: %w", err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			return fmt.Errorf("syncd: %s is another CA's than the one signing this certificate: use a directory "+
				"without ca.crt, or the CA of that ca.crt", dirCA)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("syncd: create certificate directory: %w", err)
	}
	if !haveCA {
		if _, err := WriteFileAtomic(dirCA, caPEM, 0o644, true); err != nil {
			return fmt.Errorf("syncd: write %s: %w", dirCA, err)
		}
	}
	return WritePair(certPath, certPEM, keyPath, keyPEM)
}

// Load loads the node plane's files: the cluster CA certificate(s) (every CERTIFICATE block of
// caFile: during a CA rotation it holds the old and the new CA), this node's certificate and its
// key. It checks that the key matches, that the certificate chains to one of the CAs for
// both server and client authentication, and that it names a node id; every error names the file
// and what to do. Safe to call concurrently.
func Load(caFile, certFile, keyFile string) (Certs, error) {
	pool, err := readCAPool(caFile)
	if err != nil {
		return Certs{}, err
	}
	cert, err := LoadKeyPair(certFile, keyFile)
	if err != nil {
		return Certs{}, err
	}
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			return Certs{}, fmt.Errorf("syncd: node certificate %s is not valid under the cluster CA %s: %w "+
				"(issue one with syncctl cert create-node from that CA)", certFile, caFile, err)
		}
	}
	id, err := ID(cert.Leaf)
	if err != nil {
		return Certs{}, fmt.Errorf("%w (in %s)", err, certFile)
	}
	return Certs{Cert: cert, CAs: pool, NodeID: id}, nil
}

// LoadOrCreate returns the node-plane certificates kept in dir (CAFile, CertFile, KeyFile;
// CAKeyFile is not needed). If dir holds none of them and create is set, it first creates a
// cluster CA and a certificate for node id there, as CreateCA and Create do, and reports
// created; the embedded single node does this on its first start, like the token secret. Without
// create, a dir holding none of them gives an error matching fs.ErrNotExist (the caller says what
// to do). A dir holding only some of them is an error naming what is missing.
//
// Keys without their certificates are what an interrupted creation leaves; with create they are
// replaced. LoadOrCreate must not run concurrently on the same dir (the server holds the data
// directory's lock).
func LoadOrCreate(dir, id string, create bool) (certs Certs, created bool, err error) {
	have := map[string]bool{}
	for _, f := range []string{CAFile, CAKeyFile, CertFile, KeyFile} {
		if have[f], err = FileExists(filepath.Join(dir, f)); err != nil {
			return Certs{}, false, fmt.Errorf("syncd: node certificates: %w", err)
		}
	}
	load := func() (Certs, error) {
		return Load(filepath.Join(dir, CAFile), filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	}
	switch {
	case have[CAFile] && have[CertFile] && have[KeyFile]:
		certs, err := load()
		return certs, false, err
	case !have[CAFile] && !have[CertFile] && !create:
		return Certs{}, false, fmt.Errorf("syncd: no node certificates in %s: %w", dir, fs.ErrNotExist)
	case !have[CertFile] && create && (!have[CAFile] || have[CAKeyFile]):
		// A first start, or one interrupted after (some of) the CA was written.
		if !have[CAFile] {
			if err := createCA(dir, true); err != nil {
				return Certs{}, false, err
			}
		}
		ca, caPEM, err := readCA(filepath.Join(dir, CAFile))
		if err != nil {
			return Certs{}, false, err
		}
		caKey, err := readSigner(filepath.Join(dir, CAKeyFile))
		if err != nil {
			return Certs{}, false, err
		}
		if err := createNode(dir, ca, caPEM, caKey, id, nil, true); err != nil {
			return Certs{}, false, err
		}
		certs, err := load()
		return certs, true, err
	}
	var present, missing []string
	for _, f := range []string{CAFile, CertFile, KeyFile} {
		if have[f] {
			present = append(present, f)
		} else {
			missing = append(missing, f)
		}
	}
	return Certs{}, false, fmt.Errorf("syncd: %s holds %s of the node certificates but not %s: restore the missing "+
		"files, or issue them (syncctl cert create-node -dir %s -ca <ca.crt> -ca-key <ca.key> -node-id %s)",
		dir, strings.Join(present, ", "), strings.Join(missing, ", "), dir, id)
}

// readCA reads the first certificate of a CA file, which must be a CA, and returns it with its PEM.
func readCA(path string) (*x509.Certificate, []byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("syncd: read CA certificate: %w", err)
	}
	block, _ := pem.Decode(raw)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("syncd: %s holds no PEM certificate", path)
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("syncd: CA certificate %s: %w", path, err)
	}
	if !ca.IsCA {
		return nil, nil, fmt.Errorf("syncd: %s is not a CA certificate (syncctl cert create-ca makes one)", path)
	}
	return ca, pem.EncodeToMemory(block), nil
}

// readCAPool reads every certificate of a CA file into a pool; each must be a CA.
func readCAPool(path string) (*x509.CertPool, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("syncd: read cluster CA file: %w", err)
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := raw; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("syncd: cluster CA file %s: %w", path, err)
		}
		if !c.IsCA {
			return nil, fmt.Errorf("syncd: %s holds a certificate that is not a CA (%q): give the cluster CA's ca.crt", path, c.Subject.CommonName)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("syncd: %s holds no PEM certificate: give the cluster CA's ca.crt", path)
	}
	return pool, nil
}

// readSigner reads a PKCS #8 private key.
func readSigner(path string) (crypto.Signer, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("syncd: read CA key: %w", err)
	}
	block, _ := pem.Decode(raw)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("syncd: %s holds no PEM \"PRIVATE KEY\" block", path)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("syncd: key %s: %w", path, err)
	}
	s, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("syncd: key %s cannot sign", path)
	}
	return s, nil
}

// existsErr says that path exists (or could not be checked) and what to do.
func existsErr(path string, err error, advice string) error {
	if err != nil {
		return fmt.Errorf("syncd: %w", err)
	}
	return fmt.Errorf("syncd: %s exists; not replacing it: %s", path, advice)
}
