package auth

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore/nodecert"
)

// TLS for the QUIC listener. Production servers load a certificate and key from files
// (LoadCert). The embedded default generates a self-signed certificate in the data directory on
// first start (SelfSignedCert) and prints its fingerprint; clients pin that fingerprint
// (proto.PinnedTLSConfig) instead of trusting a CA.
//
// A fingerprint is the SHA-256 of the certificate's DER encoding, written as 64 lowercase hex
// digits without separators (proto.Fingerprint). It is part of what operators copy to clients, so the
// spelling is stable.

// Files SelfSignedCert keeps in the data directory, PEM encoded.
const (
	TLSCertFile = "tls.crt" // the certificate, "CERTIFICATE" block
	TLSKeyFile  = "tls.key" // its ECDSA P-256 key, "PRIVATE KEY" (PKCS #8) block, mode 0600
)

// selfSignedValidity is how long a generated certificate is valid.
const selfSignedValidity = 10 * 365 * 24 * time.Hour

// DefaultCertHosts are the names a self-signed certificate covers when SelfSignedCert gets none.
var DefaultCertHosts = []string{"127.0.0.1", "localhost", "::1"}

// SelfSignedCert returns the certificate kept in dir (TLSCertFile, TLSKeyFile) and its
// fingerprint. If neither file exists it creates dir (0700) if needed and generates a
// self-signed ECDSA P-256 certificate valid for 10 years for hosts (IP addresses become IP SANs,
// anything else a DNS SAN; nil or empty means DefaultCertHosts), writes both files atomically (key
// 0600, certificate 0644) and returns it.
//
// hosts only matter at generation: an existing certificate is loaded as it is, whatever names it
// covers (clients that pin the fingerprint do not check names). Delete both files to generate a
// new certificate; clients pinning the old fingerprint must then be given the new one.
//
// The key is written before the certificate, so a key without a certificate is the trace of an
// interrupted generation and is replaced; a certificate without its key is refused with an error
// saying what to do. SelfSignedCert must not run concurrently on the same dir (the server holds
// the data directory's lock); on different dirs it is safe.
func SelfSignedCert(dir string, hosts []string) (tls.Certificate, string, error) {
	certPath, keyPath := filepath.Join(dir, TLSCertFile), filepath.Join(dir, TLSKeyFile)
	certExists, err := nodecert.FileExists(certPath)
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("syncd: TLS certificate: %w", err)
	}
	if certExists {
		keyExists, err := nodecert.FileExists(keyPath)
		if err != nil {
			return tls.Certificate{}, "", fmt.Errorf("syncd: TLS key: %w", err)
		}
		if !keyExists {
			return tls.Certificate{}, "", fmt.Errorf("syncd: TLS certificate %s exists but its key %s does not; "+
				"restore the key, or delete the certificate to generate a new pair (clients pinning the old "+
				"fingerprint must then be given the new one)", certPath, keyPath)
		}
		return LoadCert(certPath, keyPath)
	}

	if len(hosts) == 0 {
		hosts = DefaultCertHosts
	}
	certPEM, keyPEM, err := generateSelfSigned(hosts, time.Now())
	if err != nil {
		return tls.Certificate{}, "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return tls.Certificate{}, "", fmt.Errorf("syncd: create TLS certificate: %w", err)
	}
	if _, err := nodecert.WriteFileAtomic(keyPath, keyPEM, 0o600, false); err != nil {
		return tls.Certificate{}, "", fmt.Errorf("syncd: write TLS key: %w", err)
	}
	if _, err := nodecert.WriteFileAtomic(certPath, certPEM, 0o644, false); err != nil {
		return tls.Certificate{}, "", fmt.Errorf("syncd: write TLS certificate: %w", err)
	}
	return withFingerprint(nodecert.KeyPair(certPEM, keyPEM, certPath, keyPath))
}

// generateSelfSigned returns the PEM encodings of a new self-signed certificate for hosts and of
// its key.
func generateSelfSigned(hosts []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "syncd self-signed"},
		NotBefore:             now.Add(-time.Hour), // tolerate clients whose clock is a little behind
		NotAfter:              now.Add(selfSignedValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if err := nodecert.AddHosts(tmpl, hosts); err != nil {
		return nil, nil, err
	}
	return nodecert.Issue(tmpl, nil, nil)
}

// LoadCert loads a PEM certificate (chain) and its private key, as a production server does from
// the files named in its config, and returns them with the fingerprint of the first (leaf)
// certificate. A missing or unreadable file, or a key that does not match the certificate, is an
// error naming the file. The returned certificate has Leaf set. Safe to call concurrently.
func LoadCert(certFile, keyFile string) (tls.Certificate, string, error) {
	return withFingerprint(nodecert.LoadKeyPair(certFile, keyFile))
}

// withFingerprint adds the fingerprint of cert's leaf to what loading it returned.
func withFingerprint(cert tls.Certificate, err error) (tls.Certificate, string, error) {
	if err != nil {
		return tls.Certificate{}, "", err
	}
	return cert, proto.Fingerprint(cert.Certificate[0]), nil
}

// ServerTLSConfig returns a new TLS configuration for the listener: cert, TLS 1.3 only, and the
// single application protocol alpn (proto.ALPN), which clients must offer. The caller owns the
// result; like any tls.Config it must not be modified once in use, and it is then safe for
// concurrent use by any number of connections.
func ServerTLSConfig(cert tls.Certificate, alpn string) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS13,
		NextProtos:   []string{alpn},
	}
}

// ShareCert gives the node whose data directory is to the certificate devices pin that dir from
// holds (TLSCertFile and TLSKeyFile, as SelfSignedCert keeps them), so that every node of a
// cluster presents the same certificate and a device that pinned one node's fingerprint is
// served by all: the SDK fails over across nodes (client.Config.Addrs) with one pin. syncctl cert
// create-ca makes that certificate next to the cluster CA and create-node shares it; a lone
// node's data directory holds its own, which the nodes it grows into then share.
//
// It copies both files (the key 0600, atomically, key first as SelfSignedCert writes them) and
// returns the certificate's fingerprint. It copies nothing and says so (copied false) when from
// holds no certificate, or when to holds one already, which it never replaces: that node then
// presents its own, which the returned fingerprint (to's) shows. A certificate without its key,
// in either directory, is an error.
func ShareCert(from, to string) (fingerprint string, copied bool, err error) {
	load := func(dir string) (ok bool, certPEM, keyPEM []byte, fp string, err error) {
		certPath, keyPath := filepath.Join(dir, TLSCertFile), filepath.Join(dir, TLSKeyFile)
		if ok, err := nodecert.FileExists(certPath); err != nil || !ok {
			return false, nil, nil, "", err
		}
		if _, fp, err = LoadCert(certPath, keyPath); err != nil {
			return false, nil, nil, "", err
		}
		if certPEM, err = os.ReadFile(certPath); err == nil {
			keyPEM, err = os.ReadFile(keyPath)
		}
		return true, certPEM, keyPEM, fp, err
	}
	if ok, _, _, fp, err := load(to); err != nil || ok {
		return fp, false, err
	}
	ok, certPEM, keyPEM, fp, err := load(from)
	if err != nil || !ok {
		return "", false, err
	}
	if err := os.MkdirAll(to, 0o700); err != nil {
		return "", false, fmt.Errorf("syncd: share TLS certificate: %w", err)
	}
	if err := nodecert.WritePair(filepath.Join(to, TLSCertFile), certPEM, filepath.Join(to, TLSKeyFile), keyPEM); err != nil {
		return "", false, err
	}
	return fp, true, nil
}
