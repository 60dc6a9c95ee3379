package raftstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/raft"

	"github.com/syncd-dev/syncd/raftstore/nodecert"
)

// Mutual TLS on the node plane.
//
// With Config.TLS set, the node's one listener (the Mux) takes only TLS 1.3 connections whose
// client presents a certificate of the cluster CA that names a node id, and every connection the
// node dials (Raft through the shard layers, forwarded proposals and calls through the forwarder)
// presents this node's certificate and checks the server's: issued by the cluster CA, naming the
// node id the dialer expects of that address. The mux header ("SYR1"/"SYF1") follows the
// handshake, inside TLS, unchanged.
//
// Who a dialer expects: raft dials a server by id (peerTransport tags each RPC's address with the
// id, see raftTarget), the forwarder a leader or replica whose id it read from Raft or the
// cluster map. The one exception is a joining node's Config.Join, an address only: any node of
// the cluster will do there, since it only relays the join to the meta leader.
//
// A certificate names its node as package nodecert defines (nodecert.ID: one syncd://node/<id>
// URI SAN); nodecert also makes and loads the certificates, for syncd, syncctl and the tests.
//
// On accept, the connection's claim is its certificate: any holder of a node certificate of the
// cluster CA is a node of the cluster (docs/DECISIONS.md says why the accept side does not also
// check the id against the membership).

// TLS is a node's identity and trust on the node plane. Its fields must not change once the node
// is created; safe for concurrent use then.
type TLS struct {
	// Cert is this node's certificate and key, issued by a CA of CAs and naming Config.NodeID.
	Cert tls.Certificate
	// CAs are the cluster CA certificates; a peer's certificate must chain to one of them.
	CAs *x509.CertPool
}

// validate reports what is missing from t, or a certificate that does not name nodeID.
func (t *TLS) validate(nodeID string) error {
	if len(t.Cert.Certificate) == 0 || t.CAs == nil {
		return errors.New("raftstore: TLS needs Cert and CAs")
	}
	leaf := t.Cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(t.Cert.Certificate[0]); err != nil {
			return fmt.Errorf("raftstore: TLS.Cert: %w", err)
		}
	}
	id, err := nodecert.ID(leaf)
	if err != nil {
		return fmt.Errorf("raftstore: TLS.Cert: %w", err)
	}
	if id != nodeID {
		return fmt.Errorf("raftstore: TLS.Cert names node %q, but this node is %q: give it its own certificate", id, nodeID)
	}
	return nil
}

// serverConfig is the listener's: TLS 1.3 only, a client certificate of the cluster CA required
// and verified by crypto/tls (chain and client-auth usage), and it must name a node id.
func (t *TLS) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{t.Cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    t.CAs,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := nodecert.ID(cs.PeerCertificates[0]) // verified and non-empty under RequireAndVerifyClientCert
			return err
		},
	}
}

// clientConfig is a dial's to node want ("": any node of the cluster). Peers are verified by the
// node id their certificate names rather than by host name, so that relays, NAT and a new address
// need no new certificate: crypto/tls's host-name check is off and VerifyConnection does the whole
// verification instead, chain included (the pattern of crypto/tls's VerifyConnection example).
func (t *TLS) clientConfig(want string) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{t.Cert},
		InsecureSkipVerify: true, // replaced by VerifyConnection below, which always runs
		VerifyConnection:   func(cs tls.ConnectionState) error { return t.verifyServer(cs, want) },
	}
}

// verifyServer checks a dialled peer's certificate: issued by a cluster CA for server
// authentication, and naming node want (any node if want is "").
func (t *TLS) verifyServer(cs tls.ConnectionState, want string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("raftstore: the peer presented no certificate")
	}
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: t.CAs, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("raftstore: the peer's certificate is not one of the cluster CA: %w", err)
	}
	id, err := nodecert.ID(leaf)
	if err != nil {
		return fmt.Errorf("raftstore: the peer's certificate: %w", err)
	}
	if want != "" && id != want {
		return fmt.Errorf("raftstore: the peer's certificate names node %q, but node %q was dialled there", id, want)
	}
	return nil
}

