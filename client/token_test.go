package client

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestSDKRefreshesTokenBeforeExpiry: with a TokenSource handing out 3-second tokens, one
// connection lives through several of them — the SDK refreshes each ahead of its expiry on the
// control stream — and keeps sending; without refreshes the server would have closed it at the
// first expiry.
func TestSDKRefreshesTokenBeforeExpiry(t *testing.T) {
	srv := syncdtest.Start(t, func(c *syncd.Config) { c.Shards = 2 })
	var calls atomic.Int32
	source := func(context.Context) (string, error) {
		calls.Add(1)
		return srv.MintToken("alice", "phone", 3*time.Second)
	}
	logs := newRecordHandler()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, Config{Addr: srv.Addr().String(), TokenSource: source, Device: "phone", Fingerprint: srv.Fingerprint(),
		StoreDir: t.TempDir(), Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(7 * time.Second) // past two expiries of a token that was not refreshed
	if slices.Contains(logs.messages(), "connection ended") {
		t.Fatalf("the connection ended (SDK log: %q)", logs.messages())
	}
	if n := calls.Load(); n < 3 {
		t.Fatalf("TokenSource called %d times in 7 s of 3-second tokens", n)
	}
	id, err := c.Send("d:alice:bob", "bob", []byte("still here"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if e := nextEvent[StatusEvent](t, c, 10*time.Second); e.ClientMsgID == id {
			if e.Status != StatusSent {
				t.Fatalf("send after the refreshes: %+v", e)
			}
			break
		}
	}
}

// TestSDKHonoursRetryAfterOfAClose: a refusal whose Error frame is lost still carries its
// retry-after in the connection close (PROTOCOL §2): Dial returns it, and the reconnect loop
// waits at least that long before trying again, although its own backoff would try sooner.
func TestSDKHonoursRetryAfterOfAClose(t *testing.T) {
	srv := syncdtest.Start(t, func(c *syncd.Config) { c.Shards, c.MaxConnectionsPerUser = 2, 1 })
	raw := func(device string) *prototest.Conn {
		tok, _ := srv.MintToken("alice", device, time.Hour)
		conn := prototest.Dial(t, srv.Addr().String(), srv.Fingerprint())
		control, f := prototest.Handshake(t, conn, tok, device)
		if _, ok := f.(*proto.Welcome); !ok {
			conn.CloseWithError(0, "")
			return nil
		}
		return &prototest.Conn{T: t, QUIC: conn, Control: control}
	}
	laptop := raw("laptop") // the user's one connection
	tok, _ := srv.MintToken("alice", "phone", time.Hour)
	cfg := Config{Addr: srv.Addr().String(), Token: tok, Device: "phone", Fingerprint: srv.Fingerprint(), StoreDir: t.TempDir(),
		Logger: syncdtest.Logger(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Dial(ctx, cfg)
	var pe *proto.Error
	if !errors.As(err, &pe) || pe.Code != proto.CodeTooManyConnections || pe.RetryAfterMs != 5000 {
		t.Fatalf("Dial while the user's connection is taken: %v, want too_many_connections with retry_after_ms 5000", err)
	}
	laptop.QUIC.CloseWithError(0, "")
	var c *Client
	testkit.WaitTrue(t, 10*time.Second, "the phone to connect once the laptop left", func() bool {
		c, err = Dial(ctx, cfg)
		return err == nil
	})
	defer c.Close()
	nextEvent[SyncedEvent](t, c, 10*time.Second)

	// Drop the phone's connection and take the user's slot before its first reconnect (at
	// 500-750 ms): that one is refused with retry_after_ms 5000.
	c.curMu.Lock()
	c.cur.q.CloseWithError(0, "test: connection lost")
	c.curMu.Unlock()
	var tablet *prototest.Conn
	testkit.WaitTrue(t, 5*time.Second, "the tablet to take the slot", func() bool { tablet = raw("tablet"); return tablet != nil })
	took := time.Now()
	time.Sleep(time.Second) // the phone's first reconnect has been refused by now
	tablet.QUIC.CloseWithError(0, "")
	nextEvent[SyncedEvent](t, c, 15*time.Second)
	// Its own backoff would have redialed within about 2.3 s of the slot being taken.
	if d := time.Since(took); d < 4500*time.Millisecond {
		t.Fatalf("reconnected %v after the refusal's start: the 5 s retry-after was not honoured", d)
	}
}
