package test

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/syncd/auth"
	"github.com/syncd-dev/syncd/test/proccluster"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestReadmeClusterFailover (issue #21, 6): a three-node cluster built by hand exactly as the
// README's "By hand" steps say — syncctl cert create-ca and create-node, then syncd with -node-id,
// -listen, -admin, -raft-addr, -data-dir, -peers and n1's token secret, as real processes, only
// the ports picked free — presents one certificate to devices, so a device that pinned n1's
// fingerprint is served by n2 and n3: when n1 stops, the SDK fails over (Config.Addrs) and its
// sends are acked through another node. Each node used to make its own certificate, which the
// pin refused.
func TestReadmeClusterFailover(t *testing.T) {
	skipShort(t)
	bins, err := proccluster.Build(t.Context(), proccluster.BuildConfig{Dir: t.TempDir(), Syncctl: true})
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir() // the README's current directory
	run := func(bin string, args ...string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = work
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
		}
	}
	// go run ./cmd/syncctl cert create-ca -dir ./ca
	// for n in n1 n2 n3 n4; do go run ./cmd/syncctl cert create-node -dir ./$n -ca ./ca/ca.crt -ca-key ./ca/ca.key -node-id $n; done
	run(bins.Syncctl, "cert", "create-ca", "-dir", "./ca")
	nodes := []string{"n1", "n2", "n3"}
	for _, n := range nodes {
		run(bins.Syncctl, "cert", "create-node", "-dir", "./"+n, "-ca", "./ca/ca.crt", "-ca-key", "./ca/ca.key", "-node-id", n)
	}

	type node struct {
		listen, web, admin, raft string
		cmd                      *exec.Cmd
		log                      *bytes.Buffer
	}
	ns := make([]*node, len(nodes))
	var peers []string
	for i, n := range nodes {
		ns[i] = &node{listen: freeUDP(t), web: testkit.FreeAddr(t), admin: freeTCP(t), raft: freeTCP(t), log: new(bytes.Buffer)}
		peers = append(peers, n+"="+ns[i].raft)
	}
	start := func(i int) {
		t.Helper()
		// go run ./cmd/syncd -node-id n1 -listen … -admin … -raft-addr … -data-dir ./n1 -peers n1=…,n2=…,n3=…
		// (n2 and n3 with -token-secret-file ./n1/token.key)
		args := []string{"-node-id", nodes[i], "-listen", ns[i].listen, "-admin", ns[i].admin, "-raft-addr", ns[i].raft,
			"-data-dir", "./" + nodes[i], "-peers", strings.Join(peers, ","),
			// Not in the README, whose nodes have ports to spare: the next port after a free one may
			// be taken here.
			"-web-listen", ns[i].web}
		if i > 0 {
			args = append(args, "-token-secret-file", "./n1/token.key")
		}
		cmd := exec.Command(bins.Syncd, args...)
		cmd.Dir, cmd.Stderr = work, ns[i].log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ns[i].cmd = cmd
	}
	t.Cleanup(func() {
		for _, n := range ns {
			if n.cmd != nil && n.cmd.ProcessState == nil {
				n.cmd.Process.Kill()
				n.cmd.Wait()
			}
		}
		if t.Failed() {
			for i, n := range ns {
				t.Logf("%s log:\n%s", nodes[i], n.log)
			}
		}
	})
	start(0) // n1 first: it creates the token secret the others read
	testkit.WaitTrue(t, 30*time.Second, "n1 to create its token secret", func() bool {
		_, err := os.Stat(filepath.Join(work, "n1", auth.TokenKeyFile))
		return err == nil
	})
	start(1)
	start(2)
	testkit.WaitTrue(t, 60*time.Second, "every node to be ready", func() bool {
		for _, n := range ns {
			resp, err := http.Get("http://" + n.admin + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false
			}
		}
		return true
	})

	// The device pins n1's fingerprint, as an operator copies it from n1's log or data directory.
	_, pin, err := auth.LoadCert(filepath.Join(work, "n1", auth.TLSCertFile), filepath.Join(work, "n1", auth.TLSKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes[1:] {
		if _, fp, err := auth.LoadCert(filepath.Join(work, n, auth.TLSCertFile), filepath.Join(work, n, auth.TLSKeyFile)); err != nil || fp != pin {
			t.Errorf("%s presents the certificate %s (%v), n1 %s: a device that pinned n1 is refused by %s", n, fp, err, pin, n)
		}
	}
	secret, err := auth.ReadKeyFile(filepath.Join(work, "n1", auth.TokenKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	token, err := auth.MintToken(secret, auth.TokenClaims{User: "alice", Device: "phone", Issued: now, Expires: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	alice := dialDeviceWith(t, client.Config{Addr: ns[0].listen, Addrs: []string{ns[1].listen, ns[2].listen}, Token: token,
		Device: "phone", Fingerprint: pin, StoreDir: t.TempDir(), Logger: quiet(t)})
	defer alice.Close()
	const conv = "d:alice:bob"
	if _, err := alice.Send(conv, "bob", []byte("before")); err != nil {
		t.Fatal(err)
	}
	waitBodiesWithin(t, 30*time.Second, conv, []string{"before"}, alice)

	// n1 stops (its connections close); the device moves to n2 or n3 with the same pin.
	ns[0].cmd.Process.Signal(syscall.SIGTERM)
	ns[0].cmd.Wait()
	if _, err := alice.Send(conv, "", []byte("after n1 stopped")); err != nil {
		t.Fatal(err)
	}
	waitBodiesWithin(t, 60*time.Second, conv, []string{"before", "after n1 stopped"}, alice)
}

// waitBodiesWithin is waitBodies with a deadline of the caller's.
func waitBodiesWithin(t *testing.T, d time.Duration, conv string, want []string, devices ...*device) {
	t.Helper()
	testkit.WaitTrue(t, d, "every device to store "+strings.Join(want, ", "), func() bool {
		for _, dev := range devices {
			if strings.Join(bodies(t, dev, conv), "\x00") != strings.Join(want, "\x00") {
				return false
			}
		}
		return true
	})
}
