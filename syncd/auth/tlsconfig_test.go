package auth

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore/nodecert"
)

func TestCertSelfSignedGeneratesOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	cert1, fp1, err := SelfSignedCert(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(fp1) != 64 || strings.ToLower(fp1) != fp1 || strings.Contains(fp1, ":") {
		t.Errorf("fingerprint %q, want 64 lowercase hex digits", fp1)
	}
	if sum := sha256.Sum256(cert1.Certificate[0]); fp1 != hex.EncodeToString(sum[:]) {
		t.Errorf("fingerprint %s is not the SHA-256 of the DER certificate", fp1)
	}
	cert2, fp2, err := SelfSignedCert(dir, []string{"other.example"}) // hosts ignored once it exists
	if err != nil {
		t.Fatal(err)
	}
	if fp1 != fp2 {
		t.Errorf("second call: fingerprint %s, want the first %s", fp2, fp1)
	}
	if cert2.Leaf == nil || cert2.Leaf.VerifyHostname("other.example") == nil {
		t.Error("second call did not return the stored certificate")
	}
	if runtime.GOOS != "windows" {
		for file, want := range map[string]fs.FileMode{TLSKeyFile: 0o600, TLSCertFile: 0o644} {
			fi, err := os.Stat(filepath.Join(dir, file))
			if err != nil {
				t.Fatal(err)
			}
			if perm := fi.Mode().Perm(); perm != want {
				t.Errorf("%s has mode %v, want %v", file, perm, want)
			}
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("dir holds %d entries, want only %s and %s", len(entries), TLSCertFile, TLSKeyFile)
	}
	// LoadCert on the same files gives the same fingerprint.
	if _, fp3, err := LoadCert(filepath.Join(dir, TLSCertFile), filepath.Join(dir, TLSKeyFile)); err != nil || fp3 != fp1 {
		t.Errorf("LoadCert: %s, %v; want %s", fp3, err, fp1)
	}
}

func TestCertSelfSignedVerifies(t *testing.T) {
	cert, _, err := SelfSignedCert(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	for _, host := range DefaultCertHosts {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: pool}); err != nil {
			t.Errorf("verify for %s: %v", host, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "10.0.0.1", Roots: pool}); err == nil {
		t.Error("verified for a host it does not name")
	}
	if len(leaf.IPAddresses) != 2 || len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "localhost" {
		t.Errorf("SANs: IPs %v, DNS %v", leaf.IPAddresses, leaf.DNSNames)
	}
	if d := time.Until(leaf.NotAfter); d < 9*365*24*time.Hour || d > 11*365*24*time.Hour {
		t.Errorf("valid until %s, want about 10 years", leaf.NotAfter)
	}
	if !leaf.NotBefore.Before(time.Now()) {
		t.Errorf("not valid before %s", leaf.NotBefore)
	}
	if leaf.IsCA {
		t.Error("a self-signed server certificate should not be a CA")
	}
}

func TestCertSelfSignedHosts(t *testing.T) {
	cert, _, err := SelfSignedCert(t.TempDir(), []string{"10.1.2.3", "[fd00::1]", "sync.example.com", "*.nodes.example"})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"10.1.2.3", "fd00::1", "sync.example.com", "a.nodes.example"} {
		if err := cert.Leaf.VerifyHostname(h); err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}
	for _, bad := range []string{"", "host:4433", "https://x", "a b", "a..b"} {
		dir := t.TempDir()
		if _, _, err := SelfSignedCert(dir, []string{bad}); err == nil {
			t.Errorf("host %q accepted", bad)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("host %q: files written despite the error", bad)
		}
	}
}

func TestCertSelfSignedHalfPairs(t *testing.T) {
	// A key without a certificate is an interrupted generation: replaced.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, TLSKeyFile), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := SelfSignedCert(dir, nil); err != nil {
		t.Errorf("key without certificate: %v", err)
	}
	// A certificate without its key is refused, with advice, and left alone.
	if err := os.Remove(filepath.Join(dir, TLSKeyFile)); err != nil {
		t.Fatal(err)
	}
	_, _, err := SelfSignedCert(dir, nil)
	if err == nil || !strings.Contains(err.Error(), "delete the certificate") {
		t.Errorf("certificate without key: err %v, want a refusal saying what to do", err)
	}
	if _, err := os.Stat(filepath.Join(dir, TLSKeyFile)); err == nil {
		t.Error("a key was generated for a certificate that exists")
	}
}

func TestCertLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := SelfSignedCert(dir, nil); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, TLSCertFile), filepath.Join(dir, TLSKeyFile)
	missing := filepath.Join(dir, "missing.pem")

	_, _, err := LoadCert(missing, keyFile)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "certificate") || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing certificate: %v", err)
	}
	_, _, err = LoadCert(certFile, missing)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "key") || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing key: %v", err)
	}
	// A key that belongs to another certificate.
	other := t.TempDir()
	if _, _, err := SelfSignedCert(other, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err = LoadCert(certFile, filepath.Join(other, TLSKeyFile)); err == nil || !strings.Contains(err.Error(), certFile) {
		t.Errorf("mismatched key: %v", err)
	}
	// Garbage in place of PEM.
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err = LoadCert(garbage, keyFile); err == nil {
		t.Error("garbage certificate accepted")
	}
}

