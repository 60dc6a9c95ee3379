package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
)

// pinEither accepts a server certificate with either fingerprint: a real server and a proxy in
// front of it, standing for two nodes of one cluster.
func pinEither(a, b string) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, // the fingerprint check below replaces it
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) > 0 {
				if fp := proto.Fingerprint(raw[0]); fp == a || fp == b {
					return nil
				}
			}
			return errors.New("certificate of neither node")
		}}
}

// TestSDKMovesOnFromAStaleNode: the node the SDK is connected to says Stale instead of
// heartbeats (a proxy turns the real server's heartbeats into Stale, as a node cut off from its
// shard's leader sends them). The SDK reports StaleEvent and not SyncedEvent there, keeps the
// stream for StaleFailover, then reconnects through the next address of Config.Addrs, where it
// syncs and gets a message sent meanwhile.
func TestSDKMovesOnFromAStaleNode(t *testing.T) {
	srv := syncdtest.Start(t, func(c *syncd.Config) { c.Shards = 2 })
	proxy := prototest.NewProxy(t, srv.Addr().String(), srv.Fingerprint(), func(f proto.Frame) proto.Frame {
		if hb, ok := f.(*proto.Heartbeat); ok {
			return &proto.Stale{Epoch: hb.Epoch, Head: hb.Head, UnheardMs: 3000}
		}
		return f
	})
	token, err := srv.MintToken("bob", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	bob, err := Dial(ctx, Config{Addr: proxy.Addr(), Addrs: []string{srv.Addr().String()}, Token: token, Device: "phone",
		TLS: pinEither(proxy.Fingerprint(), srv.Fingerprint()), StoreDir: t.TempDir(), Logger: syncdtest.Logger(t),
		StaleFailover: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer bob.Close()

	stale := nextEvent[StaleEvent](t, bob, 10*time.Second)
	if stale.Unheard != 3*time.Second {
		t.Fatalf("StaleEvent %+v, want the frame's 3 s unheard", stale)
	}
	staleAt := time.Since(start)
	synced := nextEvent[SyncedEvent](t, bob, 10*time.Second) // only from the honest node
	took := time.Since(start) - staleAt
	if took < time.Second || proxy.Accepted() != 1 {
		t.Fatalf("synced %v after the StaleEvent, %d connections through the stale node; want after StaleFailover (1 s), one", took, proxy.Accepted())
	}
	t.Logf("StaleEvent after %v, SyncedEvent (%+v) %v later", staleAt, synced, took)

	tokA, err := srv.MintToken("alice", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	alice := prototest.Connect(t, srv.Addr().String(), srv.Fingerprint(), tokA, "alice", "phone")
	alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "hi", Body: []byte("hi"), Peer: "bob"})
	if e := nextEvent[EntryEvent](t, bob, 10*time.Second); string(e.Entry.Body) != "hi" {
		t.Fatalf("entry %+v, want alice's message", e.Entry)
	}
}

// TestSDKMovesOnFromANodeRefusingSends: the node the SDK is on answers every send with
// unavailable (a proxy turns the real server's Acks into that answer, as a node that cannot reach
// the shard's leader gives it). After two such answers in a row the SDK reconnects through the
// next address and the resend — same client_msg_id, so the server's dedup answers the original
// Ack — is acknowledged there.
func TestSDKMovesOnFromANodeRefusingSends(t *testing.T) {
	srv := syncdtest.Start(t, func(c *syncd.Config) { c.Shards = 2 })
	proxy := prototest.NewProxy(t, srv.Addr().String(), srv.Fingerprint(), func(f proto.Frame) proto.Frame {
		if a, ok := f.(*proto.Ack); ok {
			return &proto.Error{ID: a.ID, Code: proto.CodeUnavailable, Message: "no leader heard from within the lease", RetryAfterMs: 100}
		}
		return f
	})
	token, err := srv.MintToken("bob", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bob, err := Dial(ctx, Config{Addr: proxy.Addr(), Addrs: []string{srv.Addr().String()}, Token: token, Device: "phone",
		TLS: pinEither(proxy.Fingerprint(), srv.Fingerprint()), StoreDir: t.TempDir(), Logger: syncdtest.Logger(t),
		StaleFailover: -1, Retry: []time.Duration{200 * time.Millisecond, 200 * time.Millisecond, 200 * time.Millisecond, time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer bob.Close()
	cmid, err := bob.Send("d:alice:bob", "alice", []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	st := nextEvent[StatusEvent](t, bob, 10*time.Second)
	q, _, _ := bob.Lookup(cmid)
	if st.Status != StatusSent || q.Attempts != 3 || proxy.Accepted() != 1 {
		t.Fatalf("status %v after %d attempts, %d connections through the refusing node; want sent at the third attempt, one connection",
			st.Status, q.Attempts, proxy.Accepted())
	}
}
