package main

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/syncd-dev/syncd/raftstore/nodecert"
	"github.com/syncd-dev/syncd/syncd/auth"
)

// syncctl cert makes what syncd loads: a CA, and node certificates it issued that name their node
// id, with private keys 0600; it never replaces a file, and bad command lines exit 2.
func TestCertCreateCAAndNode(t *testing.T) {
	dir := t.TempDir()
	ca, n1 := filepath.Join(dir, "ca"), filepath.Join(dir, "n1")
	if code, out, _ := syncctl(t, "cert", "create-ca", "-dir", ca); code != exitOK || !strings.Contains(out, "ca.key") {
		t.Fatalf("create-ca: exit %d, %q", code, out)
	}
	caFlags := []string{"-ca", filepath.Join(ca, nodecert.CAFile), "-ca-key", filepath.Join(ca, nodecert.CAKeyFile)}
	code, out, _ := syncctl(t, append([]string{"cert", "create-node", "-dir", n1, "-node-id", "n1", "-host", "127.0.0.2,node1.example", "-host", "::1"}, caFlags...)...)
	if code != exitOK || !strings.Contains(out, "node n1") {
		t.Fatalf("create-node: exit %d, %q", code, out)
	}
	certs, err := nodecert.Load(filepath.Join(n1, nodecert.CAFile), filepath.Join(n1, nodecert.CertFile), filepath.Join(n1, nodecert.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	leaf := certs.Cert.Leaf
	if certs.NodeID != "n1" || leaf.Subject.CommonName != "n1" || !slices.Equal(leaf.DNSNames, []string{"node1.example"}) ||
		len(leaf.IPAddresses) != 2 || !leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.2")) {
		t.Errorf("certificate: id %q, CN %q, DNS %v, IPs %v", certs.NodeID, leaf.Subject.CommonName, leaf.DNSNames, leaf.IPAddresses)
	}
	if leaf.NotAfter.Sub(leaf.NotBefore) < 4*365*24*60*60*1e9 {
		t.Errorf("certificate valid only %v", leaf.NotAfter.Sub(leaf.NotBefore))
	}
	if runtime.GOOS != "windows" {
		for _, key := range []string{filepath.Join(ca, nodecert.CAKeyFile), filepath.Join(n1, nodecert.KeyFile)} {
			if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: %v, mode %v, want 0600", key, err, fi.Mode().Perm())
			}
		}
	}

	// Nothing is replaced: a second CA in the same place, a second certificate in the same dir.
	if code, _, errOut := syncctl(t, "cert", "create-ca", "-dir", ca); code != exitFail || !strings.Contains(errOut, "not replacing") {
		t.Errorf("second create-ca: exit %d, %q", code, errOut)
	}
	if code, _, errOut := syncctl(t, append([]string{"cert", "create-node", "-dir", n1, "-node-id", "n1"}, caFlags...)...); code != exitFail || !strings.Contains(errOut, "not replacing") {
		t.Errorf("second create-node: exit %d, %q", code, errOut)
	}
	// A dir holding another CA's ca.crt does not get a certificate its own ca.crt would not trust.
	other := filepath.Join(dir, "other")
	if code, _, _ := syncctl(t, "cert", "create-ca", "-dir", other); code != exitOK {
		t.Fatal("create-ca other")
	}
	code, _, errOut := syncctl(t, "cert", "create-node", "-dir", other, "-node-id", "n2", "-ca", filepath.Join(ca, nodecert.CAFile),
		"-ca-key", filepath.Join(ca, nodecert.CAKeyFile))
	if code != exitFail || !strings.Contains(errOut, "another CA's") {
		t.Errorf("create-node into another CA's dir: exit %d, %q", code, errOut)
	}
	// A CA key that is not the CA certificate's.
	code, _, errOut = syncctl(t, "cert", "create-node", "-dir", filepath.Join(dir, "n3"), "-node-id", "n3", "-ca", filepath.Join(ca, nodecert.CAFile),
		"-ca-key", filepath.Join(other, nodecert.CAKeyFile))
	if code != exitFail || !strings.Contains(errOut, "does not belong") {
		t.Errorf("mismatched CA key: exit %d, %q", code, errOut)
	}

	for _, args := range [][]string{
		{"cert"},
		{"cert", "renew", "-dir", dir},
		{"cert", "create-ca"},
		{"cert", "create-ca", "-dir", dir, "-node-id", "n1"},
		{"cert", "create-node", "-dir", dir, "-node-id", "n1"},
		{"cert", "create-node", "-dir", filepath.Join(dir, "n4"), "-node-id", "a=b", "-ca", caFlags[1], "-ca-key", caFlags[3]},
	} {
		want := exitUsage
		if args[len(args)-1] == caFlags[3] {
			want = exitFail // a bad id is found by nodecert
		}
		if code, _, _ := syncctl(t, args...); code != want {
			t.Errorf("%q: exit %d, want %d", args, code, want)
		}
	}
}

// TestCertOneClientCertificatePerCluster (issue #21, 6): create-ca makes the certificate devices
// pin next to the CA and create-node gives it to every node (a cluster built by hand as the
// README says used to give each node its own, so a device that pinned n1 was refused by n2); a
// node directory holding a certificate already keeps it, and says so.
func TestCertOneClientCertificatePerCluster(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca")
	if code, out, _ := syncctl(t, "cert", "create-ca", "-dir", ca); code != exitOK || !strings.Contains(out, "fingerprint") {
		t.Fatalf("create-ca: exit %d, %q", code, out)
	}
	_, want, err := auth.LoadCert(filepath.Join(ca, auth.TLSCertFile), filepath.Join(ca, auth.TLSKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	caFlags := []string{"-ca", filepath.Join(ca, nodecert.CAFile), "-ca-key", filepath.Join(ca, nodecert.CAKeyFile)}
	for _, n := range []string{"n1", "n2", "n3"} {
		code, out, errOut := syncctl(t, append([]string{"cert", "create-node", "-dir", filepath.Join(dir, n), "-node-id", n}, caFlags...)...)
		if code != exitOK || !strings.Contains(out, "copied the cluster's certificate") {
			t.Fatalf("create-node %s: exit %d, %q %q", n, code, out, errOut)
		}
		// What syncd loads from the data directory (SelfSignedCert finds the files and keeps them).
		_, got, err := auth.SelfSignedCert(filepath.Join(dir, n), nil)
		if err != nil || got != want {
			t.Fatalf("%s presents %s (%v), want the cluster's %s", n, got, err, want)
		}
	}
	if runtime.GOOS != "windows" {
		if fi, err := os.Stat(filepath.Join(dir, "n2", auth.TLSKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("copied key: %v, mode %v, want 0600", err, fi.Mode().Perm())
		}
	}
	own := filepath.Join(dir, "own")
	_, ownFP, err := auth.SelfSignedCert(own, nil)
	if err != nil {
		t.Fatal(err)
	}
	code, out, _ := syncctl(t, append([]string{"cert", "create-node", "-dir", own, "-node-id", "n4"}, caFlags...)...)
	if code != exitOK || !strings.Contains(out, "kept the certificate devices pin") || !strings.Contains(out, ownFP) {
		t.Fatalf("create-node into a dir with its own certificate: exit %d, %q", code, out)
	}
}
