package raftstore

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/syncd-dev/syncd/raftstore/nodecert"
)

// testTLS creates a cluster CA in dir and returns the TLS configuration of each of ids, with
// certificates issued by it (raftstoretest.ClusterTLS, which this package cannot import).
func testTLS(t *testing.T, dir string, ids ...string) map[string]*TLS {
	t.Helper()
	ca := filepath.Join(dir, "ca")
	if err := nodecert.CreateCA(ca); err != nil {
		t.Fatal(err)
	}
	out := map[string]*TLS{}
	for _, id := range ids {
		d := filepath.Join(dir, id)
		if err := nodecert.Create(d, filepath.Join(ca, nodecert.CAFile), filepath.Join(ca, nodecert.CAKeyFile), id, nil); err != nil {
			t.Fatal(err)
		}
		c, err := nodecert.Load(filepath.Join(d, nodecert.CAFile), filepath.Join(d, nodecert.CertFile), filepath.Join(d, nodecert.KeyFile))
		if err != nil {
			t.Fatal(err)
		}
		out[id] = &TLS{Cert: c.Cert, CAs: c.CAs}
	}
	return out
}

// Raft's dials (a shard layer's Dial, given "id@addr" by peerTransport) reach a peer only if its
// certificate is of the cluster CA and names the id dialled; an address without an id is refused
// rather than trusted. What is dialled arrives at the peer's layer, after the handshake.
func TestLayerDialChecksThePeer(t *testing.T) {
	certs := testTLS(t, t.TempDir(), "n1", "n2")
	foreign := testTLS(t, t.TempDir(), "n1")["n1"]
	logger := testSlog(t)
	muxes := map[string]*Mux{}
	for name, c := range map[string]*TLS{"n1": certs["n1"], "n2": certs["n2"], "foreign n1": foreign} {
		muxes[name] = newMux(listenLoopback(t), c, logger)
		t.Cleanup(func() { muxes[name].Close() })
	}
	const shard ShardID = 7
	in, err := muxes["n1"].Layer(shard)
	if err != nil {
		t.Fatal(err)
	}
	out, err := muxes["n2"].Layer(shard)
	if err != nil {
		t.Fatal(err)
	}
	n1Addr := muxes["n1"].Addr().String()

	conn, err := out.Dial(raftTarget("n1", n1Addr), 2*time.Second)
	if err != nil {
		t.Fatalf("n2 → n1: %v", err)
	}
	defer conn.Close()
	accepted, err := in.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer accepted.Close()
	if id := peerNodeID(accepted, certs["n1"]); id != "n2" {
		t.Errorf("n1 sees the connection from %q, want n2", id)
	}
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	accepted.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(accepted, got); err != nil || string(got) != "ping" {
		t.Fatalf("read %q, %v", got, err)
	}

	for _, tc := range []struct {
		target raft.ServerAddress
		want   string
	}{
		{raftTarget("n3", n1Addr), `names node "n1", but node "n3" was dialled`},
		{raft.ServerAddress(n1Addr), "no node id to expect"},
		{raftTarget("n1", muxes["foreign n1"].Addr().String()), "not one of the cluster CA"},
	} {
		if c, err := out.Dial(tc.target, 2*time.Second); err == nil || !strings.Contains(err.Error(), tc.want) {
			if c != nil {
				c.Close()
			}
			t.Errorf("dial %s: %v, want %q", tc.target, err, tc.want)
		}
	}
}

// raftTarget's "id@addr" survives ids that hold '@' (addresses never do).
func TestRaftTarget(t *testing.T) {
	for _, id := range []string{"n1", "a@b", "@"} {
		gotID, addr, ok := splitRaftTarget(raftTarget(raft.ServerID(id), "127.0.0.1:7400"))
		if !ok || gotID != id || addr != "127.0.0.1:7400" {
			t.Errorf("%q: split to %q, %q, %v", id, gotID, addr, ok)
		}
	}
	if _, addr, ok := splitRaftTarget("127.0.0.1:7400"); ok || addr != "127.0.0.1:7400" {
		t.Errorf("a bare address split to %q, %v", addr, ok)
	}
}

// TLS is validated with the Config: complete, and naming the node it is given to.
func TestConfigTLS(t *testing.T) {
	certs := testTLS(t, t.TempDir(), "n1")
	dir := t.TempDir()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{NodeID: "n1", Dir: dir, TLS: certs["n1"]}, ""},
		{Config{NodeID: "n2", Dir: dir, TLS: certs["n1"]}, `TLS.Cert names node "n1", but this node is "n2"`},
		{Config{NodeID: "n1", Dir: dir, TLS: certs["n1"], Insecure: true}, "exclude each other"},
		{Config{NodeID: "n1", Dir: dir, TLS: &TLS{CAs: certs["n1"].CAs}}, "TLS needs Cert and CAs"},
	} {
		err := tc.cfg.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: Validate() = %v, want %q", tc.cfg.NodeID, err, tc.want)
		}
	}
}
