package test

// Heartbeats that prove something (issue #10, point 10), on a cluster of real processes: one
// node cut off from the other two by the relays. Before the fix, devices on it kept getting
// heartbeats from its stale replicas, saw new entries up to the partition's length late with
// nothing telling them, and their sends waited out the request timeout.

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// staleLease is the nodes' replica lease (raftstore's default Timing.StaleAfter; cmd/syncd runs
// raftstore's default timings).
var staleLease = raftstore.DefaultTiming().StaleAfter

// syncFrame is a frame read from a raw sync stream, with when it arrived.
type syncFrame struct {
	at time.Time
	f  proto.Frame
}

// readSync reads c's sync stream until it fails (the connection closes at the test's end) and
// hands every frame over on the returned channel, which it closes then.
func readSync(c *prototest.Conn) <-chan syncFrame {
	ch := make(chan syncFrame, 1024)
	go func() {
		defer close(ch)
		for {
			f, err := c.SyncR.Next()
			if err != nil {
				return
			}
			ch <- syncFrame{time.Now(), f}
		}
	}()
	return ch
}

// rawSync is what a raw sync stream has delivered, checked as it arrives: contiguous entries
// from position 0 (G3), none twice.
type rawSync struct {
	t       *testing.T
	frames  <-chan syncFrame
	pos     proto.Position
	entries []proto.Entry
}

// next returns the next frame, failing the test after timeout. A Batch is checked and added.
func (r *rawSync) next(timeout time.Duration, what string) syncFrame {
	r.t.Helper()
	select {
	case sf, ok := <-r.frames:
		if !ok {
			r.t.Fatalf("the sync stream ended while waiting for %s", what)
		}
		if b, ok := sf.f.(*proto.Batch); ok {
			if !b.Follows(r.pos) {
				r.t.Fatalf("a batch from %d does not continue position %d: a gap", b.Entries[0].Seq, r.pos)
			}
			r.entries = append(r.entries, b.Entries...)
			r.pos = b.Entries[len(b.Entries)-1].Seq
		}
		return sf
	case <-time.After(timeout):
		r.t.Fatalf("no frame within %v while waiting for %s (at position %d)", timeout, what, r.pos)
		return syncFrame{}
	}
}

// caughtUp reads until a Heartbeat proves the stream has every entry, at least want of them.
func (r *rawSync) caughtUp(want int, timeout time.Duration) syncFrame {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		sf := r.next(time.Until(deadline), fmt.Sprintf("a heartbeat at the head with %d entries", want))
		if hb, ok := sf.f.(*proto.Heartbeat); ok && hb.Head == r.pos && len(r.entries) >= want {
			return sf
		}
	}
}

// events records an SDK client's events with when they came, until its channel closes.
type events struct {
	mu  sync.Mutex
	all []syncEvent
}

type syncEvent struct {
	at time.Time
	e  client.Event
}

func recordEvents(c *client.Client) *events {
	ev := &events{}
	go func() {
		for e := range c.Events() {
			ev.mu.Lock()
			ev.all = append(ev.all, syncEvent{time.Now(), e})
			ev.mu.Unlock()
		}
	}()
	return ev
}

// find returns the first event after since that match accepts.
func (ev *events) find(since time.Time, match func(client.Event) bool) (syncEvent, bool) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	for _, e := range ev.all {
		if !e.at.Before(since) && match(e.e) {
			return e, true
		}
	}
	return syncEvent{}, false
}

// connectRevision1 connects alice's device (the token's) to addr as a client of protocol
// revision 1, with a request stream.
func connectRevision1(t *testing.T, addr, fp, token string) *prototest.Conn {
	t.Helper()
	q := prototest.Dial(t, addr, fp)
	st, err := q.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.WriteFrame(st, &proto.Hello{Token: token, Device: "old", ClientVersion: "rev1", ProtoVersion: 1}); err != nil {
		t.Fatal(err)
	}
	st.SetReadDeadline(time.Now().Add(prototest.Timeout))
	f, err := proto.NewReader(st, proto.DefaultMaxFrame).Next()
	w, ok := f.(*proto.Welcome)
	if err != nil || !ok || w.ProtoVersion != 1 {
		t.Fatalf("hello of revision 1: %#v, %v", f, err)
	}
	c := &prototest.Conn{T: t, QUIC: q, Welcome: w}
	if c.Req, err = q.OpenStreamSync(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.ReqR = proto.NewReader(c.Req, c.MaxFrame())
	return c
}

// sendAcked sends f through c until it is acknowledged: a retryable refusal (a shard electing a
// leader) is retried with the same client_msg_id, which the server dedups.
func sendAcked(t *testing.T, c *prototest.Conn, build func(id uint64) proto.Frame) *proto.Ack {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		switch a := c.Do(build(c.ID())).(type) {
		case *proto.Ack:
			return a
		case *proto.Error:
			if !a.Code.Retryable() || time.Now().After(deadline) {
				t.Fatalf("send: %v", a)
			}
			time.Sleep(max(a.RetryAfter(), 200*time.Millisecond))
		}
	}
}

