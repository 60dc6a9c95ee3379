package nodecert

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// A node certificate names exactly one node, in its syncd://node/<id> URI; anything else is not a
// node certificate.
func TestID(t *testing.T) {
	uri := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	for _, tc := range []struct {
		uris []*url.URL
		want string // "" means an error
	}{
		{[]*url.URL{URI("n1")}, "n1"},
		{[]*url.URL{URI("a/b@c")}, "a/b@c"}, // ids are printable ASCII; the path escapes them
		{[]*url.URL{uri("spiffe://x/y"), URI("n2")}, "n2"},
		{nil, ""},
		{[]*url.URL{uri("spiffe://x/y")}, ""},
		{[]*url.URL{URI("n1"), URI("n2")}, ""},
		{[]*url.URL{URI("")}, ""},
		{[]*url.URL{URI("a b")}, ""},
		{[]*url.URL{uri("syncd://node/n1?x=1")}, ""},
		{[]*url.URL{uri("syncd://user@node/n1")}, ""},
	} {
		// Through DER, as a peer's certificate arrives.
		got, err := ID(parseURIs(t, tc.uris))
		if tc.want == "" && err == nil || tc.want != "" && (err != nil || got != tc.want) {
			t.Errorf("%v: ID = %q, %v; want %q", tc.uris, got, err, tc.want)
		}
	}
}

// parseURIs issues a certificate with uris as URI SANs and returns it parsed back from DER.
func parseURIs(t *testing.T, uris []*url.URL) *x509.Certificate {
	t.Helper()
	certPEM, _, err := Issue(&x509.Certificate{URIs: uris, NotAfter: time.Now().Add(time.Hour)}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The embedded node's certificates: made once in the data directory (keys 0600), then loaded as
// they are; a cluster node (create false) gets fs.ErrNotExist to explain; a partial set is an
// error naming what is missing; what an interrupted creation leaves is finished.
func TestLoadOrCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if _, _, err := LoadOrCreate(dir, "n1", false); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("no files, no create: %v, want fs.ErrNotExist", err)
	}
	first, created, err := LoadOrCreate(dir, "n1", true)
	if err != nil || !created || first.NodeID != "n1" {
		t.Fatalf("first start: %+v created %v, %v", first.NodeID, created, err)
	}
	again, created, err := LoadOrCreate(dir, "n1", false)
	if err != nil || created || string(again.Cert.Certificate[0]) != string(first.Cert.Certificate[0]) {
		t.Fatalf("second start: created %v, %v, same certificate %v", created, err, err == nil && string(again.Cert.Certificate[0]) == string(first.Cert.Certificate[0]))
	}
	if runtime.GOOS != "windows" {
		for file, want := range map[string]fs.FileMode{CAKeyFile: 0o600, KeyFile: 0o600, CAFile: 0o644, CertFile: 0o644} {
			if fi, err := os.Stat(filepath.Join(dir, file)); err != nil || fi.Mode().Perm() != want {
				t.Errorf("%s: %v, mode %v, want %v", file, err, fi.Mode().Perm(), want)
			}
		}
	}
	// The CA in the data dir issues certificates for nodes that join later (growing into a cluster).
	n2 := filepath.Join(t.TempDir(), "n2")
	if err := Create(n2, filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile), "n2", nil); err != nil {
		t.Fatal(err)
	}
	if c, _, err := LoadOrCreate(n2, "n2", false); err != nil || c.NodeID != "n2" {
		t.Fatalf("n2: %v %v", c.NodeID, err)
	}

	// A missing node key is not made up.
	if err := os.Remove(filepath.Join(n2, KeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreate(n2, "n2", true); err == nil || !strings.Contains(err.Error(), "but not node.key") {
		t.Errorf("missing node.key: %v", err)
	}

	// An interrupted first start (the CA key written, nothing else) is finished on the next.
	crashed := filepath.Join(t.TempDir(), "crashed")
	if err := os.MkdirAll(crashed, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(crashed, CAKeyFile), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, created, err := LoadOrCreate(crashed, "n1", true); err != nil || !created || c.NodeID != "n1" {
		t.Errorf("after an interrupted start: %v created %v, %v", c.NodeID, created, err)
	}
}

// Load refuses a certificate another CA issued, one that is not a node's, and a key
// that is not the certificate's, each naming the file.
func TestLoadRefuses(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, d := range []string{a, b} {
		if _, _, err := LoadOrCreate(d, "n1", true); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Load(filepath.Join(a, CAFile), filepath.Join(b, CertFile), filepath.Join(b, KeyFile)); err == nil ||
		!strings.Contains(err.Error(), "not valid under the cluster CA") {
		t.Errorf("another CA's certificate: %v", err)
	}
	if _, err := Load(filepath.Join(a, CAFile), filepath.Join(a, CertFile), filepath.Join(b, KeyFile)); err == nil ||
		!strings.Contains(err.Error(), "node.key") {
		t.Errorf("another node's key: %v", err)
	}
	if _, err := Load(filepath.Join(a, CertFile), filepath.Join(a, CertFile), filepath.Join(a, KeyFile)); err == nil ||
		!strings.Contains(err.Error(), "not a CA") {
		t.Errorf("a node certificate as the CA: %v", err)
	}
	// A server certificate naming hosts only (as the devices' TLS certificate does) is no node
	// certificate, even if it were signed by the CA: it names no node. (syncd/auth's
	// TestSelfSignedCertNamesNoNode checks the devices' own certificate.)
	tmpl := &x509.Certificate{NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if err := AddHosts(tmpl, []string{"localhost", "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := Issue(tmpl, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := KeyPair(certPEM, keyPEM, "server.crt", "server.key")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ID(cert.Leaf); err == nil || !strings.Contains(err.Error(), "names no node") {
		t.Errorf("server certificate as a node's: %v", err)
	}
	// A CA file with two CAs (a CA rotation) trusts both.
	both := filepath.Join(dir, "both.crt")
	caA, _ := os.ReadFile(filepath.Join(a, CAFile))
	caB, _ := os.ReadFile(filepath.Join(b, CAFile))
	if err := os.WriteFile(both, append(caA, caB...), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{a, b} {
		if _, err := Load(both, filepath.Join(d, CertFile), filepath.Join(d, KeyFile)); err != nil {
			t.Errorf("rotation bundle, certificate of %s: %v", d, err)
		}
	}
}
