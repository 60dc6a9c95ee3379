package main

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
)

// TestPullFailsWhenSyncKeepsFailing: when every sync stream fails (here frames beyond the
// max_frame the Welcome announced: a proxy lowers the announcement below the batches the server
// sends), pull does not exit 0 printing nothing once -wait has passed, as if caught up: it exits
// 1 with the error once the SDK reports the failure as persistent. Once the frames fit, the same
// store pulls everything.
func TestPullFailsWhenSyncKeepsFailing(t *testing.T) {
	t.Setenv("SYNCD_TOKEN", "")
	srv, dataDir := startServer(t)
	tokA, err := srv.MintToken("alice", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	alice := prototest.Connect(t, srv.Addr().String(), srv.Fingerprint(), tokA, "alice", "phone")
	const n = 40 // of 10 KB: batches far beyond 128 KiB (and lines pullUntil can scan)
	for i := range n {
		alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: fmt.Sprint("m", i), Body: []byte(strings.Repeat("x", 10_000)), Peer: "bob"})
	}
	var lie atomic.Bool
	lie.Store(true)
	proxy := prototest.NewProxy(t, srv.Addr().String(), srv.Fingerprint(), func(f proto.Frame) proto.Frame {
		if w, ok := f.(*proto.Welcome); ok && lie.Load() {
			w.Limits.MaxFrame = proto.MinFrameLimit
		}
		return f
	})
	bob := []string{"-addr", proxy.Addr(), "-token", mustToken(t, dataDir, "bob", "laptop"), "-fingerprint", proxy.Fingerprint(), "-store", t.TempDir()}

	began := time.Now()
	code, out, errOut := syncctl(t, append([]string{"pull", "-wait", "300ms"}, bob...)...)
	if code != exitFail || out != "" || !strings.Contains(errOut, "sync failed 3 times in a row") || !strings.Contains(errOut, "frame too large") {
		t.Fatalf("pull with failing sync: exit %d, stdout %q, stderr %q; want exit 1, nothing printed, the error", code, out, errOut)
	}
	if took := time.Since(began); took < time.Second {
		t.Fatalf("pull failed after %v: before the SDK's three attempts with backoff", took)
	}

	lie.Store(false)
	if got := pullUntil(t, n, bob...); got[0].Seq != 1 || got[n-1].Seq != n {
		t.Fatalf("pulled %d..%d", got[0].Seq, got[n-1].Seq)
	}
}
