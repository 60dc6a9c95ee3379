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
	// Every message; the delivered entries bob's acks bring come after them.
	if got := pullUntilIgnoringReports(t, n, bob...); got[0].Seq != 1 || got[n-1].Seq != n {
		t.Fatalf("pulled %d..%d", got[0].Seq, got[n-1].Seq)
	}
}

// TestPullPrintsDeliveryReports: with delivery reports on (the default), once a device of bob has
// stored alice's message, her log gets a delivered entry (PROTOCOL §8.8), and pull prints it as
// it prints any entry: kind delivered, from bob, up_to the conv_seq his devices stored.
func TestPullPrintsDeliveryReports(t *testing.T) {
	t.Setenv("SYNCD_TOKEN", "")
	srv, dataDir := startServer(t)
	device := func(user, device string) []string {
		return []string{"-addr", srv.Addr().String(), "-token", mustToken(t, dataDir, user, device), "-data-dir", dataDir, "-store", t.TempDir()}
	}
	code, out, _ := syncctl(t, append([]string{"send", "-conv", "d:alice:bob", "-peer", "bob", "-body", "hi bob"}, device("alice", "phone")...)...)
	if code != 0 {
		t.Fatalf("send: exit %d", code)
	}
	sent := decodeJSON[sentJSON](t, out)
	// bob's phone stores the message and acks it: that is what makes it delivered.
	pullUntilIgnoringReports(t, 1, device("bob", "phone")...)

	// alice's log: her message, then the report (her own devices' acks report nothing: the
	// conversation holds no message from bob).
	got := pullUntil(t, 2, device("alice", "laptop")...)
	if m := got[0]; m.Kind != "message" || m.MsgID != sent.MsgID || m.Seq != 1 {
		t.Fatalf("pull printed %+v first; want alice's message", m)
	}
	d := got[1]
	if d.Kind != "delivered" || d.Seq != 2 || d.Conv != "d:alice:bob" || d.ConvSeq != sent.ConvSeq+1 || d.From != "bob" ||
		d.UpTo != sent.ConvSeq || !proto.MsgID(d.MsgID).Valid() || d.Body != "" || d.BodyBase64 != "" {
		t.Fatalf("pull printed the report as %+v; want kind delivered from bob, up_to %d", d, sent.ConvSeq)
	}
	if _, err := time.Parse(time.RFC3339Nano, d.TS); err != nil {
		t.Fatalf("ts %q: %v", d.TS, err)
	}
	// trace names the report's up_to for what it is: stored, not read.
	code, out, _ = syncctl(t, "trace", "-admin", srv.AdminAddr().String(), "-data-dir", dataDir, d.MsgID)
	if want := fmt.Sprintf(", stored up to %d\n", sent.ConvSeq); code != 0 || !strings.Contains(out, "entry: delivered from bob at ") || !strings.Contains(out, want) {
		t.Fatalf("trace of the report: exit %d, printed %q; want its entry, %q", code, out, want)
	}
}
