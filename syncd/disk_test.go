package syncd

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestLowDiskRefusesWritesKeepsReads fills the disk under a server (a real tmpfs; needs root,
// skipped otherwise) below its min_free_disk: sends and group changes get Unavailable with a
// retry-after of lowDiskRetryAfter, while a resend of an acknowledged send gets its original ack,
// devices keep syncing what was acknowledged, queries answer, and /readyz and /metrics say why;
// once space is freed the same send is taken.
func TestLowDiskRefusesWritesKeepsReads(t *testing.T) {
	mnt := testkit.Tmpfs(t, 256<<20)
	ts := startServer(t, func(c *Config) { c.Dir, c.MinFreeDisk = filepath.Join(mnt, "data"), 40<<20 })
	alice := connect(t, ts, "alice", "phone")
	bob := connect(t, ts, "bob", "laptop")
	first := alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "m1", Body: []byte("hi bob"), Peer: "bob"})

	filler := filepath.Join(mnt, "filler")
	testkit.Fill(t, filler, 24<<20)
	testkit.WaitTrue(t, 5*time.Second, "the server to see its disk low", func() bool { return ts.Ready() != nil })
	if err := ts.Ready(); !strings.Contains(err.Error(), "disk space low") || !strings.Contains(err.Error(), "min_free_disk") {
		t.Fatalf("Ready() = %v, want the disk named as the reason", err)
	}
	admin := "http://" + ts.AdminAddr().String()
	if code, body := testkit.HTTP(t, http.MethodGet, admin+"/readyz"); code != http.StatusServiceUnavailable ||
		!strings.Contains(body, "disk space low") || !strings.Contains(body, filepath.Join(mnt, "data")) {
		t.Fatalf("/readyz with the disk low: %d %q", code, body)
	}
	if m := scrape(t, admin+"/metrics"); !strings.Contains(m, "syncd_disk_low 1") || !strings.Contains(m, "syncd_disk_free_bytes") {
		t.Errorf("metrics with the disk low lack syncd_disk_low 1 or syncd_disk_free_bytes")
	}

	second := &proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "m2", Body: []byte("still there?")}
	for _, req := range []proto.Frame{second,
		&proto.CreateGroup{ID: alice.ID(), Conv: "g:club", ClientMsgID: "g1", Members: []string{"bob"}}} {
		e, ok := alice.Do(req).(*proto.Error)
		if !ok || e.Code != proto.CodeUnavailable || e.RetryAfter() != lowDiskRetryAfter || !e.Code.Retryable() {
			t.Fatalf("%v with the disk low: %#v, want unavailable with retry_after_ms %d", req.FrameType(), e, lowDiskRetryAfter.Milliseconds())
		}
	}
	// A resend of the acknowledged send is answered with its original ack (issue 21: it was
	// refused like a new one), and nothing is written.
	again := alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "m1", Body: []byte("hi bob"), Peer: "bob"})
	if !again.Duplicate || again.MsgID != first.MsgID || again.ConvSeq != first.ConvSeq || again.Time != first.Time {
		t.Fatalf("resend of an acknowledged send with the disk low: %+v, want the original ack %+v", again, first)
	}
	// Reads go on: bob's device syncs alice's acknowledged message, and queries answer.
	bob.StartSync(0, 0)
	if got := bob.Entries(0, 1); got[0].MsgID != first.MsgID || string(got[0].Body) != "hi bob" {
		t.Fatalf("bob's sync with the disk low: %+v", got[0])
	}
	if h, ok := bob.Do(&proto.HeadCheck{ID: bob.ID()}).(*proto.Head); !ok || h.Head != 1 {
		t.Fatalf("head check with the disk low: %#v", h)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	testkit.WaitTrue(t, 5*time.Second, "the server to be ready again", func() bool { return ts.Ready() == nil })
	second.ID = alice.ID()
	if a := alice.Ack(second); a.ConvSeq != 2 || a.Duplicate {
		t.Fatalf("the refused send, retried once space is free: %+v", a)
	}
	if got := bob.Entries(1, 1); string(got[0].Body) != "still there?" {
		t.Fatalf("bob's sync after: %+v", got[0])
	}
}

// TestLowDiskErrorCode: a write refused for lack of disk space, here or at the leader, is
// Unavailable with a retry-after, and its message names no path of the server's.
func TestLowDiskErrorCode(t *testing.T) {
	for _, err := range []error{raftstore.ErrLowDisk, fmt.Errorf("deliver: %w (at the leader)", raftstore.ErrLowDisk)} {
		e := wireError(nil, 7, err)
		if e.ID != 7 || e.Code != proto.CodeUnavailable || e.RetryAfter() != lowDiskRetryAfter || strings.Contains(e.Message, "/") {
			t.Errorf("wireError(%v) = %+v", err, e)
		}
	}
	if e := wireError(nil, 1, raftstore.ErrNoShard); e.RetryAfterMs != 0 {
		t.Errorf("no shard: retry_after_ms %d, want none", e.RetryAfterMs)
	}
}
