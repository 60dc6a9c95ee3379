package test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/test/testkit"
)

// The child role of TestClientKill9MidSend: queue messages as fast as possible, printing each
// body once Send has returned (it is then durable in the outbox), until killed.
func clientKillChild() {
	env := func(k string) string { return os.Getenv("SYNCD_CLIENT_CHILD_" + k) }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	c, err := client.Dial(ctx, client.Config{Addr: env("ADDR"), Token: env("TOKEN"), Device: "phone",
		Fingerprint: env("FP"), StoreDir: env("STORE")})
	cancel()
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	go func() {
		for range c.Events() {
		}
	}()
	for i := 0; ; i++ {
		body := fmt.Sprint("k", i)
		if _, err := c.Send("d:alice:bob", "bob", []byte(body)); err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		fmt.Println("QUEUED", body)
		time.Sleep(5 * time.Millisecond)
	}
}

// TestClientKill9MidSend: an app process is killed with SIGKILL while it queues and sends
// messages; the next run of the app on the same store sends what was left, and the peer ends
// with every queued message exactly once, in order.
func TestClientKill9MidSend(t *testing.T) {
	skipShort(t)
	if os.Getenv("SYNCD_CLIENT_CHILD_ADDR") != "" {
		clientKillChild()
		return
	}
	if runtime.GOOS != "linux" {
		t.Skip("needs SIGKILL semantics of Linux")
	}
	srv := startServer(t)
	bob := dialDevice(t, srv, "bob", "phone", t.TempDir())
	defer bob.Close()
	store := t.TempDir()
	token, err := srv.MintToken("alice", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestClientKill9MidSend$")
	cmd.Env = append(os.Environ(), "SYNCD_CLIENT_CHILD_ADDR="+srv.Addr().String(), "SYNCD_CLIENT_CHILD_TOKEN="+token,
		"SYNCD_CLIENT_CHILD_FP="+srv.Fingerprint(), "SYNCD_CLIENT_CHILD_STORE="+store)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var queued []string
	sc := bufio.NewScanner(out)
	for len(queued) < 40 && sc.Scan() { // in this order: a Scan past the 40th line would drop a QUEUED line
		line := sc.Text()
		if strings.HasPrefix(line, "ERR") {
			t.Fatalf("child: %s", line)
		}
		if b, ok := strings.CutPrefix(line, "QUEUED "); ok {
			queued = append(queued, b)
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	for sc.Scan() { // whatever was printed before the kill was queued too
		if b, ok := strings.CutPrefix(sc.Text(), "QUEUED "); ok {
			queued = append(queued, b)
		}
	}
	cmd.Wait()

	alice := dialDevice(t, srv, "alice", "phone", store) // the app starts again on its store
	defer alice.Close()
	// The outbox sends in order, so once a new last message arrives everything queued before the
	// kill has been delivered.
	if _, err := alice.Send("d:alice:bob", "bob", []byte("end")); err != nil {
		t.Fatal(err)
	}
	var got []string
	testkit.WaitTrue(t, 30*time.Second, "the message queued after the restart to arrive", func() bool {
		got = bodies(t, bob, "d:alice:bob")
		return len(got) > 0 && got[len(got)-1] == "end"
	})
	// A message queued right before the kill may be stored without its QUEUED line: it arrives
	// once, after the listed ones.
	if len(got) < len(queued)+1 || len(got) > len(queued)+2 || !slices.Equal(got[:len(queued)], queued) {
		t.Fatalf("bob's store %v, want the %d queued messages once each, in order, then end", got, len(queued))
	}
	waitBodies(t, "d:alice:bob", got, alice, bob) // the sender's own store agrees
}
