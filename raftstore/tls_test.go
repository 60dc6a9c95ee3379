package raftstore_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
)

// The node plane's tests against real nodes on real listeners: what the raw TCP client of issue
// #10 did (post as alice into d:alice:victim through the forwarding protocol) works on a node
// without TLS and is refused on one with it, whatever certificate the client has but a node
// certificate of the cluster's CA; a node dialling a peer refuses a certificate of another CA
// or one naming another node than the one it dialled; nobody chooses a proposal's time.

const victimConv = "d:alice:victim"

// attack is the proposal an outsider sends: a message as alice to victim.
func attack(cmid string) raftstore.Command {
	return send(victimConv, "alice", cmid, "posted by an outsider", "alice", "victim")
}

// dialRaw connects to a node's Raft port as an outsider does: plain TCP if cert is nil, else TLS
// 1.3 presenting cert (and trusting whatever the server presents).
func dialRaw(t *testing.T, addr string, cert *tls.Certificate) net.Conn {
	t.Helper()
	var (
		c   net.Conn
		err error
	)
	if cert == nil {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
	} else {
		cfg := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}
		if len(cert.Certificate) > 0 {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	}
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// rawPropose writes one forwarded proposal of cmd to shard 1 on conn, as the forwarding protocol
// frames it, and reads the answer: the node's result, or what ended the connection.
func rawPropose(t *testing.T, conn net.Conn, cmd raftstore.Command) (raftstore.Result, error) {
	t.Helper()
	frame, err := raftstore.ForwardProposal(1, cmd)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(frame); err != nil {
		return raftstore.Result{}, err
	}
	return raftstore.ReadForwardAnswer(conn)
}

// victimHead returns the head of the victim's conversation on node i's replica of shard 1.
func victimHead(t *testing.T, c *raftstoretest.Cluster, i int) log.Position {
	t.Helper()
	st, err := c.Node(i).State(1)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.ConvInfo(victimConv)
	if errors.Is(err, log.ErrNoConversation) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return info.Head
}

// The control: without TLS (Insecure), the outsider's raw client posts as alice; the proposal is
// stamped with the node's clock. A proposal naming its own time is refused even there, and
// nothing is stored for it.
func TestNodePlaneWithoutTLSIsOpen(t *testing.T) {
	c := raftstoretest.NewCluster(t, 1, []raftstore.ShardID{1}, func(cfg *raftstore.Config) { cfg.TLS, cfg.Insecure = nil, true })
	c.Leader(1)
	addr := c.Config(0).RaftAddr
	before := time.Now().UnixNano()
	res, err := rawPropose(t, dialRaw(t, addr, nil), attack("m1"))
	if err != nil {
		t.Fatalf("the raw client failed on a node without TLS, so it proves nothing elsewhere: %v", err)
	}
	if res.Append.Time < before || res.Append.Time > time.Now().UnixNano() {
		t.Errorf("entry time %d, want the leader's clock, in [%d, now]", res.Append.Time, before)
	}
	if h := victimHead(t, c, 0); h != 1 {
		t.Fatalf("victim's conversation head %d, want 1", h)
	}

	chosen := attack("m2")
	chosen.Time = 1 // 1970: what a caller would like its entry to say
	if res, err := rawPropose(t, dialRaw(t, addr, nil), chosen); err == nil {
		t.Fatalf("a forwarded proposal with its own time was answered %+v, want the connection closed", res)
	}
	if h := victimHead(t, c, 0); h != 1 {
		t.Errorf("victim's conversation head %d after the refused proposal, want 1", h)
	}
}

// With TLS (the default of every node), plain TCP gets nothing: neither the forwarding header nor
// the Raft one is read; a TLS client without a certificate, or with one of another CA (naming a
// node id of this cluster, even), is refused in the handshake. Nothing is stored, and the node
// serves its cluster afterwards.
func TestNodePlaneRefusesStrangers(t *testing.T) {
	c := raftstoretest.NewCluster(t, 1, []raftstore.ShardID{1}, nil)
	c.Leader(1)
	addr := c.Config(0).RaftAddr
	foreign := raftstoretest.ClusterTLS(t, t.TempDir(), "n1")["n1"].Cert // another CA's "n1"

	for _, tc := range []struct {
		name string
		cert *tls.Certificate
	}{
		{"plain TCP, forwarding header", nil},
		{"TLS without a certificate", &tls.Certificate{}},
		{"TLS with another CA's certificate", &foreign},
	} {
		if res, err := rawPropose(t, dialRaw(t, addr, tc.cert), attack("m1")); err == nil {
			t.Errorf("%s: answered %+v, want the connection refused", tc.name, res)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
	// The old Raft header on plain TCP: the node closes the connection at once (not a TLS
	// handshake) instead of handing it to a shard.
	conn := dialRaw(t, addr, nil)
	if _, err := conn.Write(raftstore.RaftHeader(1)); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	var buf [64]byte
	if _, err := conn.Read(buf[:]); err == nil || isTimeout(err) {
		t.Errorf("a plain Raft header: read %v, want the node to close the connection", err)
	}
	if h := victimHead(t, c, 0); h != 0 {
		t.Fatalf("victim's conversation head %d, want 0: an outsider posted", h)
	}
	// Unaffected: the node still proposes.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Node(0).Propose(ctx, 1, send("d:alice:bob", "alice", "ok1", "hi", "alice", "bob")); err != nil {
		t.Fatal(err)
	}
}

// On accept, a node certificate of the cluster's CA is what makes a node (docs/DECISIONS.md):
// the same raw client holding one, for an id that is not even a member, is served. So the
// refusals above are the credentials' doing, and such a key must be kept like the CA's. Even
// then the caller does not choose a proposal's time: the leader refuses one that names it.
func TestNodePlaneTrustsTheClusterCA(t *testing.T) {
	c := raftstoretest.NewCluster(t, 1, []raftstore.ShardID{1}, nil)
	c.Leader(1)
	addr := c.Config(0).RaftAddr
	cert := c.NodeCert("n9")
	before := time.Now().UnixNano()
	res, err := rawPropose(t, dialRaw(t, addr, &cert), attack("m1"))
	if err != nil {
		t.Fatalf("a node certificate of the cluster CA: %v", err)
	}
	if res.Append.Time < before || res.Append.Time > time.Now().UnixNano() {
		t.Errorf("entry time %d, want the leader's clock", res.Append.Time)
	}
	for _, stamp := range []int64{1, time.Now().Add(time.Hour).UnixNano()} {
		chosen := attack("m2")
		chosen.Time = stamp
		if res, err := rawPropose(t, dialRaw(t, addr, &cert), chosen); err == nil {
			t.Errorf("time %d: answered %+v, want a refusal", stamp, res)
		}
	}
	if h := victimHead(t, c, 0); h != 1 {
		t.Errorf("victim's conversation head %d, want 1 (only the unstamped proposal)", h)
	}
}

// A node checks whom it reached: through the forwarding connection (calls, forwarded proposals,
// status), a peer whose certificate is of another CA, or names another node than the one dialled
// at that address, is refused before anything is sent. The real peer at the right address is
// reached (it answers the call, if only to say it serves none).
func TestNodePlaneDialChecksThePeer(t *testing.T) {
	other := raftstoretest.NewCluster(t, 3, []raftstore.ShardID{}, nil) // another CA's n1…n3, real nodes
	var n3Addr string
	c := raftstoretest.NewCluster(t, 3, []raftstore.ShardID{}, func(cfg *raftstore.Config) {
		n3Addr = cfg.Peers[2].Addr
		if cfg.NodeID != "n1" {
			return
		}
		orig := cfg.PeerAddr
		cfg.PeerAddr = func(id string) string {
			switch id {
			case "n2":
				return n3Addr // a node of this cluster, but n3
			case "n3":
				return other.Config(2).RaftAddr // another cluster's n3
			}
			return orig(id)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n1 := c.Node(0)
	_, err := n1.Call(ctx, "n2", "read", nil)
	if !errors.Is(err, raftstore.ErrUnreachable) || !strings.Contains(err.Error(), `names node "n3", but node "n2" was dialled`) {
		t.Errorf("call to n2 answered by n3: %v, want ErrUnreachable for the node id", err)
	}
	_, err = n1.Call(ctx, "n3", "read", nil)
	if !errors.Is(err, raftstore.ErrUnreachable) || !strings.Contains(err.Error(), "not one of the cluster CA") {
		t.Errorf("call to n3 answered by another cluster's n3: %v, want ErrUnreachable for the CA", err)
	}
	// The right peers are reached: n2 dials n3 directly.
	_, err = c.Node(1).Call(ctx, "n3", "read", nil)
	if err == nil || errors.Is(err, raftstore.ErrUnreachable) || !strings.Contains(err.Error(), "serves no calls") {
		t.Errorf("call n2 → n3: %v, want n3's own answer", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
