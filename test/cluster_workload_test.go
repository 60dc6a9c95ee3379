package test

// The workload of the fault suite: users with one device each, bound to one node of the cluster
// (spread over the nodes), send direct and group messages continuously with the real SDK while
// the faults happen, and every device syncs its user's log all along. Everything the test learns
// is recorded for the checker: each message queued (body → client_msg_id, conversation,
// sender), its ack (msg_id, conv_seq) or failure, and every entry each device stored, in order.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/test/testkit"
)

// wlUsers is the number of users (one device each) of the workload.
const wlUsers = 6

// wlSendEvery is the mean time between two messages queued by one user; with wlUsers users the
// cluster takes about 12 messages a second, modest enough for a 2-core machine running three
// nodes and the test.
const wlSendEvery = 500 * time.Millisecond

// wlMaxPending bounds the messages a user has queued but not yet seen acked: during a fault the
// queue stops growing instead of piling up work for the end.
const wlMaxPending = 8

// wlRetry is the devices' retry schedule: the SDK's default gives up after about a minute of
// failures, and the longest faults of the suite must not make a message Failed. A Failed message
// is still reported by the checker.
var wlRetry = func() []time.Duration {
	out := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second}
	for range 60 {
		out = append(out, 2*time.Second)
	}
	return out
}()

// wlConv is one conversation of the workload.
type wlConv struct {
	id      string
	members []string // sorted
	creator string   // groups: the member who creates it
}

// wlMsg is one mutation queued by a device: a message, or a group creation.
type wlMsg struct {
	cmid, conv, sender string
	kind               proto.Kind
	body               string // messages: "<sender>#<n>", unique
	n                  int    // messages: the sender's count, its queue order
	queued, acked      time.Time
	ack                *proto.Ack // once Sent
	failed             string     // once Failed
}

// wlDevice is a user's device: an SDK client connected to one node, and everything its event
// stream reported.
type wlDevice struct {
	user  string
	node  *clusterNode
	cl    *client.Client
	convs []*wlConv // the conversations it sends to
	rng   *rand.Rand

	mu      sync.Mutex
	entries []proto.Entry // every entry stored, in the order stored (user log order)
	subs    []uint32      // the sub-log of each of entries (0 unless the user's stream is split)
	// sourced holds the entries stored from each large group's log the device follows (a
	// source), in the order stored.
	sourced map[string][]proto.Entry
	gaps    []proto.Position
	rebases []client.RebaseEvent
	epochs  []client.EpochEvent
}

// workload drives the devices and records what they did and saw.
type workload struct {
	t     *testing.T
	c     *testCluster
	tl    *timeline
	devs  []*wlDevice
	convs []*wlConv

	mu     sync.Mutex
	msgs   map[string]*wlMsg // client_msg_id → mutation
	byBody map[string]*wlMsg // message body → message
	next   map[string]int    // sender → next message number
	bad    []string          // inconsistencies seen while recording (an ack changing, an unknown id)

	final      map[string]convView                  // conversation → its messages as the devices stored them (checkDevices)
	skipped    map[string]map[proto.Position]string // group → conv_seqs a member's device jumped over → that member (checkEntries)
	moved      map[string]raftstore.ShardID         // users the schedule moved to another shard, and where
	movedConvs map[string]raftstore.ShardID         // conversations it moved, and where
	split      map[string]int                       // users whose streams the schedule split, into how many sub-logs

	stop    chan struct{}
	senders sync.WaitGroup
	events  sync.WaitGroup
}

// wlUserName returns the name of user i (0-based).
func wlUserName(i int) string { return fmt.Sprintf("u%d", i+1) }