// TestIsolatedNodeSaysStaleAndFailsFast: n3 is cut off from n1 and n2 for 12 s while bob keeps
// sending to alice through n1. alice's raw sync stream on n3 gets Stale within the lease and a
// few hundred milliseconds, and no Heartbeat from then until the heal; her send through n3 is
// refused at once with unavailable and a retry-after; her SDK device on n3 reports StaleEvent,
// moves to another node within Config.StaleFailover and gets bob's messages and its own send
// acked there. After the heal the raw stream catches up — every entry once, contiguous, exactly
// the log n1 serves — and heartbeats again.
func TestIsolatedNodeSaysStaleAndFailsFast(t *testing.T) {
	skipShort(t)
	if runtime.GOOS != "linux" {
		t.Skip("the process cluster needs Linux (parent-death signal)")
	}
	tl := newTimeline(t)
	// Delivery reports off: the devices' acks of bob's messages would add delivered entries to
	// alice's log, and the positions the raw streams must reach must not depend on when they come.
	c := startClusterWithSpares(t, 3, 0, tl, "-delivery-reports=false")
	if c.mesh == nil {
		t.Skip("this syncd has no -peer-dial: no relays to partition with")
	}
	tl.add("leaders %s", describeLeaders(c.waitLeaders(30*time.Second)))
	iso, main := c.nodes[2], c.nodes[0]
	fp := c.pc.Fingerprint()
	token := func(user, device string) string {
		tok, err := c.pc.Token(user, device, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	const conv = "d:alice:bob"
	send := func(from, cmid, body string) func(id uint64) proto.Frame {
		peer := "alice"
		if from == "alice" {
			peer = "bob"
		}
		return func(id uint64) proto.Frame {
			return &proto.Send{ID: id, Conv: conv, ClientMsgID: cmid, Body: []byte(body), Peer: peer}
		}
	}

	bob := prototest.Connect(t, main.ClientAddr, fp, token("bob", "phone"), "bob", "phone")
	sendAcked(t, bob, send("bob", "b-0", "before"))
	alice := prototest.Connect(t, iso.ClientAddr, fp, token("alice", "phone"), "alice", "phone")
	testkit.WaitTrue(t, 30*time.Second, "bob's message in alice's log on "+iso.ID, func() bool {
		h, ok := alice.Do(&proto.HeadCheck{ID: alice.ID()}).(*proto.Head)
		return ok && h.Head >= 1
	})
	alice.StartSync(0, 0) // a Batch, then at once the Heartbeat of a stream that caught up
	raw := &rawSync{t: t, frames: readSync(alice)}
	raw.caughtUp(1, 10*time.Second)
	tl.add("alice's raw stream on %s caught up at %d", iso.ID, raw.pos)
	// A client of protocol revision 1 does not know Stale: it must be sent nothing while stale.
	old := connectRevision1(t, iso.ClientAddr, fp, token("alice", "old"))
	old.StartSync(0, 0)
	oldRaw := &rawSync{t: t, frames: readSync(old)}
	oldRaw.caughtUp(1, 10*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tablet, err := client.Dial(ctx, client.Config{Addr: iso.ClientAddr, Addrs: []string{c.nodes[0].ClientAddr, c.nodes[1].ClientAddr},
		Token: token("alice", "tablet"), Device: "tablet", Fingerprint: fp, StoreDir: t.TempDir(), Logger: quiet(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer tablet.Close()
	tev := recordEvents(tablet)
	testkit.WaitTrue(t, 30*time.Second, "the tablet to sync on "+iso.ID, func() bool {
		_, ok := tev.find(time.Time{}, func(e client.Event) bool { _, ok := e.(client.SyncedEvent); return ok })
		return ok
	})

	cut := time.Now()
	c.mesh.Partition(iso.ID)
	tl.add("partition %s from the others", iso.ID)

	// The raw stream says Stale within the lease and a bound, not before the lease ran out.
	var stale *proto.Stale
	for stale == nil {
		sf := raw.next(staleLease+3*time.Second, "Stale")
		switch f := sf.f.(type) {
		case *proto.Stale:
			stale = f
			took := sf.at.Sub(cut)
			tl.add("Stale after %v: %+v", took.Round(time.Millisecond), *f)
			// The lease runs from the last proof the replica applied, asked for at most a proof
			// interval (a quarter of the lease) and a round trip before the cut.
			early := staleLease - staleLease/4 - 300*time.Millisecond
			if took < early || took > staleLease+2*time.Second {
				t.Fatalf("Stale came %v after the cut; want it within [%v, %v]", took, early, staleLease+2*time.Second)
			}
			if f.Head != raw.pos || f.UnheardMs < uint64(staleLease.Milliseconds())-300 {
				t.Fatalf("Stale %+v: want the last head %d and at least the lease unheard", *f, raw.pos)
			}
		case *proto.Heartbeat:
			if sf.at.Sub(cut) > staleLease {
				t.Fatalf("a heartbeat %v after the cut, beyond the lease: %+v", sf.at.Sub(cut), *f)
			}
		}
	}

	// A send through the cut-off node fails at once, retryable, with a retry-after.
	began := time.Now()
	ans := alice.Do(send("alice", "a-1", "from the island")(alice.ID()))
	took := time.Since(began)
	tl.add("send through %s answered in %v: %v", iso.ID, took.Round(time.Millisecond), ans)
	if e, ok := ans.(*proto.Error); !ok || e.Code != proto.CodeUnavailable || e.RetryAfterMs == 0 {
		t.Fatalf("send through the cut-off node: %#v, want unavailable with a retry-after", ans)
	}
	if took > time.Second {
		t.Fatalf("the refusal took %v: it must not wait for a leader (request timeout 10 s)", took)
	}
	// So does a HeadCheck: its head would claim as much as a heartbeat.
	if e, ok := alice.Do(&proto.HeadCheck{ID: alice.ID()}).(*proto.Error); !ok || e.Code != proto.CodeUnavailable || e.RetryAfterMs == 0 {
		t.Fatalf("HeadCheck on the cut-off node: %#v, want unavailable with a retry-after", e)
	}

	// bob goes on through the majority; the tablet queues a message on the cut-off node.
	for i := 1; i <= 5; i++ {
		sendAcked(t, bob, send("bob", fmt.Sprint("b-", i), fmt.Sprint("during ", i)))
	}
	tabletCMID, err := tablet.Send(conv, "bob", []byte("from the tablet"))
	if err != nil {
		t.Fatal(err)
	}
	tl.add("bob sent 5 through %s; the tablet queued one", main.ID)

	// The tablet was told, moved on and syncs there: bob's messages and its own send get through.
	var told syncEvent
	testkit.WaitTrue(t, staleLease+5*time.Second, "the tablet's StaleEvent", func() bool {
		var ok bool
		told, ok = tev.find(cut, func(e client.Event) bool { _, ok := e.(client.StaleEvent); return ok })
		return ok
	})
	tl.add("tablet: %+v after %v", told.e, told.at.Sub(cut).Round(time.Millisecond))
	testkit.Wait(t, 30*time.Second, "the tablet to move and get everything", func() (bool, string) {
		msgs, err := tablet.Messages(conv)
		if err != nil {
			return false, err.Error()
		}
		q, _, _ := tablet.Lookup(tabletCMID)
		return len(msgs) == 7 && q.Status == client.StatusSent, fmt.Sprintf("%d messages, own send %v", len(msgs), q.Status)
	})
	moved, _ := tev.find(told.at, func(e client.Event) bool { _, ok := e.(client.SyncedEvent); return ok })
	tl.add("tablet synced on another node %v after its StaleEvent; its send acked", moved.at.Sub(told.at).Round(time.Millisecond))
	// It moves after StaleFailover (5 s), or sooner when its send is refused twice.
	if d := moved.at.Sub(told.at); d > 5*time.Second+5*time.Second {
		t.Fatalf("the tablet took %v after its StaleEvent to sync on another node", d)
	}

	// Until the heal, the raw stream on the cut-off node gets nothing that claims a head.
	hold := time.Until(cut.Add(12 * time.Second))
	for end := time.Now().Add(hold); time.Until(end) > 0; {
		select {
		case sf, ok := <-raw.frames:
			if !ok {
				t.Fatal("the sync stream on the cut-off node ended")
			}
			switch f := sf.f.(type) {
			case *proto.Heartbeat, *proto.Batch:
				t.Fatalf("%T %+v on the cut-off node %v after the cut", f, f, sf.at.Sub(cut))
			}
		case <-time.After(time.Until(end)):
		}
	}
	for len(oldRaw.frames) > 0 {
		if sf := <-oldRaw.frames; sf.at.Sub(cut) > staleLease {
			t.Fatalf("the revision-1 stream on the cut-off node got %T %+v %v after the cut", sf.f, sf.f, sf.at.Sub(cut))
		}
	}
	c.mesh.Heal()
	healed := time.Now()
	tl.add("healed after %v", healed.Sub(cut).Round(time.Millisecond))

	// Healed, the stream gets what it missed, then at once a Heartbeat at the head: the replica
	// holds its lease again only once it has applied what its leader had committed. (The leader's
	// heartbeats reach it at once; hashicorp/raft resumes sending it entries after a backoff that
	// grows with the failures of the partition, up to 41 s: Stale goes on until then.)
	hb := raw.caughtUp(7, 60*time.Second)
	tl.add("alice's raw stream on %s caught up at %d, %v after the heal", iso.ID, raw.pos, hb.at.Sub(healed).Round(time.Millisecond))
	oldRaw.caughtUp(7, 20*time.Second) // the revision-1 stream heartbeats again too
	// The refused send, resent with its client_msg_id, lands once.
	sendAcked(t, alice, send("alice", "a-1", "from the island"))
	for len(raw.entries) < 8 {
		raw.next(15*time.Second, "the resent message")
	}

	// Nothing lost, nothing twice: the stream on n3 holds exactly the log that n1 serves.
	check := prototest.Connect(t, main.ClientAddr, fp, token("alice", "check"), "alice", "check")
	check.StartSync(0, 0)
	want := check.Entries(0, len(raw.entries))
	var got, wantIDs, bodies []string
	for i := range raw.entries {
		got, wantIDs = append(got, string(raw.entries[i].MsgID)), append(wantIDs, string(want[i].MsgID))
		bodies = append(bodies, string(raw.entries[i].Body))
	}
	if !slices.Equal(got, wantIDs) {
		t.Fatalf("the stream on %s differs from %s's log:\n%v\n%v", iso.ID, main.ID, got, wantIDs)
	}
	slices.Sort(bodies)
	wantBodies := []string{"before", "during 1", "during 2", "during 3", "during 4", "during 5", "from the island", "from the tablet"}
	if !slices.Equal(bodies, wantBodies) {
		t.Fatalf("alice's log holds %q, want each of %q once", bodies, wantBodies)
	}
}

// TestStaleReplicaOnAnotherNode: a node that hosts no replica of alice's log serves her sync
// stream from a replica on another node (syncd/reads.go). Four in-process nodes, each shard on
// three; the links are cut so that the serving node reaches only that replica, and the replica
// only the serving node: the replica loses its lease, its answers say so, and the stream sends
// Stale — no Heartbeat — while bob goes on through the other two. Cut from every replica, the
// stream neither ends nor heartbeats. Healed, it gets bob's messages and a Heartbeat at the head.
func TestStaleReplicaOnAnotherNode(t *testing.T) {
	c := syncdtest.StartClusterThroughRelays(t, 4, nil)
	mesh := c.Mesh()
	m, _ := c.Server(0).Cluster().Map()
	slots := cluster.Even(m.Shards)
	ids := []string{"n1", "n2", "n3", "n4"}
	home := m.Replicas[slots.UserShard("alice")]
	far := slices.IndexFunc(ids, func(id string) bool { return !slices.Contains(home, id) })
	via, rest := home[0], home[1:]                // far reads through via; rest keeps a quorum of alice's shard
	keeps := func(shard raftstore.ShardID) bool { // a quorum of shard stays on rest's side
		return slices.Contains(m.Replicas[shard], rest[0]) && slices.Contains(m.Replicas[shard], rest[1])
	}
	bobID, conv := "", ""
	for i := 0; bobID == "" || conv == ""; i++ {
		if u := fmt.Sprint("bob", i); bobID == "" && keeps(slots.UserShard(u)) {
			bobID = u
		}
		if g := fmt.Sprint("g:lease", i); conv == "" && keeps(slots.ConvShard(g)) {
			conv = g
		}
	}
	t.Logf("alice's shard on %v: her device on %s reads through %s; %s and %s in %s", home, ids[far], via, bobID, "alice", conv)
	server := func(id string) *syncd.Server { return c.Server(slices.Index(ids, id)) }
	connect := func(srv *syncd.Server, user, device string) *prototest.Conn {
		tok, err := srv.MintToken(user, device, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return prototest.Connect(t, srv.Addr().String(), srv.Fingerprint(), tok, user, device)
	}
	cut := func(a, b string, blocked bool) {
		for _, r := range []*testkit.Relay{mesh.Relay(a, b), mesh.Relay(b, a)} {
			if blocked {
				r.Block()
			} else {
				r.Unblock()
			}
		}
	}

	bob := connect(server(rest[0]), bobID, "phone")
	sendAcked(t, bob, func(id uint64) proto.Frame {
		return &proto.CreateGroup{ID: id, Conv: conv, ClientMsgID: "create", Members: []string{"alice"}}
	})
	alice := connect(c.Server(far), "alice", "phone")
	testkit.WaitTrue(t, 30*time.Second, "the group in alice's log", func() bool {
		h, ok := alice.Do(&proto.HeadCheck{ID: alice.ID()}).(*proto.Head)
		return ok && h.Head >= 1
	})
	alice.StartSync(0, 0)
	raw := &rawSync{t: t, frames: readSync(alice)}
	raw.caughtUp(1, 10*time.Second)

	began := time.Now()
	for _, r := range rest {
		cut(ids[far], r, true)
		cut(via, r, true)
	}
	for {
		sf := raw.next(staleLease+5*time.Second, "Stale from the replica on "+via)
		if st, ok := sf.f.(*proto.Stale); ok {
			t.Logf("Stale %v after the cut: %+v", sf.at.Sub(began).Round(time.Millisecond), *st)
			if st.Head != raw.pos {
				t.Fatalf("Stale names head %d, want the last known %d", st.Head, raw.pos)
			}
			break
		}
		if _, ok := sf.f.(*proto.Heartbeat); ok && sf.at.Sub(began) > staleLease {
			t.Fatalf("a heartbeat %v after the cut, beyond the lease", sf.at.Sub(began))
		}
	}
	// A HeadCheck read through the stale replica is refused like a heartbeat is withheld.
	if e, ok := alice.Do(&proto.HeadCheck{ID: alice.ID()}).(*proto.Error); !ok || e.Code != proto.CodeUnavailable || e.RetryAfterMs == 0 {
		t.Fatalf("HeadCheck through the stale replica on %s: %#v, want unavailable with a retry-after", via, e)
	}
	for i := range 3 {
		sendAcked(t, bob, func(id uint64) proto.Frame {
			return &proto.Send{ID: id, Conv: conv, ClientMsgID: fmt.Sprint("m", i), Body: []byte(fmt.Sprint("during ", i))}
		})
	}
	silent := func(d time.Duration, what string) {
		for end := time.Now().Add(d); time.Until(end) > 0; {
			select {
			case sf, ok := <-raw.frames:
				if !ok {
					t.Fatalf("the sync stream ended %s", what)
				}
				switch f := sf.f.(type) {
				case *proto.Heartbeat, *proto.Batch, *proto.Error:
					t.Fatalf("%T %+v %s", f, f, what)
				}
			case <-time.After(time.Until(end)):
			}
		}
	}
	silent(2*time.Second, "while the replica it reads is stale")
	cut(ids[far], via, true) // no replica reachable at all
	silent(3*time.Second, "while no replica can be reached")

	mesh.Heal()
	healed := time.Now()
	hb := raw.caughtUp(4, 30*time.Second) // raft resends entries to a healed follower after a backoff
	t.Logf("caught up at %d, %v after the heal", raw.pos, hb.at.Sub(healed).Round(time.Millisecond))
}
