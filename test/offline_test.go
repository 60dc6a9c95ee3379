package test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/test/proccluster"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestSDKOpenedBeforeTheNodeStarts (issue #23 §3): two apps open their clients (client.Open)
// before any syncd process exists — the cluster is laid out, nothing runs. The sender queues
// messages, which wait in its durable outbox, and the online-only queries say ErrOffline. Then
// the syncd process starts, late: both clients connect by themselves, the outbox is delivered,
// and the recipient's device stores every queued message exactly once, in the order queued, and
// reports each once (EntryEvent).
func TestSDKOpenedBeforeTheNodeStarts(t *testing.T) {
	skipShort(t)
	c, err := proccluster.New(proccluster.Config{Syncd: buildServer(t), Dir: t.TempDir(), Nodes: 1, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(10 * time.Second); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	node := c.Node(0)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s's log:\n%s", node.ID, node.LogTail(50))
		}
	})
	open := func(user string) *client.Client {
		t.Helper()
		token, err := c.Token(user, "phone", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := client.Open(client.Config{Addr: node.ClientAddr, Token: token, Device: "phone", Fingerprint: c.Fingerprint(),
			StoreDir: t.TempDir(), Logger: quiet(t)})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	alice := open("alice")
	defer alice.Close()
	bob := open("bob")
	conv := proto.DirectConv("alice", "bob")

	// Every entry bob's device reports, as it reports them.
	var mu sync.Mutex
	var reported []string
	var events sync.WaitGroup
	events.Go(func() {
		for ev := range bob.Events() {
			if e, ok := ev.(client.EntryEvent); ok && e.Entry.Conv == conv && e.Entry.Kind == proto.KindMessage {
				mu.Lock()
				reported = append(reported, string(e.Entry.Body))
				mu.Unlock()
			}
		}
	})
	defer func() {
		bob.Close() // closes Events: the reader ends
		events.Wait()
	}()

	const n = 30
	var want, cmids []string
	for i := range n {
		body := fmt.Sprint("m", i)
		id, err := alice.Send(conv, "bob", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		want, cmids = append(want, body), append(cmids, id)
	}
	out, err := alice.Outbox()
	if err != nil || len(out) != n {
		t.Fatalf("alice's outbox: %d items, %v; want %d", len(out), err, n)
	}
	for _, q := range out {
		if q.Status != client.StatusSending {
			t.Fatalf("queued with no server: %+v", q)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := alice.History(ctx, conv, 0, 10); !errors.Is(err, client.ErrOffline) {
		t.Fatalf("History with no server: %v, want ErrOffline", err)
	}
	if node.Starts() != 0 || alice.Connected() || bob.Connected() {
		t.Fatal("a syncd process ran before the messages were queued")
	}

	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	testkit.WaitTrue(t, time.Minute, "bob's device to store every queued message", func() bool {
		return len(bodies(t, &device{Client: bob}, conv)) >= n
	})
	if got := bodies(t, &device{Client: bob}, conv); !slices.Equal(got, want) {
		t.Fatalf("bob's device stored %q; want %q: each queued message once, in order", got, want)
	}
	// The device reports an entry after storing it, and the reader above takes the report a
	// moment later: wait for as many reports as stored entries, then compare (a duplicate or a
	// reordering still fails).
	var got []string
	testkit.WaitTrue(t, time.Minute, "bob's device to report every stored message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		got = slices.Clone(reported)
		return len(got) >= n
	})
	if !slices.Equal(got, want) {
		t.Fatalf("bob's device reported %q; want %q", got, want)
	}
	var last proto.Position
	for i, id := range cmids {
		q, ok, err := alice.Lookup(id)
		// Sent, or already further: bob's device has stored every message, so a delivered
		// report may have come back by now.
		sent := q.Status == client.StatusSent || q.Status == client.StatusDelivered || q.Status == client.StatusRead
		if err != nil || !ok || !sent || q.Ack == nil || q.Ack.ConvSeq <= last {
			t.Fatalf("alice's %s: %+v %v %v; want sent (or delivered, read) after conv_seq %d", want[i], q, ok, err, last)
		}
		last = q.Ack.ConvSeq
	}
}
