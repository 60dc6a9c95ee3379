package test

// The fault suite's low-disk scenario (issue 21, point 5): a node's disk goes below min_free_disk,
// then fills up completely, under the workload. See TestClusterFaultLowDisk.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/test/testkit"
)

// lowDiskWatermark is the victim's min_free_disk in the low-disk scenario.
const lowDiskWatermark = 96 << 20

// TestClusterFaultLowDisk: the node leading the most shards is moved onto a small real disk (a
// tmpfs mounted on its data directory; needs root) with min_free_disk set, and the disk is filled
// below the watermark, then to the last byte, while the workload runs. The node must hand every
// leadership to the others within seconds and take none back while low; sends through every node,
// the low one included, must keep being acked; a resend of an acknowledged send through any node
// must get its original ack; and no heartbeat of the low node may claim a head older than its
// lease (a probe device syncs the same user's log on the low node and on a healthy one, and every
// heartbeat is checked against the entries the healthy one had received a lease earlier). Then the
// disk is freed, and the checker verifies G1–G6 as for every scenario.
func TestClusterFaultLowDisk(t *testing.T) {
	skipShort(t)
	runFault(t, false, func(f *faultRun) {
		leaders := f.c.waitLeaders(30 * time.Second)
		victim := f.c.mostLeader(leaders)
		healthy := f.c.nodes[(slices.Index(f.c.nodes, victim)+1)%len(f.c.nodes)]
		filler := f.moveToSmallDisk(victim)
		testkit.Wait(f.t, 60*time.Second, victim.ID+" to lead a shard again (the balancer)", func() (bool, string) {
			l := f.c.leaders()
			for _, n := range l {
				if n == victim {
					return true, ""
				}
			}
			return false, describeLeaders(l)
		})
		leaders = f.c.waitLeaders(30 * time.Second)
		var led []raftstore.ShardID
		for shard, n := range leaders {
			if n == victim {
				led = append(led, shard)
			}
		}
		f.tl.add("%s leads shards %v before its disk fills (leaders %s)", victim.ID, led, describeLeaders(leaders))

		// A probe user: its sends, acked before the fault, are resent during it; its log is synced
		// on the victim and on a healthy node, to check the victim's heartbeats.
		fp := f.c.pc.Fingerprint()
		connect := func(n *clusterNode, device string) *prototest.Conn {
			tok, err := f.c.pc.Token("probe", device, time.Hour)
			if err != nil {
				f.t.Fatal(err)
			}
			return prototest.Connect(f.t, n.ClientAddr, fp, tok, "probe", device)
		}
		sender := connect(healthy, "sender")
		slots := cluster.Even(clusterShards)
		type sent struct {
			req *proto.Send
			ack *proto.Ack
		}
		var before []sent
		onVictim := 0
		for i := range wlUsers {
			peer := probePeer(i)
			req := &proto.Send{Conv: proto.DirectConv("probe", peer), ClientMsgID: "before-" + peer, Body: []byte("before"), Peer: peer}
			ack := sendAcked(f.t, sender, func(id uint64) proto.Frame { r := *req; r.ID = id; return &r })
			before = append(before, sent{req, ack})
			if slices.Contains(led, slots.ConvShard(req.Conv)) {
				onVictim++
			}
		}
		if onVictim == 0 {
			f.t.Fatalf("none of the probe's conversations is on a shard %s leads (%v): the resends would prove nothing", victim.ID, led)
		}
		hb := startHeadProbe(f.t, connect(victim, "on-"+victim.ID), connect(healthy, "on-"+healthy.ID))
		defer hb.stop()
		// The probe's log grows all along the fault (sendFor), with pauses in which the victim's
		// stream, caught up, sends heartbeats: a stale head would show in them.
		next := 0
		sendFor := func(d time.Duration) {
			for end := time.Now().Add(d); time.Now().Before(end); next++ {
				sendAcked(f.t, sender, func(id uint64) proto.Frame {
					return &proto.Send{ID: id, Conv: before[0].req.Conv, ClientMsgID: fmt.Sprint("during-", next), Body: []byte("during")}
				})
				time.Sleep(1500 * time.Millisecond) // idle gaps longer than the victim's heartbeat interval
			}
		}

		// Below the watermark: the victim hands over every leadership, and keeps none.
		testkit.Fill(f.t, filler, lowDiskWatermark/2)
		lowAt := time.Now()
		f.tl.add("%s's disk filled to %d MiB free (min_free_disk %d MiB)", victim.ID, testkit.FreeBytes(f.t, victim.Dir)>>20, lowDiskWatermark>>20)
		testkit.Wait(f.t, 30*time.Second, victim.ID+" to hand over its leaderships", func() (bool, string) {
			l := f.c.leaders()
			for _, n := range l {
				if n == victim {
					return false, describeLeaders(l)
				}
			}
			return len(l) == clusterShards, describeLeaders(l)
		})
		f.tl.add("%s led nothing %v after its disk went low; leaders %s", victim.ID, time.Since(lowAt).Round(time.Millisecond), describeLeaders(f.c.leaders()))
		check := func(phase string) {
			for _, n := range f.c.nodes {
				if !n.Running() {
					f.tl.add("%s: %s is down, not checked", phase, n.ID)
					continue
				}
				c := connect(n, "check-"+n.ID)
				for _, s := range before {
					r := *s.req
					r.ID = c.ID()
					a, ok := c.Do(&r).(*proto.Ack)
					if !ok || !a.Duplicate || a.MsgID != s.ack.MsgID || a.ConvSeq != s.ack.ConvSeq {
						f.t.Fatalf("%s: a resend through %s of %s: %#v, want the original ack %+v", phase, n.ID, r.ClientMsgID, a, s.ack)
					}
				}
				peer := probePeer(slices.Index(f.c.nodes, n))
				a := sendAcked(f.t, c, func(id uint64) proto.Frame {
					return &proto.Send{ID: id, Conv: proto.DirectConv("probe", peer), ClientMsgID: phase + "-" + n.ID, Body: []byte(phase), Peer: peer}
				})
				if a.Duplicate {
					f.t.Fatalf("%s: a new send through %s was taken for a resend: %+v", phase, n.ID, a)
				}
				c.QUIC.CloseWithError(0, "")
			}
			for shard, n := range f.c.leaders() {
				if n == victim {
					f.t.Fatalf("%s: %s, low on disk, leads shard %d again", phase, victim.ID, shard)
				}
			}
			f.tl.add("%s: resends got their original acks and sends were acked through every node", phase)
		}
		f.w.waitProgress(5, 60*time.Second, victim.ID+" low on disk")
		check("low")
		sendFor(f.pause(5*time.Second, 30*time.Second))
		check("low-later")

		// Full: the victim's own writes fail now, and its replicas may stop applying; once Pebble
		// cannot write its log the process exits (OPERATIONS, "If the disk fills up anyway"):
		// a clean crash, nothing acknowledged lost, which the checker verifies.
		victim.mu.Lock()
		victim.mayExit = "its disk is full, and Pebble exits when it cannot write its log"
		victim.mu.Unlock()
		testkit.Fill(f.t, filler, 0)
		f.tl.add("%s's disk full", victim.ID)
		f.w.waitProgress(5, 60*time.Second, victim.ID+"'s disk full")
		sendFor(f.pause(5*time.Second, 30*time.Second))
		check("full")

		if err := os.Remove(filler); err != nil {
			f.t.Fatal(err)
		}
		f.tl.add("%s's disk freed", victim.ID)
		victim.mu.Lock()
		victim.mayExit = ""
		victim.mu.Unlock()
		if !victim.Running() {
			f.restartNode(victim)
		}
		f.w.waitProgress(5, 60*time.Second, victim.ID+"'s disk freed")
		hb.stop()
		f.tl.add("heartbeats of %s checked: %s", victim.ID, hb.verdict())
		if bad := hb.stale(staleLease + time.Second); len(bad) > 0 {
			f.t.Errorf("%d heartbeats of %s claimed a head older than its lease:\n%s", len(bad), victim.ID, strings.Join(bad, "\n"))
		}
	})
}

