package auth

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore/nodecert"
	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// Browser certificates: what a page pins to reach a node that has no CA-issued certificate over
// WebTransport (PROTOCOL §2.3). Browsers accept a pinned certificate (serverCertificateHashes)
// only if it is ECDSA and valid for at most 14 days, so the node makes its own, each valid 13
// days, serves each for 6, and makes the next a day before it is served: a page given every
// published hash connects across a rotation, and an app's backend that refreshes the hashes
// daily never hands out a stale set.

// BrowserCertDir is the folder of the data directory that holds the browser certificates, one
// PEM file (certificate and PKCS #8 key, mode 0600) per certificate, named by its NotBefore.
const BrowserCertDir = "browser-certs"

const (
	browserCertValidity = 13 * 24 * time.Hour
	browserCertServed   = 6 * 24 * time.Hour // each is served for about this long
	browserCertLead     = 24 * time.Hour     // and published for this long before
	browserCertSkew     = time.Hour          // NotBefore this far back, for clients whose clock is behind
)

// BrowserCerts keeps a node's browser certificates and rotates them as handshakes ask for one.
// Safe for concurrent use.
type BrowserCerts struct {
	dir    string
	logger *slog.Logger
	now    func() time.Time // time.Now; tests move it

	mu    sync.Mutex
	certs []tls.Certificate // valid ones, oldest first; Leaf set
}

// NewBrowserCerts loads the browser certificates kept under dataDir, making the first one if
// there is none.
func NewBrowserCerts(dataDir string, logger *slog.Logger) (*BrowserCerts, error) {
	return newBrowserCerts(dataDir, logger, time.Now)
}

func newBrowserCerts(dataDir string, logger *slog.Logger, now func() time.Time) (*BrowserCerts, error) {
	b := &BrowserCerts{dir: filepath.Join(dataDir, BrowserCertDir), logger: logger, now: now}
	if err := os.MkdirAll(b.dir, 0o700); err != nil {
		return nil, fmt.Errorf("syncd: browser certificates: %w", err)
	}
	names, err := os.ReadDir(b.dir)
	if err != nil {
		return nil, fmt.Errorf("syncd: browser certificates: %w", err)
	}
	for _, e := range names {
		if !strings.HasSuffix(e.Name(), ".pem") {
			continue
		}
		path := filepath.Join(b.dir, e.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("syncd: browser certificate %s: %w", path, err)
		}
		cert, err := nodecert.KeyPair(data, data, path, path)
		if err != nil {
			return nil, fmt.Errorf("%w (delete the file: the node makes another)", err)
		}
		b.certs = append(b.certs, cert)
	}
	slices.SortFunc(b.certs, func(x, y tls.Certificate) int { return x.Leaf.NotBefore.Compare(y.Leaf.NotBefore) })
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.rotateLocked(); err != nil {
		return nil, err
	}
	return b, nil
}

// rotateLocked drops the certificates about to expire, makes the next one when the newest has
// been around for browserCertServed less browserCertLead, and returns the one to serve: the
// newest that has been published for browserCertLead, else the oldest (a node's first).
//
// REQUIRES: b.mu
func (b *BrowserCerts) rotateLocked() (*tls.Certificate, error) {
	now := b.now()
	for len(b.certs) > 0 && !now.Add(browserCertSkew).Before(b.certs[0].Leaf.NotAfter) {
		os.Remove(b.path(b.certs[0].Leaf.NotBefore))
		b.certs = b.certs[1:]
	}
	if len(b.certs) == 0 || age(b.certs[len(b.certs)-1], now) >= browserCertServed-browserCertLead {
		cert, err := b.make(now)
		if err != nil {
			return nil, err
		}
		from := now
		if len(b.certs) > 0 {
			from = now.Add(browserCertLead)
		}
		b.certs = append(b.certs, cert)
		b.logger.Info("webtransport: made a browser certificate; pages pin it (GET /v1/webtransport/certs)",
			"webtransport_cert_sha256", proto.Fingerprint(cert.Certificate[0]), "served_from", from.UTC().Format(time.RFC3339))
	}
	for i := len(b.certs) - 1; i >= 0; i-- {
		if age(b.certs[i], now) >= browserCertLead {
			return &b.certs[i], nil
		}
	}
	return &b.certs[0], nil
}

// age is how long ago c was made (its NotBefore is browserCertSkew earlier).
func age(c tls.Certificate, now time.Time) time.Duration {
	return now.Sub(c.Leaf.NotBefore.Add(browserCertSkew))
}

// make creates, writes and returns a new certificate valid from now.
func (b *BrowserCerts) make(now time.Time) (tls.Certificate, error) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "syncd browser certificate"},
		NotBefore:   now.Add(-browserCertSkew).Truncate(time.Second),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	tmpl.NotAfter = tmpl.NotBefore.Add(browserCertValidity)
	certPEM, keyPEM, err := nodecert.Issue(tmpl, nil, nil)
	if err != nil {
		return tls.Certificate{}, err
	}
	path := b.path(tmpl.NotBefore)
	data := append(certPEM, keyPEM...)
	if _, err := nodecert.WriteFileAtomic(path, data, 0o600, false); err != nil {
		return tls.Certificate{}, fmt.Errorf("syncd: write browser certificate: %w", err)
	}
	cert, err := nodecert.KeyPair(data, data, path, path)
	return cert, err
}

func (b *BrowserCerts) path(notBefore time.Time) string {
	return filepath.Join(b.dir, strconv.FormatInt(notBefore.Unix(), 10)+".pem")
}

// GetCertificate serves the current browser certificate (tls.Config.GetCertificate), rotating
// first if it is time.
func (b *BrowserCerts) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	cert, err := b.rotateLocked()
	if err != nil {
		b.logger.Error("webtransport: cannot rotate the browser certificate; serving the last one", "err", err)
		if len(b.certs) == 0 {
			return nil, err
		}
		return &b.certs[len(b.certs)-1], nil
	}
	return cert, nil
}

// Published returns every certificate a page should pin: the one served now first, then the
// others (the next, and the previous until it expires).
func (b *BrowserCerts) Published() []adminapi.BrowserCert {
	b.mu.Lock()
	defer b.mu.Unlock()
	served, err := b.rotateLocked()
	if err != nil && len(b.certs) == 0 {
		return nil
	}
	out := make([]adminapi.BrowserCert, 0, len(b.certs))
	add := func(c *tls.Certificate) {
		out = append(out, adminapi.BrowserCert{SHA256: proto.Fingerprint(c.Certificate[0]), NotBefore: c.Leaf.NotBefore.UTC(), NotAfter: c.Leaf.NotAfter.UTC()})
	}
	if served != nil {
		add(served)
	}
	for i := range b.certs {
		if served == nil || &b.certs[i] != served {
			add(&b.certs[i])
		}
	}
	return out
}