// newWorkload connects one device per user, user i to node i mod N, and creates the groups
// (waiting for their acks, so every message afterwards has a group to go to). Conversations: a
// ring of direct conversations (u1–u2, u2–u3, …, u6–u1), a group of everyone and a group of
// three. Close (or the test's cleanup) closes the devices.
func newWorkload(t *testing.T, c *testCluster, seed uint64) *workload {
	t.Helper()
	w := &workload{t: t, c: c, tl: c.tl, msgs: map[string]*wlMsg{}, byBody: map[string]*wlMsg{}, next: map[string]int{},
		stop: make(chan struct{})}
	var users []string
	for i := range wlUsers {
		users = append(users, wlUserName(i))
	}
	for i := range wlUsers {
		a, b := users[i], users[(i+1)%wlUsers]
		w.convs = append(w.convs, &wlConv{id: proto.DirectConv(a, b), members: sorted(a, b)})
	}
	w.convs = append(w.convs,
		&wlConv{id: "grp-all", members: sorted(users...), creator: users[0]},
		&wlConv{id: "grp-three", members: sorted(users[1], users[3], users[4]), creator: users[3]})

	t.Cleanup(w.Close)
	var started []*clusterNode // spare nodes are not running yet
	for _, n := range c.nodes {
		if !n.Spare {
			started = append(started, n)
		}
	}
	for i, u := range users {
		d := &wlDevice{user: u, node: started[i%len(started)], rng: rand.New(rand.NewPCG(seed, uint64(i)))}
		for _, cv := range w.convs {
			if slices.Contains(cv.members, u) {
				d.convs = append(d.convs, cv)
			}
		}
		d.cl = w.dial(d)
		w.devs = append(w.devs, d)
		w.events.Add(1)
		go w.readEvents(d)
	}
	for _, cv := range w.convs {
		if cv.creator == "" {
			continue
		}
		d := w.device(cv.creator)
		others := slices.DeleteFunc(slices.Clone(cv.members), func(m string) bool { return m == cv.creator })
		w.queue(d, &wlMsg{conv: cv.id, sender: d.user, kind: proto.KindGroupCreate}, func() (string, error) {
			return d.cl.CreateGroup(cv.id, others)
		})
	}
	testkit.Wait(t, 60*time.Second, "the groups to be created", func() (bool, string) {
		pending := w.unsettled()
		return len(pending) == 0, fmt.Sprint("pending ", pending)
	})
	var where []string
	for _, d := range w.devs {
		where = append(where, d.user+"@"+d.node.ID)
	}
	w.tl.add("workload: %d devices (%v), %d conversations, groups created", len(w.devs), where, len(w.convs))
	return w
}

// sorted returns the ids sorted.
func sorted(ids ...string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// dial connects device d to its node, retrying while the node starts.
func (w *workload) dial(d *wlDevice) *client.Client {
	w.t.Helper()
	token, err := w.c.pc.Token(d.user, "phone", 24*time.Hour)
	if err != nil {
		w.t.Fatal(err)
	}
	var others []string // any node serves any device: the SDK moves on when its node is gone
	for _, n := range w.c.nodes {
		if n != d.node {
			others = append(others, n.ClientAddr)
		}
	}
	cfg := client.Config{Addr: d.node.ClientAddr, Addrs: others, Token: token, Device: "phone", Fingerprint: w.c.pc.Fingerprint(),
		StoreDir: w.t.TempDir(), Logger: quiet(w.t), Retry: wlRetry, RequestTimeout: 5 * time.Second,
		// A stalled sync stream is noticed within seconds instead of the default two minutes,
		// so convergence after a heal does not wait on it.
		HeadCheck: 5 * time.Second}
	var cl *client.Client
	testkit.Wait(w.t, 30*time.Second, "device "+d.user+" to connect to "+d.node.ID, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		cl, err = client.Dial(ctx, cfg)
		return err == nil, fmt.Sprint(err)
	})
	return cl
}

// device returns the device of user.
func (w *workload) device(user string) *wlDevice {
	for _, d := range w.devs {
		if d.user == user {
			return d
		}
	}
	w.t.Fatalf("no device for %s", user)
	return nil
}

// conv returns the conversation with the id.
func (w *workload) conv(id string) *wlConv {
	for _, cv := range w.convs {
		if cv.id == id {
			return cv
		}
	}
	return nil
}

// queue queues one mutation on its device with send and records it. The lock is held across
// send, so the status event of the mutation (read by readEvents) always finds it recorded.
func (w *workload) queue(d *wlDevice, m *wlMsg, send func() (string, error)) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	cmid, err := send()
	if err != nil {
		return err
	}
	m.cmid, m.queued = cmid, time.Now()
	w.msgs[cmid] = m
	if m.kind == proto.KindMessage {
		w.byBody[m.body] = m
	}
	return nil
}

// readEvents records device d's events until its client is closed.
func (w *workload) readEvents(d *wlDevice) {
	defer w.events.Done()
	for e := range d.cl.Events() {
		switch e := e.(type) {
		case client.EntryEvent:
			d.mu.Lock()
			if e.Source != "" {
				if d.sourced == nil {
					d.sourced = map[string][]proto.Entry{}
				}
				d.sourced[e.Source] = append(d.sourced[e.Source], e.Entry)
			} else {
				d.entries, d.subs = append(d.entries, e.Entry), append(d.subs, e.Sub)
			}
			d.mu.Unlock()
		case client.GapEvent:
			d.mu.Lock()
			d.gaps = append(d.gaps, e.At)
			d.mu.Unlock()
		case client.RebaseEvent:
			d.mu.Lock()
			d.rebases = append(d.rebases, e)
			d.mu.Unlock()
		case client.EpochEvent:
			d.mu.Lock()
			d.epochs = append(d.epochs, e)
			d.mu.Unlock()
		case client.StatusEvent:
			w.recordStatus(d, e)
		}
	}
}

