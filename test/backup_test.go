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
//   - each old device, reconnecting with its store (its cursors point at the lost cluster's logs),
//     is told "epoch changed" (G3) instead of being rewound silently, resyncs, and ends with every
//     message acknowledged before the backup once in its store;
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

	// The cluster is lost: processes and data.
	for _, s := range senders {
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

	// The old devices come back with their stores: each is told its logs changed epoch, resyncs,
	// and holds every message acked before the backup once.
	var back []*device
	for i, s := range senders {
		back = append(back, dialClusterDevice(t, r, s.user, "phone", stores[s.user], i), dialClusterDevice(t, r, s.peer, "phone", stores[s.peer], i))
	}
	for _, d := range back {
		defer d.Close()
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
