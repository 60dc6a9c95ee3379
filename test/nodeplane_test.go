package test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/nodecert"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
)

// TestNodePlaneOfAProcessCluster: a real three-node cluster (cmd/syncd processes, each given a
// certificate of the harness's cluster CA) runs with mutual TLS on its Raft ports, and against
// those ports from outside: the old raw headers on plain TCP ("SYF1", "SYR1") are closed at
// once; a client presenting a certificate of another CA is refused in the handshake (it knows
// the cluster's public CA certificate, not its key); a node that names one node and reaches
// another refuses it; a node certificate of the cluster's CA is answered (the control: the
// refusals are the credentials'). The cluster is ready throughout and the node logged the
// refusals.
func TestNodePlaneOfAProcessCluster(t *testing.T) {
	skipShort(t)
	tl := newTimeline(t)
	c := startClusterWithSpares(t, 3, 0, tl)
	n1 := c.nodes[0]
	dir := c.pc.Dir()

	for _, hdr := range []string{"SYF1\x00\x00\x00\x00", "SYR1\x00\x00\x00\x01"} {
		conn, err := net.DialTimeout("tcp", n1.RaftAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write([]byte(hdr))
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 512)
		var err2 error
		for err2 == nil {
			_, err2 = conn.Read(buf) // an alert at most, then the close
		}
		conn.Close()
		var ne net.Error
		if errors.As(err2, &ne) && ne.Timeout() {
			t.Errorf("plain %q: the node kept the connection open", hdr[:4])
		}
		tl.add("plain TCP %q to %s: closed (%v)", hdr[:4], n1.ID, err2)
	}

	// In-process raftstore nodes calling n1 as another node would (Node.Call, over the forwarding
	// connection): the real client code, with the credentials under test.
	clusterCA, err := nodecert.Load(filepath.Join(dir, nodecert.CAFile), filepath.Join(dir, "certs", "n1", nodecert.CertFile),
		filepath.Join(dir, "certs", "n1", nodecert.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	stranger := raftstoretest.ClusterTLS(t, t.TempDir(), "n9")["n9"]
	stranger.CAs = clusterCA.CAs // trusts the cluster's CA, holds none of its certificates
	nineDir := filepath.Join(t.TempDir(), "n9")
	if err := nodecert.Create(nineDir, filepath.Join(dir, nodecert.CAFile), filepath.Join(dir, nodecert.CAKeyFile), "n9", nil); err != nil {
		t.Fatal(err)
	}
	member, err := nodecert.Load(filepath.Join(nineDir, nodecert.CAFile), filepath.Join(nineDir, nodecert.CertFile),
		filepath.Join(nineDir, nodecert.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	call := func(what string, tls *raftstore.TLS, id string) error {
		t.Helper()
		n, err := raftstore.New(raftstore.Config{NodeID: "n9", Dir: t.TempDir(), Shards: []raftstore.ShardID{},
			TLS: tls, Insecure: tls == nil, Logger: slog.New(slog.DiscardHandler),
			// n1 under its own id, and under n2's (the address of one node, the id of another).
			Peers: []raftstore.Peer{{ID: "n1", Addr: n1.RaftAddr}, {ID: "n2", Addr: n1.RaftAddr}}})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = n.Call(ctx, id, "probe", nil)
		tl.add("%s, calling %s: %v", what, id, err)
		return err
	}
	for _, tc := range []struct {
		what string
		tls  *raftstore.TLS
		want string
	}{
		{"plain TCP", nil, ""},
		{"a certificate of another CA", stranger, "certificate"},
	} {
		if err := call(tc.what, tc.tls, "n1"); !errors.Is(err, raftstore.ErrUnreachable) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrUnreachable (%q)", tc.what, err, tc.want)
		}
	}
	if err := call("the cluster CA's certificate, n1 dialled as n2", raftstoretest.FromCerts(member), "n2"); !errors.Is(err, raftstore.ErrUnreachable) ||
		!strings.Contains(err.Error(), `names node "n1", but node "n2" was dialled`) {
		t.Errorf("n1 dialled as n2: %v, want ErrUnreachable for the node id", err)
	}
	if err := call("the cluster CA's certificate", raftstoretest.FromCerts(member), "n1"); err == nil ||
		errors.Is(err, raftstore.ErrUnreachable) || !strings.Contains(err.Error(), "unknown call method") {
		t.Errorf("a node certificate of the cluster CA: %v, want n1's own answer to an unknown call", err)
	}

	c.waitReady(30 * time.Second)
	if tail := n1.LogTail(400); !strings.Contains(tail, "mux rejected connection") {
		t.Errorf("%s did not log the refused connections:\n%s", n1.ID, tail)
	}
	c.checkLogs()
}
