package test

// End-to-end tests: the real server (syncd.Server: QUIC, shards, fan-out) and the real Go SDK
// (client), in one process, over loopback.

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
	"github.com/syncd-dev/syncd/test/testkit"
)

func quiet(t *testing.T) *slog.Logger { return syncdtest.Logger(t) }

func startServer(t *testing.T) *syncd.Server { return syncdtest.Start(t, nil) }

func startServerWith(t *testing.T, tweak func(*syncd.Config)) *syncd.Server {
	return syncdtest.Start(t, tweak)
}

// device is a client with its events drained into a log the test can poll.
type device struct {
	*client.Client
	statuses chan client.StatusEvent
	rebases  chan client.RebaseEvent
	epochs   chan client.EpochEvent

	mu      sync.Mutex
	arrived map[string][]proto.Position // each conversation's conv_seqs, in the order stored
}

// arrivals returns the conv_seqs of conv's entries in the order the device stored them.
func (d *device) arrivals(conv string) []proto.Position {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.arrived[conv])
}

func dialDevice(t *testing.T, srv *syncd.Server, user, dev, dir string) *device {
	t.Helper()
	return dialDeviceAt(t, srv, srv.Addr().String(), user, dev, dir)
}

// dialDeviceAt connects a device to srv through addr (the server itself, or a relay); more
// addresses of the same cluster, if given, are the SDK's fallbacks (Config.Addrs).
func dialDeviceAt(t *testing.T, srv *syncd.Server, addr, user, dev, dir string, more ...string) *device {
	t.Helper()
	token, err := srv.MintToken(user, dev, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return dialDeviceWith(t, client.Config{Addr: addr, Addrs: more, Token: token, Device: dev,
		Fingerprint: srv.Fingerprint(), StoreDir: dir, Logger: quiet(t)})
}

// dialDeviceWith connects a device configured by cfg (a server of another process: its token
// and fingerprint) and collects its events.
func dialDeviceWith(t *testing.T, cfg client.Config) *device {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := &device{Client: c, statuses: make(chan client.StatusEvent, 1024), rebases: make(chan client.RebaseEvent, 16),
		epochs: make(chan client.EpochEvent, 16), arrived: map[string][]proto.Position{}}
	go func() {
		for e := range c.Events() {
			switch e := e.(type) {
			case client.EntryEvent:
				d.mu.Lock()
				d.arrived[e.Entry.Conv] = append(d.arrived[e.Entry.Conv], e.Entry.ConvSeq)
				d.mu.Unlock()
			case client.StatusEvent:
				if e.Status == client.StatusSent || e.Status == client.StatusFailed {
					d.statuses <- e // the outbox's outcomes; delivered and read steps are not this test's
				}
			case client.RebaseEvent:
				d.rebases <- e
			case client.EpochEvent:
				d.epochs <- e
			}
		}
	}()
	return d
}

// bodies returns the bodies of conv's messages stored on d, recalled ones marked.
func bodies(t *testing.T, d *device, conv string) []string {
	t.Helper()
	msgs, err := d.Messages(conv)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range msgs {
		b := string(m.Body)
		if m.Recalled {
			b += " (recalled)"
		}
		out = append(out, b)
	}
	return out
}

func waitBodies(t *testing.T, conv string, want []string, devices ...*device) {
	t.Helper()
	testkit.WaitTrue(t, 20*time.Second, fmt.Sprintf("every device to store %v", want), func() bool {
		for _, d := range devices {
			if !slices.Equal(bodies(t, d, conv), want) {
				return false
			}
		}
		return true
	})
}

// TestDevicesExchangeMessagesReceiptsRecalls: two users, three devices; a message, a receipt and a
// recall reach every device's store, in conversation order, exactly once.
func TestDevicesExchangeMessagesReceiptsRecalls(t *testing.T) {
	srv := startServer(t)
	alice := dialDevice(t, srv, "alice", "phone", t.TempDir())
	defer alice.Close()
	bobPhone := dialDevice(t, srv, "bob", "phone", t.TempDir())
	defer bobPhone.Close()
	bobLaptop := dialDevice(t, srv, "bob", "laptop", t.TempDir())
	defer bobLaptop.Close()

	const conv = "d:alice:bob"
	if _, err := alice.Send(conv, "bob", []byte("hi bob")); err != nil {
		t.Fatal(err)
	}
	var first *proto.Ack
	select {
	case s := <-alice.statuses:
		if s.Status != client.StatusSent {
			t.Fatalf("first send: %+v", s)
		}
		first = s.Ack
	case <-time.After(10 * time.Second):
		t.Fatal("no status for the first send")
	}
	if _, err := bobPhone.Send(conv, "alice", []byte("hi alice")); err != nil {
		t.Fatal(err)
	}
	waitBodies(t, conv, []string{"hi bob", "hi alice"}, alice, bobPhone, bobLaptop)
	if _, err := bobLaptop.MarkRead(conv, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Recall(conv, first.MsgID); err != nil {
		t.Fatal(err)
	}
	waitBodies(t, conv, []string{"hi bob (recalled)", "hi alice"}, alice, bobPhone, bobLaptop)
	testkit.WaitTrue(t, 10*time.Second, "alice's phone to store bob's receipt", func() bool {
		m, err := alice.ReadMark(conv, "bob")
		return err == nil && m == 1
	})
	queue, err := alice.Outbox() // what an app shows after a restart: each mutation's status
	if err != nil || len(queue) != 2 || queue[1].Kind != proto.KindRecall {
		t.Fatalf("alice's outbox: %+v %v", queue, err)
	}
	// Bob read it: an app shows the read step for it (a receipt covers it).
	if q, ok, err := alice.Lookup(queue[0].ClientMsgID); err != nil || !ok || q.Status != client.StatusRead || q.Ack.MsgID != first.MsgID {
		t.Fatalf("alice's first message: %+v %v %v", q, ok, err)
	}
}

// TestOutboxSurvivesAppRestart: an app queues messages and is closed before they are all sent;
// the next run sends the rest, and every message arrives exactly once, in order.
func TestOutboxSurvivesAppRestart(t *testing.T) {
	srv := startServer(t)
	dir := t.TempDir()
	bob := dialDevice(t, srv, "bob", "phone", t.TempDir())
	defer bob.Close()
	alice := dialDevice(t, srv, "alice", "phone", dir)
	var want []string
	for i := range 20 {
		body := fmt.Sprint("m", i)
		want = append(want, body)
		if _, err := alice.Send("d:alice:bob", "bob", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	alice.Close() // the app is killed with messages still SENDING
	alice = dialDevice(t, srv, "alice", "phone", dir)
	defer alice.Close()
	waitBodies(t, "d:alice:bob", want, alice, bob)
}
