package test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/test/proccluster"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestFullDiskProcess runs a real syncd process on a real, small disk (a 256 MiB tmpfs; needs
// root, skipped otherwise) and fills it. Below min_free_disk the node refuses sends with
// unavailable and a retry-after, says why in /readyz and its log (once), and keeps serving what
// it acknowledged. Restarted on the full disk, it exits within seconds with a message naming
// the directory, the free space and the setting, in a few lines (it used to hang inside
// pebble.Open, logging 45,000 lines in 70 s). With space freed it starts, and holds everything
// it acknowledged.
func TestFullDiskProcess(t *testing.T) {
	skipShort(t)
	mnt := testkit.Tmpfs(t, 256<<20)
	data := filepath.Join(mnt, "n1")
	c, err := proccluster.New(proccluster.Config{Syncd: buildServer(t), Dir: t.TempDir(), Nodes: 1, Shards: 2,
		Args: []string{"-data-dir", data, "-min-free-disk", strconv.Itoa(40 << 20)}})
	if err != nil {
		t.Fatal(err)
	}
	n := c.Node(0)
	t.Cleanup(func() { c.Kill() })
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	connect := func(user, device string) *prototest.Conn {
		token, err := c.Token(user, device, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return prototest.Connect(t, n.ClientAddr, c.Fingerprint(), token, user, device)
	}
	alice := connect("alice", "phone")
	var acked []proto.MsgID
	for i := range 5 {
		a := alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "m" + strconv.Itoa(i),
			Body: []byte("hello " + strconv.Itoa(i)), Peer: "bob"})
		acked = append(acked, a.MsgID)
	}

	// Below the watermark: writes refused, reads served, the reason in /readyz and the log.
	filler := filepath.Join(mnt, "filler")
	testkit.Fill(t, filler, 24<<20)
	testkit.Wait(t, 10*time.Second, "/readyz to report the disk", func() (bool, string) {
		err := n.Ready(ctx)
		return err != nil && strings.Contains(err.Error(), "disk space low"), "/readyz: " + errString(err)
	})
	e, ok := alice.Do(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "late", Body: []byte("late")}).(*proto.Error)
	if !ok || e.Code != proto.CodeUnavailable || e.RetryAfterMs != 10_000 {
		t.Fatalf("send with the disk low: %#v, want unavailable with retry_after_ms 10000", e)
	}
	bob := connect("bob", "laptop")
	bob.StartSync(0, 0)
	checkEntries(t, bob.Entries(0, len(acked)), acked)
	if got := strings.Count(n.LogTail(200), "disk space low: refusing new writes"); got != 1 {
		t.Errorf("the node logged the low disk %d times, want once:\n%s", got, n.LogTail(50))
	}
	if err := n.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	// Restart on the full disk: it exits at once, saying why, in a few lines.
	testkit.Fill(t, filler, 0)
	began := time.Now()
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.Wait(t, 10*time.Second, "the node to give up starting on the full disk", func() (bool, string) {
		return !n.Running(), n.LogTail(5)
	})
	t.Logf("start on the full disk ended after %v", time.Since(began))
	tail := n.LogTail(400)
	run := tail[strings.LastIndex(tail, "=== proccluster: start #"):]
	for _, w := range []string{"not starting", filepath.Join(data, "db"), "0 B free", "min_free_disk"} {
		if !strings.Contains(run, w) {
			t.Errorf("the failed start's log lacks %q:\n%s", w, run)
		}
	}
	if lines := strings.Count(run, "\n"); lines > 10 {
		t.Errorf("the failed start logged %d lines:\n%s", lines, run)
	}

	// Space freed: it starts, with everything it acknowledged.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	bob = connect("bob", "tablet")
	bob.StartSync(0, 0)
	checkEntries(t, bob.Entries(0, len(acked)), acked)
	alice = connect("alice", "phone")
	alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "late", Body: []byte("late")})
	if err := c.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func checkEntries(t *testing.T, got []proto.Entry, want []proto.MsgID) {
	t.Helper()
	for i, e := range got {
		if e.MsgID != want[i] {
			t.Fatalf("entry %d of bob's log is %v, acked %v", i+1, e.MsgID, want[i])
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "ready"
	}
	return err.Error()
}
