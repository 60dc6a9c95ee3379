package test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/syncd/auth"
	"github.com/syncd-dev/syncd/test/proccluster"
	"github.com/syncd-dev/syncd/test/testkit"
)

// serverProcess runs cmd/syncd as a real process, so a crash is a real SIGKILL.
type serverProcess struct {
	t                   *testing.T
	bin, dir            string
	listen, raft, admin string
	cmd                 *exec.Cmd
	stderr              *strings.Builder
}

// buildServer builds cmd/syncd into a temporary directory (proccluster.Build) and returns the
// binary's path.
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

func (p *serverProcess) start() {
	p.t.Helper()
	p.stderr = &strings.Builder{}
	p.cmd = exec.Command(p.bin, "-data-dir", p.dir, "-listen", p.listen, "-web-listen", "off", "-raft-addr", p.raft, "-admin", p.admin, "-shards", "4")
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
}

func (p *serverProcess) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.cmd.Wait()
}

// TestServerKill9UnderTraffic: two devices send to each other continuously while the server
// process is killed with SIGKILL three times and restarted on its data. Every message ends up in
// both users' stores exactly once, in the order each sender queued it: nothing acked is lost, and
// the outbox's retries (same client_msg_id) never duplicate.
func TestServerKill9UnderTraffic(t *testing.T) {
	skipShort(t)
	if runtime.GOOS != "linux" {
		t.Skip("needs SIGKILL semantics of Linux")
	}
	dir := t.TempDir()
	secret, err := auth.LoadOrCreateSecret(dir) // what the server will find on its first start
	if err != nil {
		t.Fatal(err)
	}
	_, fingerprint, err := auth.SelfSignedCert(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &serverProcess{t: t, bin: buildServer(t), dir: dir, listen: freeUDP(t), raft: freeTCP(t), admin: freeTCP(t)}
	p.start()
	defer func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		if err := p.cmd.Wait(); err != nil {
			t.Errorf("server exit after SIGTERM: %v\n%s", err, p.stderr)
		}
	}()

	devices := map[string]*device{}
	for _, user := range []string{"alice", "bob"} {
		token, err := auth.MintToken(secret, auth.TokenClaims{User: user, Device: "phone", Expires: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		var c *client.Client
		store := t.TempDir()
		testkit.Wait(t, 20*time.Second, "dial "+user, func() (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			c, err = client.Dial(ctx, client.Config{Addr: p.listen, Token: token, Device: "phone", Fingerprint: fingerprint,
				StoreDir: store, Logger: quiet(t)})
			if err != nil {
				return false, fmt.Sprintf("%v\n%s", err, p.stderr)
			}
			return true, ""
		})
		d := &device{Client: c, statuses: make(chan client.StatusEvent, 4096), rebases: make(chan client.RebaseEvent, 16)}
		go func() {
			for e := range c.Events() {
				if s, ok := e.(client.StatusEvent); ok && (s.Status == client.StatusSent || s.Status == client.StatusFailed) {
					d.statuses <- s // the outbox's outcomes; delivered and read steps are not this test's
				}
			}
		}()
		defer c.Close()
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
		p.kill()
		p.start()
	}
	wg.Wait()

	for _, d := range devices {
		for range 2 * perSender / 2 { // every queued message of this device gets Sent, none Failed
			select {
			case s := <-d.statuses:
				if s.Status != client.StatusSent {
					t.Fatalf("%s: %+v", d.User(), s)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("%s: messages still unsent\n%s", d.User(), p.stderr)
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
	if t.Failed() {
		fmt.Fprintln(os.Stderr, p.stderr)
	}
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