// moveToSmallDisk moves n onto a small disk (moveDataOntoTmpfs) with min_free_disk
// lowDiskWatermark and heartbeats every second, so that the probe sees many (the default is
// seconds), and restarts it; it returns the path of a file to fill that disk with.
func (f *faultRun) moveToSmallDisk(n *clusterNode) string {
	f.t.Helper()
	used, size := moveDataOntoTmpfs(f.t, n, "-min-free-disk", strconv.Itoa(lowDiskWatermark), "-heartbeat-interval", "1s")
	f.restartNode(n)
	f.tl.add("%s moved onto a tmpfs of %d MiB (its data: %d MiB), min_free_disk %d MiB", n.ID, size>>20, used>>20, lowDiskWatermark>>20)
	return filepath.Join(n.Dir, "filler")
}

// moveDataOntoTmpfs stops n and moves its data directory onto a tmpfs mounted on the same path
// (as root; the test is skipped otherwise), of size what n holds, three lowDiskWatermarks and
// room to spare, and sets n's flags for its next start: its own -peer-dial map, kept, then args.
// It returns the bytes n held and the tmpfs's size; the caller restarts n.
func moveDataOntoTmpfs(t *testing.T, n *clusterNode, args ...string) (used, size int64) {
	t.Helper()
	if err := n.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	aside := n.Dir + ".before-tmpfs"
	if err := os.Rename(n.Dir, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(n.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	used = dirBytes(t, aside)
	size = used + 3*lowDiskWatermark + 256<<20
	testkit.TmpfsAt(t, n.Dir, size)
	if out, err := exec.Command("cp", "-a", aside+"/.", n.Dir).CombinedOutput(); err != nil {
		t.Fatalf("copy %s's data onto the tmpfs: %v\n%s", n.ID, err, out)
	}
	var extra []string
	if old := n.Args(); slices.Contains(old, "-peer-dial") {
		i := slices.Index(old, "-peer-dial")
		extra = append(extra, old[i:i+2]...)
	}
	n.SetArgs(append(extra, args...)...)
	return used, size
}

// probePeer returns the i-th user the probe writes to: none of the workload's, whose logs the
// checker holds to the workload's own conversations.
func probePeer(i int) string { return fmt.Sprintf("peer%d", i+1) }

// dirBytes returns the bytes the files under dir take.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// headProbe syncs one user's log on two nodes, a suspect and a witness, recording when each
// entry reached the witness and every heartbeat the suspect sent.
type headProbe struct {
	t    *testing.T
	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup

	mu         sync.Mutex
	seen       []seenAt // the witness's entries, by position
	heartbeats []headAt // the suspect's heartbeats
	stales     int      // Stale frames from the suspect
}

type seenAt struct {
	pos proto.Position
	at  time.Time
}

type headAt struct {
	head proto.Position
	at   time.Time
}

// startHeadProbe starts reading the sync streams of suspect and witness (connections of the same
// user) from position 0.
func startHeadProbe(t *testing.T, suspect, witness *prototest.Conn) *headProbe {
	p := &headProbe{t: t, done: make(chan struct{})}
	for _, c := range []*prototest.Conn{suspect, witness} {
		c.StartSync(0, 0)
		frames := readSync(c)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for {
				select {
				case <-p.done:
					return
				case sf, ok := <-frames:
					if !ok {
						return
					}
					p.record(c == witness, sf)
				}
			}
		}()
	}
	return p
}

func (p *headProbe) record(witness bool, sf syncFrame) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch f := sf.f.(type) {
	case *proto.Batch:
		if witness {
			for _, e := range f.Entries {
				p.seen = append(p.seen, seenAt{e.Seq, sf.at})
			}
		}
	case *proto.Heartbeat:
		if !witness {
			p.heartbeats = append(p.heartbeats, headAt{f.Head, sf.at})
		}
	case *proto.Stale:
		if !witness {
			p.stales++
		}
	}
}

// stop stops recording (the connections close with the test).
func (p *headProbe) stop() { p.once.Do(func() { close(p.done); p.wg.Wait() }) }

// stale returns the suspect's heartbeats whose head is below an entry the witness had received
// more than lease before the heartbeat arrived: a head the suspect could not vouch for.
func (p *headProbe) stale(lease time.Duration) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var bad []string
	for _, hb := range p.heartbeats {
		for _, s := range p.seen {
			if s.pos > hb.head && s.at.Before(hb.at.Add(-lease)) {
				bad = append(bad, fmt.Sprintf("heartbeat at %s claimed head %d; the witness had %d since %v before",
					hb.at.Format("15:04:05.000"), hb.head, s.pos, hb.at.Sub(s.at).Round(time.Millisecond)))
				break
			}
		}
	}
	return bad
}

// verdict summarizes what was recorded.
func (p *headProbe) verdict() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("%d heartbeats and %d Stale frames from the suspect, %d entries at the witness", len(p.heartbeats), p.stales, len(p.seen))
}
