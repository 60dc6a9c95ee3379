package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/test/proccluster"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestBackupRestore (issue #26, 2): a three-node cluster is backed up with syncctl backup while two
// senders keep sending, then lost whole (every process killed, every data directory deleted). A new
// cluster is restored from the backup with syncd restore on its first node, which serves, and two
// more nodes join it. Then:
//   - every message acknowledged before the backup began is in the restored cluster: a new device of
//     each receiver pulls them all, once each, in order;
//   - each old device of the senders' conversations, reconnecting with its store (its cursors point
//     past what the backup holds of its log), is told "epoch changed" (G3) instead of being rewound
//     silently — the receivers' for sure, as they stored messages acked after the backup; a
//     sender's may have stored nothing newer and continue — and ends with every message
//     acknowledged before the backup once in its store;
//   - a pair whose logs did not move after the backup (erin and frank) continues: no epoch change,
//     nothing resynced, the admin API says their cursors continue, and a new message follows on;
//   - the restored cluster takes new messages, which reach the old devices.
func TestBackupRestore(t *testing.T) {
	skipShort(t)
	bins, err := proccluster.Build(t.Context(), proccluster.BuildConfig{Dir: t.TempDir(), Syncctl: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c, err := proccluster.New(proccluster.Config{Syncd: bins.Syncd, Dir: dir, Nodes: 3, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	// Stopped if the test ends before it loses the cluster on purpose; its nodes' logs are the
	// restored cluster's files (same directory), which that one's cleanup shows.
	t.Cleanup(func() {
		if err := c.Stop(15 * time.Second); err != nil {
			t.Errorf("stop the cluster: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	senders := []*upgradeSender{{user: "alice", peer: "bob"}, {user: "carol", peer: "dave"}}
	stores := map[string]string{}
	for i, s := range senders {
		stores[s.user], stores[s.peer] = t.TempDir(), t.TempDir()
		s.conv = proto.DirectConv(s.user, s.peer)
		s.d, s.to = dialClusterDevice(t, c, s.user, "phone", stores[s.user], i), dialClusterDevice(t, c, s.peer, "phone", stores[s.peer], i+1)
		s.start()
	}
	// The quiet pair: five messages, all delivered and stored by both devices, then nothing.
	quiet := &upgradeSender{user: "erin", peer: "frank", conv: proto.DirectConv("erin", "frank")}
	stores[quiet.user], stores[quiet.peer] = t.TempDir(), t.TempDir()
	quiet.d, quiet.to = dialClusterDevice(t, c, quiet.user, "phone", stores[quiet.user], 2), dialClusterDevice(t, c, quiet.peer, "phone", stores[quiet.peer], 0)
	quiet.start()
	var quietSent, quietIDs []string
	for i := range 5 {
		body := fmt.Sprint("erin-", i)
		id, err := quiet.d.Send(quiet.conv, quiet.peer, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		quietSent, quietIDs = append(quietSent, body), append(quietIDs, id)
	}
	testkit.Wait(t, time.Minute, "erin's messages delivered to frank's phone, and both devices at their logs' heads", func() (bool, string) {
		for _, id := range quietIDs {
			if q, _, err := quiet.d.Lookup(id); err != nil || q.Status != client.StatusDelivered {
				return false, fmt.Sprintf("%s: %s %v", id, q.Status, err)
			}
		}
		for _, u := range []string{quiet.user, quiet.peer} {
			if rep := cursorReport(ctx, t, c.Node(0), u); len(rep.Devices) != 1 || rep.Devices[0].Behind == nil || *rep.Devices[0].Behind != 0 {
				return false, fmt.Sprintf("%s's cursors: %+v", u, rep.Devices)
			}
		}
		return true, ""
	})

	stopTraffic := keepSending(t, senders, 20*time.Millisecond)
	testkit.WaitTrue(t, 30*time.Second, "the first 50 messages of each sender acked", func() bool {
		return senders[0].ackCount() >= 50 && senders[1].ackCount() >= 50
	})

	// The backup, while both keep sending. What each had acked when it began must survive.
	ackedBefore := map[string][]string{} // conversation → bodies acked before the backup, in send order
	for _, s := range senders {
		s.mu.Lock()
		for i, id := range s.ids {
			if s.acked[id] {
				ackedBefore[s.conv] = append(ackedBefore[s.conv], s.sent[i])
			}
		}
		s.mu.Unlock()
	}
	backupDir := filepath.Join(t.TempDir(), "backup")
	out, err := exec.CommandContext(ctx, bins.Syncctl, "backup", "-admin", c.Node(0).AdminAddr,
		"-admin-token-file", c.AdminTokenFile(), "-dir", backupDir).CombinedOutput()
	if err != nil {
		t.Fatalf("syncctl backup: %v\n%s", err, out)
	}
	t.Logf("syncctl backup:\n%s", out)
	var manifest adminapi.BackupManifest
	if b, err := os.ReadFile(filepath.Join(backupDir, adminapi.BackupManifestFile)); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest.Shards) != c.Shards() {
		t.Fatalf("the manifest lists %d shards, the cluster has %d", len(manifest.Shards), c.Shards())
	}
	acks := senders[0].ackCount() + senders[1].ackCount()
	testkit.WaitTrue(t, 30*time.Second, "more messages acked after the backup", func() bool {
		return senders[0].ackCount()+senders[1].ackCount() >= acks+40
	})
	stopTraffic()
	// Each receiver's phone stored messages acked after the backup: its cursor is past what the
	// backup holds of its log.
	for _, s := range senders {
		_, sent := s.queued()
		testkit.Wait(t, time.Minute, s.peer+"'s phone to store what "+s.user+" sent", func() (bool, string) {
			got := bodies(t, s.to, s.conv)
			return hasInOrderOnce(got, sent), storeDiff(got, sent)
		})
	}

	// What the quiet phones hold before the loss: anything they store after the restore at or
	// below it would be a resync.
	quietHead := slices.Max(append(quiet.d.arrivals(quiet.conv), quiet.to.arrivals(quiet.conv)...))

	// The cluster is lost: processes and data.
	for _, s := range append(senders, quiet) {
		s.d.Close()
		s.to.Close()
		s.stop()
	}
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes() {
		if err := os.RemoveAll(n.Dir); err != nil {
			t.Fatal(err)
		}
	}

	// A new cluster on the same secrets: n1 restored from the backup, n2 and n3 joining it.
	r, err := proccluster.New(proccluster.Config{Syncd: bins.Syncd, Dir: dir, Nodes: 1, Spares: 2, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, r, "the restored cluster")
	first := r.Node(0)
	out, err = exec.CommandContext(ctx, bins.Syncd, append([]string{"restore", backupDir}, first.Args()...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("syncd restore: %v\n%s", err, out)
	}
	t.Logf("syncd restore:\n%s", out)
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	for _, n := range r.Nodes()[1:] {
		n.SetArgs("-join", first.RaftAddr)
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitSettled(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}

	// Nothing acknowledged before the backup is missing: new devices of the receivers pull it all.
	for i, s := range senders {
		fresh := dialClusterDevice(t, r, s.peer, "tablet", t.TempDir(), i)
		defer fresh.Close()
		testkit.Wait(t, time.Minute, s.peer+"'s new device to pull the messages acked before the backup", func() (bool, string) {
			got := bodies(t, fresh, s.conv)
			return hasInOrderOnce(got, ackedBefore[s.conv]), storeDiff(got, ackedBefore[s.conv])
		})
	}

	// The server says the quiet pair's phones continue, before they are back.
	for _, u := range []string{quiet.user, quiet.peer} {
		if rep := cursorReport(ctx, t, r.Node(0), u); len(rep.Devices) != 1 || !rep.Devices[0].EpochChanged || !rep.Devices[0].Continues {
			t.Errorf("%s's cursors after the restore: %+v; want one of the old epoch, continuing", u, rep.Devices)
		}
	}

	// The old devices come back with their stores: each receiver is told its log changed epoch
	// (so may a sender be), resyncs, and holds every message acked before the backup once.
	var back []*device
	for i, s := range senders {
		back = append(back, dialClusterDevice(t, r, s.user, "phone", stores[s.user], i), dialClusterDevice(t, r, s.peer, "phone", stores[s.peer], i))
	}
	for i, d := range back {
		defer d.Close()
		if i%2 == 0 {
			continue // a sender's phone
		}
		select {
		case e := <-d.epochs:
			t.Logf("%s's phone: epoch changed (%+v)", d.User(), e)
		case <-time.After(time.Minute):
			t.Fatalf("%s's phone was not told its log changed epoch", d.User())
		}
	}
	for i, s := range senders {
		for _, d := range back[2*i : 2*i+2] {
			testkit.Wait(t, time.Minute, d.User()+"'s phone to hold the messages acked before the backup once", func() (bool, string) {
				got := bodies(t, d, s.conv)
				return hasInOrderOnce(got, ackedBefore[s.conv]), storeDiff(got, ackedBefore[s.conv])
			})
		}
		// The restored cluster takes new messages, and they reach the old device.
		id, err := back[2*i].Send(s.conv, s.peer, []byte(s.user+"-after-restore"))
		if err != nil {
			t.Fatal(err)
		}
		var ack *proto.Ack
		for ack == nil {
			select {
			case e := <-back[2*i].statuses:
				if e.ClientMsgID == id && e.Status == client.StatusSent {
					ack = e.Ack
				} else if e.ClientMsgID == id {
					t.Fatalf("%s's message after the restore: %v", s.user, e.Err)
				}
			case <-time.After(time.Minute):
				t.Fatalf("%s's message after the restore was not acked", s.user)
			}
		}
		testkit.Wait(t, time.Minute, s.peer+"'s phone to get the message sent after the restore", func() (bool, string) {
			got := bodies(t, back[2*i+1], s.conv)
			code, trace, _ := r.Node(0).AdminDo(ctx, "GET", "/v1/trace?msg_id="+string(ack.MsgID))
			return slices.Contains(got, s.user+"-after-restore"), fmt.Sprintf("acked at conv_seq %d; the phone's last: %s; trace (%d): %s",
				ack.ConvSeq, strings.Join(got[max(0, len(got)-3):], ","), code, trace)
		})
	}

	// The quiet pair continues: a new message follows on in both stores, nothing is resynced or
	// stored twice, and neither phone hears of an epoch change; both cursors are of the new epoch.
	erin, frank := dialClusterDevice(t, r, quiet.user, "phone", stores[quiet.user], 0), dialClusterDevice(t, r, quiet.peer, "phone", stores[quiet.peer], 0)
	defer erin.Close()
	defer frank.Close()
	if _, err := erin.Send(quiet.conv, quiet.peer, []byte("erin-after-restore")); err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(quietSent), "erin-after-restore")
	for _, d := range []*device{erin, frank} {
		testkit.Wait(t, time.Minute, d.User()+"'s phone to store the message after the restore after the five before", func() (bool, string) {
			got := bodies(t, d, quiet.conv)
			return slices.Equal(got, want), storeDiff(got, want)
		})
		// Only entries past what the phones held, each once: the new message and the report that
		// frank's phone has it (an entry of the conversation too), as far as they have come yet
		// (erin's own message is in her store from her outbox before her log brings it back).
		if got := d.arrivals(quiet.conv); len(got) > 0 && (got[0] <= quietHead || !strictlyIncreasing(got)) {
			t.Errorf("%s's phone stored conv_seqs %v after the restore; want only entries past %d, each once (nothing resynced)", d.User(), got, quietHead)
		}
	}
	testkit.Wait(t, time.Minute, "both quiet phones to acknowledge a cursor of the new epoch", func() (bool, string) {
		for _, u := range []string{quiet.user, quiet.peer} {
			rep := cursorReport(ctx, t, r.Node(0), u)
			if len(rep.Devices) != 1 || rep.Devices[0].Epoch != rep.Epoch || rep.Devices[0].Behind == nil || *rep.Devices[0].Behind != 0 {
				return false, fmt.Sprintf("%s: epoch %d, devices %+v", u, rep.Epoch, rep.Devices)
			}
		}
		return true, ""
	})
	for _, d := range []*device{erin, frank} {
		select {
		case e := <-d.epochs:
			t.Errorf("%s's phone was told its log changed epoch (%+v); its log did not move after the backup", d.User(), e)
		default:
		}
	}
}

// cursorReport is GET /v1/cursors for user on n.
func cursorReport(ctx context.Context, t *testing.T, n *proccluster.Node, user string) adminapi.CursorReport {
	t.Helper()
	code, body, err := n.AdminDo(ctx, "GET", "/v1/cursors?user="+user)
	var rep adminapi.CursorReport
	if err == nil && code == 200 {
		err = json.Unmarshal([]byte(body), &rep)
	}
	if err != nil || code != 200 {
		t.Fatalf("cursors of %s: %d %v %s", user, code, err, body)
	}
	return rep
}

// strictlyIncreasing reports whether every position in ps is above the one before it: stored in
// order, none twice.
func strictlyIncreasing(ps []proto.Position) bool {
	for i := 1; i < len(ps); i++ {
		if ps[i] <= ps[i-1] {
			return false
		}
	}
	return true
}

// hasInOrderOnce reports whether every body of want is in got exactly once, in want's order.
func hasInOrderOnce(got, want []string) bool {
	count := map[string]int{}
	for _, b := range got {
		count[b]++
	}
	at := -1
	for _, b := range want {
		if count[b] != 1 {
			return false
		}
		i := slices.Index(got, b)
		if i < at {
			return false
		}
		at = i
	}
	return true
}