// dialNode connects to the node at addr within timeout: over TLS, checking that its certificate
// names node id ("": any node of the cluster), if t is set; plain TCP otherwise.
func dialNode(t *TLS, id, addr string, timeout, keepAlive time.Duration) (net.Conn, error) {
	if timeout <= 0 {
		timeout = defaultHeaderTimeout
	}
	d := &net.Dialer{Timeout: timeout, KeepAlive: keepAlive}
	if t == nil {
		return d.Dial("tcp", addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	td := &tls.Dialer{NetDialer: d, Config: t.clientConfig(id)}
	return td.DialContext(ctx, "tcp", addr)
}

// peerNodeID returns the node id of the certificate conn's peer presented, or "" for a plain
// connection or one not yet through its handshake.
func peerNodeID(conn net.Conn, t *TLS) string {
	tc, ok := conn.(*tls.Conn)
	if !ok || t == nil {
		return ""
	}
	cs := tc.ConnectionState()
	if !cs.HandshakeComplete || len(cs.PeerCertificates) == 0 {
		return ""
	}
	id, _ := nodecert.ID(cs.PeerCertificates[0])
	return id
}

// raftTarget is the address raft is given to dial server id at addr: "id@addr". The shard layer's
// Dial splits it again (splitRaftTarget) to know whose certificate to expect. Addresses
// (host:port) hold no '@'; ids may, so the last one separates them.
func raftTarget(id raft.ServerID, addr string) raft.ServerAddress {
	return raft.ServerAddress(string(id) + "@" + addr)
}

// splitRaftTarget undoes raftTarget; ok is false for an address without an id.
func splitRaftTarget(a raft.ServerAddress) (id, addr string, ok bool) {
	i := strings.LastIndexByte(string(a), '@')
	if i < 0 {
		return "", string(a), false
	}
	return string(a[:i]), string(a[i+1:]), true
}

// peerTransport is a shard's raft.NetworkTransport as its raft instance sees it: every RPC's
// target becomes the address to dial the server at (Config.PeerAddr's override, else raft's),
// tagged with the server's id (raftTarget), and heartbeats pass a gate that shutdown closes
// (SetHeartbeatHandler). Everything else is the NetworkTransport's.
type peerTransport struct {
	*raft.NetworkTransport
	node *Node

	heartbeats    sync.RWMutex // held shared while raft handles a heartbeat; closeHeartbeats takes it
	heartbeatsOff bool         // guarded by heartbeats
}

// SetHeartbeatHandler implements raft.Transport. The NetworkTransport runs raft's heartbeat
// handler on the connection's goroutine, not raft's: a heartbeat that passed raft's own shutdown
// check may still be storing a new term (raft's StableStore, the node's store) after Shutdown has
// returned, and panic on the store the node closes next. The gate makes closeHeartbeats wait for
// it and turns the later ones away.
func (t *peerTransport) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	if cb == nil {
		t.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	t.NetworkTransport.SetHeartbeatHandler(func(rpc raft.RPC) {
		t.heartbeats.RLock()
		defer t.heartbeats.RUnlock()
		if t.heartbeatsOff {
			rpc.Respond(nil, raft.ErrRaftShutdown)
			return
		}
		cb(rpc)
	})
}

// closeHeartbeats waits for the heartbeats raft is handling and turns away every later one.
// Called after raft's Shutdown (which ends the waits a heartbeat's handling may have on raft's
// loops) and before the store closes.
func (t *peerTransport) closeHeartbeats() {
	t.heartbeats.Lock()
	t.heartbeatsOff = true
	t.heartbeats.Unlock()
}

func (t *peerTransport) target(id raft.ServerID, addr raft.ServerAddress) raft.ServerAddress {
	return raftTarget(id, t.node.dialAddr(string(id), string(addr)))
}

// AppendEntriesPipeline implements raft.Transport.
func (t *peerTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	return t.NetworkTransport.AppendEntriesPipeline(id, t.target(id, target))
}

// AppendEntries implements raft.Transport.
func (t *peerTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return t.NetworkTransport.AppendEntries(id, t.target(id, target), args, resp)
}

// RequestVote implements raft.Transport.
func (t *peerTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return t.NetworkTransport.RequestVote(id, t.target(id, target), args, resp)
}

// RequestPreVote implements raft.WithPreVote.
func (t *peerTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.NetworkTransport.RequestPreVote(id, t.target(id, target), args, resp)
}

// InstallSnapshot implements raft.Transport.
func (t *peerTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	return t.NetworkTransport.InstallSnapshot(id, t.target(id, target), args, resp, data)
}

// TimeoutNow implements raft.Transport. Unlike the other RPCs, which raft's loops repeat, one
// failed TimeoutNow fails a whole leadership transfer (and spends it for the term, see
// transferLeadership). The NetworkTransport sends it on a pooled connection, which may have died
// since it was last used (a link cut and healed, a peer restarted) and then fails at once: the
// peer closed it and never read the request (CI saw "EOF" so, right after a partition healed). So
// a broken connection is retried, until the pool's idle ones are used up and one is dialled
// fresh. Should a peer have read the request after all, a second one costs it an election more,
// to the same end.
func (t *peerTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	target = t.target(id, target)
	var err error
	for range raftConnPool + 1 {
		if err = t.NetworkTransport.TimeoutNow(id, target, args, resp); !brokenConn(err) {
			break
		}
	}
	return err
}

// brokenConn reports whether err is a connection the peer had closed: it ended before an answer
// or refused the write. A refused dial or a timeout is not one.
func brokenConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
