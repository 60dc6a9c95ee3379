package nodecert

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Helpers for every certificate and key file syncd writes and reads: the node plane's here, and
// syncd/auth's (the devices' TLS certificate, browser certificates, the token secret and admin
// token). They live here, in the leaf both use, so that there is one copy of each: every such
// file is written atomically with the same modes and every key is made the same way.

// AddHosts adds hosts to tmpl's subject alternative names: IP addresses as IP SANs, anything
// else that is a host name as a DNS SAN. It serves every certificate syncd issues for names.
func AddHosts(tmpl *x509.Certificate, hosts []string) error {
	for _, h := range hosts {
		h = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(h), "["), "]")
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if validDNSName(h) {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		} else {
			return fmt.Errorf("syncd: certificate host %q is neither an IP address nor a DNS name (no port, no scheme)", h)
		}
	}
	return nil
}

// Issue gives tmpl a random serial number and a new ECDSA P-256 key, signs it with parentKey as
// parent (both nil: self-signed), and returns the PEM encodings of the certificate and its key
// ("CERTIFICATE" and PKCS #8 "PRIVATE KEY" blocks). Every certificate syncd makes is made here.
func Issue(tmpl, parent *x509.Certificate, parentKey crypto.Signer) (certPEM, keyPEM []byte, err error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("syncd: generate certificate serial: %w", err)
	}
	tmpl.SerialNumber = serial
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("syncd: generate TLS key: %w", err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("syncd: create certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("syncd: encode TLS key: %w", err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	return certPEM, keyPEM, nil
}

// validDNSName reports whether h looks like a host name: labels of letters, digits, '-' and '_'
// separated by dots, optionally starting with a "*." wildcard.
func validDNSName(h string) bool {
	h = strings.TrimPrefix(h, "*.")
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// LoadKeyPair loads a PEM certificate (chain) and its private key from files. A missing or
// unreadable file, or a key that does not match the certificate, is an error naming the file.
// The returned certificate has Leaf set. It serves every certificate file syncd reads (node
// certificates here, the devices' TLS certificate in syncd/auth). Safe to call concurrently.
func LoadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("syncd: read TLS certificate file: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("syncd: read TLS key file: %w", err)
	}
	return KeyPair(certPEM, keyPEM, certFile, keyFile)
}

// KeyPair parses a PEM certificate (chain) and its private key, read from certFile and keyFile
// (which errors name), and returns them with Leaf set.
func KeyPair(certPEM, keyPEM []byte, certFile, keyFile string) (tls.Certificate, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("syncd: TLS certificate %s with key %s: %w", certFile, keyFile, err)
	}
	if cert.Leaf == nil { // set by X509KeyPair unless GODEBUG x509keypairleaf=0
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return tls.Certificate{}, fmt.Errorf("syncd: TLS certificate %s: %w", certFile, err)
		}
	}
	return cert, nil
}

// FileExists reports whether path exists; errors other than "does not exist" are returned.
func FileExists(path string) (bool, error) {
	_, err := os.Stat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, err
	}
}

// WritePair writes a key (0600), then its certificate (0644), each atomically and only if absent
// (a key is written over one left by an interrupted creation: the callers checked the rest). A
// key without its certificate is thus the trace of an interrupted write, never the reverse.
func WritePair(certPath string, certPEM []byte, keyPath string, keyPEM []byte) error {
	if _, err := WriteFileAtomic(keyPath, keyPEM, 0o600, false); err != nil {
		return fmt.Errorf("syncd: write %s: %w", keyPath, err)
	}
	created, err := WriteFileAtomic(certPath, certPEM, 0o644, true)
	if err != nil {
		return fmt.Errorf("syncd: write %s: %w", certPath, err)
	}
	if !created {
		return fmt.Errorf("syncd: %s appeared while it was being created (another syncctl or syncd at work?)", certPath)
	}
	return nil
}

// WriteFileAtomic writes data to path with mode perm so that readers see either no file or the
// whole content: it writes and fsyncs a temporary file in the same directory, puts it in place
// and fsyncs the directory. Every certificate, key and secret file syncd writes goes through it.
//
// With exclusive, an existing path is left alone and created reports false (the file is put in
// place with a hard link, which fails if path exists); on a file system without hard links it
// falls back to a rename, which is atomic but may replace a file created concurrently. Without
// exclusive, path is replaced by a rename.
func WriteFileAtomic(path string, data []byte, perm os.FileMode, exclusive bool) (created bool, err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return false, err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a link or a failure; a no-op after a rename
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return false, err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return false, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return false, err
	}
	if err := f.Close(); err != nil {
		return false, err
	}
	if exclusive {
		err = os.Link(tmp, path)
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
	}
	if !exclusive || err != nil {
		if err := os.Rename(tmp, path); err != nil {
			return false, err
		}
	}
	return true, syncDir(dir)
}

// syncDir makes a new directory entry durable. File systems that cannot fsync a directory
// (some refuse with EINVAL, Windows cannot open one for it) are not an error.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, errors.ErrUnsupported) {
		return err
	}
	return nil
}