// recordStatus records a Sent or Failed status (delivered and read steps are not the workload's).
func (w *workload) recordStatus(d *wlDevice, e client.StatusEvent) {
	if e.Status != client.StatusSent && e.Status != client.StatusFailed {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs[e.ClientMsgID]
	switch {
	case m == nil:
		w.bad = append(w.bad, fmt.Sprintf("%s: status %v for unknown client_msg_id %s", d.user, e.Status, e.ClientMsgID))
	case e.Status == client.StatusSent:
		if m.ack != nil && (m.ack.MsgID != e.Ack.MsgID || m.ack.ConvSeq != e.Ack.ConvSeq) {
			w.bad = append(w.bad, fmt.Sprintf("%s: %s acked twice differently: %+v then %+v", d.user, m.cmid, *m.ack, *e.Ack))
		}
		if m.failed != "" {
			w.bad = append(w.bad, fmt.Sprintf("%s: %s acked after it failed (%s)", d.user, m.cmid, m.failed))
		}
		m.ack, m.acked = e.Ack, time.Now()
	case e.Status == client.StatusFailed:
		m.failed = fmt.Sprint(e.Err)
		w.tl.add("%s: message %q (%s) FAILED: %v", d.user, m.body, m.cmid, e.Err)
	}
}

// unsettled returns the client_msg_ids neither acked nor failed yet.
func (w *workload) unsettled() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for cmid, m := range w.msgs {
		if m.ack == nil && m.failed == "" {
			out = append(out, cmid)
		}
	}
	slices.Sort(out)
	return out
}

// Start starts every device's sender.
func (w *workload) Start() {
	for _, d := range w.devs {
		w.senders.Add(1)
		go w.sendLoop(d)
	}
	w.tl.add("traffic started")
}

// sendLoop queues a message to one of d's conversations every wlSendEvery (jittered ±50%),
// skipping a turn while wlMaxPending are unacknowledged, until Stop.
func (w *workload) sendLoop(d *wlDevice) {
	defer w.senders.Done()
	for {
		wait := wlSendEvery/2 + time.Duration(d.rng.Int64N(int64(wlSendEvery)))
		select {
		case <-w.stop:
			return
		case <-time.After(wait):
		}
		if w.pending(d.user) >= wlMaxPending {
			continue
		}
		cv := d.convs[d.rng.IntN(len(d.convs))]
		peer := ""
		if cv.creator == "" {
			peer = cv.members[0]
			if peer == d.user {
				peer = cv.members[1]
			}
		}
		w.mu.Lock()
		n := w.next[d.user]
		w.next[d.user] = n + 1
		w.mu.Unlock()
		m := &wlMsg{conv: cv.id, sender: d.user, kind: proto.KindMessage, body: fmt.Sprintf("%s#%d", d.user, n), n: n}
		if err := w.queue(d, m, func() (string, error) { return d.cl.Send(cv.id, peer, []byte(m.body)) }); err != nil {
			w.t.Errorf("%s: queue %q: %v", d.user, m.body, err)
			return
		}
	}
}

// pending counts user's mutations neither acked nor failed.
func (w *workload) pending(user string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, m := range w.msgs {
		if m.sender == user && m.ack == nil && m.failed == "" {
			n++
		}
	}
	return n
}

// Stop stops queueing new messages (queued ones are still being sent and synced).
func (w *workload) Stop() {
	select {
	case <-w.stop:
		return
	default:
	}
	close(w.stop)
	w.senders.Wait()
	queued, acked := w.counts()
	w.tl.add("traffic stopped: %d mutations queued, %d acked so far", queued, acked)
}

// counts returns how many mutations were queued and how many acked.
func (w *workload) counts() (queued, acked int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.msgs {
		if m.ack != nil {
			acked++
		}
	}
	return len(w.msgs), acked
}

// Close stops the traffic and closes every device, waiting for their event readers.
func (w *workload) Close() {
	w.Stop()
	for _, d := range w.devs {
		d.cl.Close()
	}
	w.events.Wait()
}

// acked returns how many mutations are acked so far.
func (w *workload) acked() int {
	_, acked := w.counts()
	return acked
}

// waitProgress waits until at least n more mutations are acked than now: the cluster is taking
// writes again.
func (w *workload) waitProgress(n int, timeout time.Duration, what string) {
	w.t.Helper()
	start := time.Now()
	base := w.acked()
	testkit.Wait(w.t, timeout, fmt.Sprintf("%d more acks (%s)", n, what), func() (bool, string) {
		got := w.acked() - base
		return got >= n, fmt.Sprintf("%d more acks", got)
	})
	w.tl.add("%s: %d more acks within %v", what, n, time.Since(start).Round(10*time.Millisecond))
}
