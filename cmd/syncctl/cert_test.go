package main

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

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
	caFlags := []string{"-ca", filepath.Join(ca, auth.NodeCAFile), "-ca-key", filepath.Join(ca, auth.NodeCAKeyFile)}
	code, out, _ := syncctl(t, append([]string{"cert", "create-node", "-dir", n1, "-node-id", "n1", "-host", "127.0.0.2,node1.example", "-host", "::1"}, caFlags...)...)
	if code != exitOK || !strings.Contains(out, "node n1") {
		t.Fatalf("create-node: exit %d, %q", code, out)
	}
	certs, err := auth.LoadNodeCerts(filepath.Join(n1, auth.NodeCAFile), filepath.Join(n1, auth.NodeCertFile), filepath.Join(n1, auth.NodeKeyFile))
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
		for _, key := range []string{filepath.Join(ca, auth.NodeCAKeyFile), filepath.Join(n1, auth.NodeKeyFile)} {
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
	code, _, errOut := syncctl(t, "cert", "create-node", "-dir", other, "-node-id", "n2", "-ca", filepath.Join(ca, auth.NodeCAFile),
		"-ca-key", filepath.Join(ca, auth.NodeCAKeyFile))
	if code != exitFail || !strings.Contains(errOut, "another CA's") {
		t.Errorf("create-node into another CA's dir: exit %d, %q", code, errOut)
	}
	// A CA key that is not the CA certificate's.
	code, _, errOut = syncctl(t, "cert", "create-node", "-dir", filepath.Join(dir, "n3"), "-node-id", "n3", "-ca", filepath.Join(ca, auth.NodeCAFile),
		"-ca-key", filepath.Join(other, auth.NodeCAKeyFile))
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
			want = exitFail // a bad id is found by auth
		}
		if code, _, _ := syncctl(t, args...); code != want {
			t.Errorf("%q: exit %d, want %d", args, code, want)
		}
	}
}
