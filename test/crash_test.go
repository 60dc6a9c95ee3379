package test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/test/proccluster"
	"github.com/syncd-dev/syncd/test/testkit"
)

// buildServer builds cmd/syncd into a temporary directory (proccluster.Build) and returns the
// binary's path, for proccluster.Config.Syncd.
func buildServer(t *testing.T) string {
	t.Helper()
	bins, err := proccluster.Build(t.Context(), proccluster.BuildConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("build syncd: %v", err)
	}
	return bins.Syncd
}

func freeUDP(t *testing.T) string {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}

func freeTCP(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestServerKill9UnderTraffic: two devices send to each other continuously while the server
// process (a one-node proccluster) is killed with SIGKILL three times and restarted on its data.
// Every message ends up in both users' stores exactly once, in the order each sender queued it:
// nothing acked is lost, and the outbox's retries (same client_msg_id) never duplicate.
func TestServerKill9UnderTraffic(t *testing.T) {
	skipShort(t)
	if runtime.GOOS != "linux" {
		t.Skip("needs SIGKILL semantics of Linux")
	}
	c, err := proccluster.New(proccluster.Config{Syncd: buildServer(t), Dir: t.TempDir(), Nodes: 1, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	node := c.Node(0)
	// Cleanups run after the deferred client Closes: the server outlives its clients, then must
	// exit cleanly on SIGTERM.
	t.Cleanup(func() {
		if err := c.Stop(10 * time.Second); err != nil {
			t.Errorf("server exit after SIGTERM: %v", err)
		}
		if t.Failed() {
			t.Logf("%s's log:\n%s", node.ID, node.LogTail(100))
		}
	})
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := c.WaitReady(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	devices := map[string]*device{}
	for _, user := range []string{"alice", "bob"} {
		token, err := c.Token(user, "phone", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		d := dialDeviceWith(t, client.Config{Addr: node.ClientAddr, Token: token, Device: "phone", Fingerprint: c.Fingerprint(),
			StoreDir: t.TempDir(), Logger: quiet(t)})
		defer d.Close()
		devices[user] = d
	}

	const perSender = 60
	var wg sync.WaitGroup
	want := map[string][]string{}
	peers := map[string]string{"alice": "bob", "bob": "alice"}
	for sender := range peers {
		for i := range perSender {
			want[sender] = append(want[sender], fmt.Sprintf("%s-%d", sender, i))
		}
	}
	for sender, peer := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, body := range want[sender] {
				if _, err := devices[sender].Send("d:alice:bob", peer, []byte(body)); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	for range 3 { // kill -9 in the middle of the traffic, restart on the same data and ports
		time.Sleep(400 * time.Millisecond)
		if err := node.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := node.Start(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()

	for _, d := range devices {
		for range perSender { // every queued message of this device gets Sent, none Failed
			select {
			case s := <-d.statuses:
				if s.Status != client.StatusSent {
					t.Fatalf("%s: %+v", d.User(), s)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("%s: messages still unsent", d.User())
			}
		}
	}
	// Both stores hold all 120 messages once each, each sender's in its order.
	testkit.Wait(t, 30*time.Second, "both stores to hold every message once, in order", func() (bool, string) {
		for _, d := range devices {
			if got := bodies(t, d, "d:alice:bob"); !sameMessages(got, want) {
				return false, fmt.Sprintf("%s's store: %d messages %v", d.User(), len(got), got)
			}
		}
		return true, ""
	})
}

// sameMessages reports whether got holds exactly the messages of want, each once, with each
// sender's messages in their order (senders interleave freely).
func sameMessages(got []string, want map[string][]string) bool {
	next := map[string]int{}
	for _, b := range got {
		sender, _, _ := strings.Cut(b, "-")
		i := next[sender]
		if i >= len(want[sender]) || want[sender][i] != b {
			return false
		}
		next[sender] = i + 1
	}
	for s, w := range want {
		if next[s] != len(w) {
			return false
		}
	}
	return true
}