// handshake runs one TLS handshake over loopback TCP between ServerTLSConfig(cert) and client,
// has the server send a greeting, and returns the client's connection state and the errors of
// both sides. It waits for the server goroutine before returning.
func handshake(t *testing.T, cert tls.Certificate, client *tls.Config) (tls.ConnectionState, error, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serverErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			serverErr <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Server(c, ServerTLSConfig(cert, proto.ALPN))
		if err := tc.Handshake(); err != nil {
			serverErr <- err
			return
		}
		_, err = tc.Write([]byte("hello"))
		serverErr <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, client)
	clientErr := tc.Handshake()
	var state tls.ConnectionState
	if clientErr == nil {
		state = tc.ConnectionState()
		buf := make([]byte, 5)
		if _, err := io.ReadFull(tc, buf); err != nil || string(buf) != "hello" {
			clientErr = errors.Join(err, errors.New("no greeting"))
		}
	}
	c.Close() // unblock the server if it still waits for us
	return state, clientErr, <-serverErr
}

func TestPinnedTLSHandshake(t *testing.T) {
	cert, fp, err := SelfSignedCert(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	state, cerr, serr := handshake(t, cert, proto.PinnedTLSConfig(fp))
	if cerr != nil || serr != nil {
		t.Fatalf("client: %v; server: %v", cerr, serr)
	}
	if state.Version != tls.VersionTLS13 {
		t.Errorf("version %x, want TLS 1.3", state.Version)
	}
	if state.NegotiatedProtocol != proto.ALPN {
		t.Errorf("ALPN %q, want %q", state.NegotiatedProtocol, proto.ALPN)
	}
	if got := proto.Fingerprint(state.PeerCertificates[0].Raw); got != fp {
		t.Errorf("peer fingerprint %s, want %s", got, fp)
	}

	// The printed fingerprint may be pasted with colons and in upper case.
	var colons []string
	for i := 0; i < len(fp); i += 2 {
		colons = append(colons, strings.ToUpper(fp[i:i+2]))
	}
	if _, cerr, serr := handshake(t, cert, proto.PinnedTLSConfig(strings.Join(colons, ":"))); cerr != nil || serr != nil {
		t.Errorf("colon-separated pin: client: %v; server: %v", cerr, serr)
	}
}

func TestPinnedTLSRejects(t *testing.T) {
	cert, fp, err := SelfSignedCert(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, otherFP, err := SelfSignedCert(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, pin := range map[string]string{
		"another certificate": otherFP,
		"empty pin":           "",
		"truncated pin":       fp[:32],
	} {
		_, cerr, serr := handshake(t, cert, proto.PinnedTLSConfig(pin))
		if cerr == nil || !strings.Contains(cerr.Error(), "fingerprint") {
			t.Errorf("%s: client err %v, want a fingerprint error", name, cerr)
		}
		if serr == nil {
			t.Errorf("%s: server completed the handshake", name)
		}
	}

	// TLS 1.2 is refused by the server.
	old := proto.PinnedTLSConfig(fp)
	old.MinVersion, old.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	if _, cerr, serr := handshake(t, cert, old); cerr == nil || serr == nil {
		t.Errorf("TLS 1.2: client %v, server %v; want both to fail", cerr, serr)
	}
	// A client without the ALPN is refused.
	if _, cerr, serr := handshake(t, cert, otherALPN(proto.PinnedTLSConfig(fp))); cerr == nil || serr == nil {
		t.Errorf("wrong ALPN: client %v, server %v; want both to fail", cerr, serr)
	}
}

// TestCertCAVerifiedTLSHandshake checks the production path: a client that verifies normally
// against a pool holding the certificate, by IP.
func TestCertCAVerifiedTLSHandshake(t *testing.T) {
	cert, _, err := SelfSignedCert(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	client := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{proto.ALPN}, MinVersion: tls.VersionTLS13}
	if _, cerr, serr := handshake(t, cert, client); cerr != nil || serr != nil {
		t.Errorf("client: %v; server: %v", cerr, serr)
	}
}

// The devices' TLS certificate is no node certificate, even if it were signed by the cluster CA:
// it names no node, so a node never accepts it on the node plane.
func TestSelfSignedCertNamesNoNode(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := SelfSignedCert(dir, nil); err != nil {
		t.Fatal(err)
	}
	cert, _, err := LoadCert(filepath.Join(dir, TLSCertFile), filepath.Join(dir, TLSKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodecert.ID(cert.Leaf); err == nil || !strings.Contains(err.Error(), "names no node") {
		t.Errorf("client certificate as a node's: %v", err)
	}
}

// otherALPN returns cfg offering another application protocol than syncd's.
func otherALPN(cfg *tls.Config) *tls.Config {
	cfg.NextProtos = []string{"other/1"}
	return cfg
}
