package fanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// fanoutNode is the eight local shards with a running fan-out wired to their applies.
type fanoutNode struct {
	node   *raftstoretest.Local
	fan    *Fanout
	slots  *cluster.Routing
	cancel context.CancelFunc
	done   chan struct{}
}

func startFanoutNode(t *testing.T, dir string) *fanoutNode {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelError}))
	node := raftstoretest.OpenLocal(t, dir, 8)
	slots := cluster.Even(len(node.Shards()))
	fan := New(node, slots, Config{Batch: 64, Logger: logger}) // default IdleLag
	node.OnApplied(fan.Notify)
	ctx, cancel := context.WithCancel(context.Background())
	fn := &fanoutNode{node: node, fan: fan, slots: slots, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(fn.done)
		fan.Run(ctx)
	}()
	return fn
}

func (fn *fanoutNode) stop(t *testing.T) {
	fn.cancel()
	<-fn.done
	if err := fn.node.Close(); err != nil {
		t.Error(err)
	}
}

type testLog struct{ t testing.TB }

func (w testLog) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// sent records what a conversation acknowledged, in conv_seq order.
type sent struct {
	mu    sync.Mutex
	convs map[string][]log.MsgID // conv → msg_id at conv_seq i+1
}

func (s *sent) ack(conv string, r log.AppendResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.convs[conv]
	for log.Position(len(l)) < r.ConvSeq {
		l = append(l, log.MsgID{})
	}
	l[r.ConvSeq-1] = r.MsgID
	s.convs[conv] = l
}

// TestFanoutDeliversAcrossShardsExactlyOnce sends to direct and group conversations whose
// members live on other shards, with resends and a restart in the middle, and checks that every
// member's log holds every entry of each of its conversations exactly once, in conversation order,
// and that the outboxes end fully trimmed (G5, G6) — on healthy shards, and with one shard whose
// proposals fail every third time (a timeout, a lost leader): the fan-out retries without
// skipping or repeating, and a sender's failed send is resent with the same client_msg_id.
func TestFanoutDeliversAcrossShardsExactlyOnce(t *testing.T) {
	t.Run("healthy", func(t *testing.T) { fanoutWorkload(t, false) })
	t.Run("flaky destination", func(t *testing.T) { fanoutWorkload(t, true) })
}

func fanoutWorkload(t *testing.T, flaky bool) {
	dir := t.TempDir()
	users := make([]string, 24)
	for i := range users {
		users[i] = fmt.Sprintf("user%02d", i)
	}
	type convDef struct {
		id      string
		members []string
	}
	var convs []convDef
	for i := 0; i < 8; i++ {
		a, b := users[2*i], users[2*i+1]
		convs = append(convs, convDef{id: "d:" + a + ":" + b, members: []string{a, b}})
	}
	for g := 0; g < 3; g++ {
		convs = append(convs, convDef{id: fmt.Sprintf("group%d", g), members: users[g*6 : g*6+8]})
	}
	acks := &sent{convs: map[string][]log.MsgID{}}
	r := rand.New(rand.NewPCG(1, 2))
	var proposals atomic.Int64
	start := func() *fanoutNode {
		fn := startFanoutNode(t, dir)
		if flaky {
			fn.node.FailProposals(func(shard raftstore.ShardID, _ raftstore.Command) error {
				if shard == 3 && proposals.Add(1)%3 == 0 {
					return fmt.Errorf("%w: injected", raftstore.ErrTimeout)
				}
				return nil
			})
		}
		return fn
	}
	fn := start()

	propose := func(conv string, req *log.Append) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := fn.node.Propose(ctx, fn.slots.ConvShard(conv), raftstore.AppendCommand(req))
		for attempt := 0; errors.Is(err, raftstore.ErrTimeout) && attempt < 10; attempt++ {
			res, err = fn.node.Propose(ctx, fn.slots.ConvShard(conv), raftstore.AppendCommand(req)) // the client's resend
		}
		if err != nil {
			t.Fatalf("%s: %v", conv, err)
		}
		if !res.Append.Duplicate {
			acks.ack(conv, res.Append)
		}
	}
	for _, c := range convs[8:] {
		propose(c.id, &log.Append{Conv: c.id, Sender: c.members[0], ClientMsgID: "create", Kind: log.KindGroupCreate, Members: c.members})
	}
	for round := 0; round < 2; round++ {
		for i := 0; i < 300; i++ {
			c := convs[r.IntN(len(convs))]
			sender := c.members[r.IntN(len(c.members))]
			req := &log.Append{Conv: c.id, Sender: sender, ClientMsgID: fmt.Sprintf("r%d-%d", round, i), Kind: log.KindMessage,
				Body: []byte(fmt.Sprint("hello ", i))}
			if len(c.members) == 2 {
				req.Members = c.members
			}
			propose(c.id, req)
			if i%10 == 0 {
				propose(c.id, req) // a client resend: must not show up twice anywhere
			}
		}
		if round == 0 { // restart mid-way: the fan-out resumes from the marks, nothing twice
			fn.stop(t)
			fn = start()
		}
	}
	defer fn.stop(t)

	// Wait until every member's log holds every entry of its conversations.
	want := map[string]int{}
	for _, c := range convs {
		for _, m := range c.members {
			want[m] += len(acks.convs[c.id])
		}
	}
	testkit.WaitTrue(t, 30*time.Second, "fan-out to complete", func() bool {
		for uid, n := range want {
			state, _ := fn.node.State(fn.slots.UserShard(uid))
			info, err := state.UserInfo(uid)
			if err != nil || int(info.Head) < n {
				return false
			}
		}
		return true
	})
	for _, c := range convs {
		for _, m := range c.members {
			checkUserLog(t, fn, m, c.id, acks.convs[c.id])
		}
	}
	for uid, n := range want {
		state, _ := fn.node.State(fn.slots.UserShard(uid))
		if info, _ := state.UserInfo(uid); int(info.Head) != n {
			t.Errorf("%s's log has %d entries, want %d", uid, info.Head, n)
		}
	}
	testkit.WaitTrue(t, 10*time.Second, "outboxes to be trimmed", func() bool {
		for _, s := range fn.node.Shards() {
			state, _ := fn.node.State(s)
			if info, _ := state.Outbox(); info.First <= info.Head {
				return false
			}
		}
		return true
	})
	if fn.fan.Delivered() == 0 {
		t.Fatal("fan-out reports no deliveries")
	}
	if flaky && fn.fan.Failures() == 0 {
		t.Fatal("no fan-out round failed: the flaky shard was never hit")
	}
}

// checkUserLog reads uid's whole log and checks that the entries of conv appear exactly as
// acknowledged: each msg_id once, in conv_seq order.
func checkUserLog(t *testing.T, fn *fanoutNode, uid, conv string, want []log.MsgID) {
	t.Helper()
	state, _ := fn.node.State(fn.slots.UserShard(uid))
	var got []log.MsgID
	for from := log.Position(1); ; {
		r, err := state.ReadUser(uid, 0, from, log.Limit{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != log.ReadEntries {
			break
		}
		for _, e := range r.Entries {
			if e.Seq != from {
				t.Fatalf("%s: position %d where %d was expected", uid, e.Seq, from)
			}
			from++
			if e.Conv == conv {
				got = append(got, e.MsgID)
			}
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%s holds %d entries of %s, want %d", uid, len(got), conv, len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: entry %d of %s is %v, want %v", uid, i, conv, got[i], want[i])
		}
	}
}

// TestFanoutDestinationWithoutQuorumDelaysOnlyItself: while one destination shard has no quorum
// (every proposal to it hangs until released) and another fails every proposal at once, the
// members on every other shard get every entry, in order, promptly; the outboxes are never trimmed
// past what every destination has; once the failing shard heals its members catch up while the
// hanging one still hangs; once that one is released its members get everything exactly once and
// in order, and the outboxes trim (point 8 of the edges issue). Neither broken shard piles up
// proposals: at most one delivery per source is in flight to the hanging one.
func TestFanoutDestinationWithoutQuorumDelaysOnlyItself(t *testing.T) {
	const hung, failing = raftstore.ShardID(3), raftstore.ShardID(6)
	fn := startFanoutNode(t, t.TempDir())
	defer fn.stop(t)
	release := make(chan struct{})
	var releaseOnce sync.Once
	unhang := func() { releaseOnce.Do(func() { close(release) }) }
	defer unhang() // before stop: a hanging proposal must return for the fan-out to end
	var healed atomic.Bool
	var hanging, maxHanging, failed atomic.Int64
	fn.node.FailProposals(func(shard raftstore.ShardID, _ raftstore.Command) error {
		switch {
		case shard == hung:
			n := hanging.Add(1)
			defer hanging.Add(-1)
			for m := maxHanging.Load(); n > m && !maxHanging.CompareAndSwap(m, n); m = maxHanging.Load() {
			}
			<-release // a shard without quorum: the proposal waits for one
		case shard == failing && !healed.Load():
			failed.Add(1)
			return fmt.Errorf("%w: shard %d has no leader", raftstore.ErrTimeout, shard)
		}
		return nil
	})

	// Groups homed on healthy shards, each with a member on either broken shard and three
	// elsewhere.
	var onHung, onFailing, elsewhere []string
	for i := 0; len(onHung) < 4 || len(onFailing) < 4 || len(elsewhere) < 12; i++ {
		uid := fmt.Sprintf("u%03d", i)
		switch s := fn.slots.UserShard(uid); {
		case s == hung && len(onHung) < 4:
			onHung = append(onHung, uid)
		case s == failing && len(onFailing) < 4:
			onFailing = append(onFailing, uid)
		case s != hung && s != failing && len(elsewhere) < 12:
			elsewhere = append(elsewhere, uid)
		}
	}
	var convs []string
	for i := 0; len(convs) < 4; i++ {
		if conv := fmt.Sprintf("g%d", i); fn.slots.ConvShard(conv) != hung && fn.slots.ConvShard(conv) != failing {
			convs = append(convs, conv)
		}
	}
	acks := &sent{convs: map[string][]log.MsgID{}}
	members := map[string][]string{}
	propose := func(conv string, req *log.Append) {
		t.Helper()
		res, err := fn.node.Propose(context.Background(), fn.slots.ConvShard(conv), raftstore.AppendCommand(req))
		if err != nil {
			t.Fatalf("%s: %v", conv, err)
		}
		acks.ack(conv, res.Append)
	}
	send := func(from, to int) {
		t.Helper()
		for _, conv := range convs {
			for j := from; j < to; j++ {
				propose(conv, &log.Append{Conv: conv, Sender: members[conv][2+j%3], ClientMsgID: fmt.Sprint("m", j),
					Kind: log.KindMessage, Body: []byte(fmt.Sprint("hello ", j))})
			}
		}
	}
	for i, conv := range convs {
		members[conv] = append([]string{onHung[i], onFailing[i]}, elsewhere[3*i:3*i+3]...)
		slices.Sort(members[conv])
		propose(conv, &log.Append{Conv: conv, Sender: elsewhere[3*i], ClientMsgID: "create", Kind: log.KindGroupCreate, Members: members[conv]})
	}
	send(0, 40)

	// complete reports whether every one of uids holds every entry of its conversations; have
	// checks what they hold: each entry once, in conversation order.
	complete := func(uids []string) func() (bool, string) {
		return func() (bool, string) {
			for conv, ms := range members {
				for _, uid := range ms {
					if !slices.Contains(uids, uid) {
						continue
					}
					state, _ := fn.node.State(fn.slots.UserShard(uid))
					if info, _ := state.UserInfo(uid); int(info.Head) < len(acks.convs[conv]) {
						return false, fmt.Sprintf("%s has %d of %d entries of %s", uid, info.Head, len(acks.convs[conv]), conv)
					}
				}
			}
			return true, ""
		}
	}
	have := func(uids []string) {
		t.Helper()
		for conv, ms := range members {
			for _, uid := range ms {
				if slices.Contains(uids, uid) {
					checkUserLog(t, fn, uid, conv, acks.convs[conv])
				}
			}
		}
	}
	none := func(uids []string) {
		t.Helper()
		for _, uid := range uids {
			state, _ := fn.node.State(fn.slots.UserShard(uid))
			if info, _ := state.UserInfo(uid); info.Head != 0 {
				t.Fatalf("%s, on a shard without quorum, got %d entries", uid, info.Head)
			}
		}
	}
	// trimmedOnlyWhatAllHave checks every source's outbox against every destination's own mark.
	trimmedOnlyWhatAllHave := func() {
		t.Helper()
		for _, src := range fn.node.Shards() {
			state, _ := fn.node.State(src)
			info, _ := state.Outbox()
			for _, d := range fn.node.Shards() {
				dstate, _ := fn.node.State(d)
				if mark, _ := dstate.SourceMark(src); info.First-1 > mark {
					t.Fatalf("shard %d's outbox is trimmed up to %d, but shard %d has only up to %d", src, info.First-1, d, mark)
				}
			}
		}
	}

	testkit.Wait(t, 10*time.Second, "the members on healthy shards to get every entry", complete(elsewhere))
	have(elsewhere)
	none(onHung)
	none(onFailing)
	trimmedOnlyWhatAllHave()
	if failed.Load() == 0 || fn.fan.Failures() == 0 {
		t.Fatal("the failing shard was never tried")
	}

	healed.Store(true)
	send(40, 60)
	testkit.Wait(t, 15*time.Second, "the members of the healed shard to catch up while the other still hangs",
		complete(append(slices.Clone(elsewhere), onFailing...)))
	have(elsewhere)
	have(onFailing)
	none(onHung)
	trimmedOnlyWhatAllHave()
	if n := maxHanging.Load(); n == 0 || n > int64(len(fn.node.Shards())) {
		t.Fatalf("%d proposals hung on shard %d at once; want 1 to %d (one per source)", n, hung, len(fn.node.Shards()))
	}

	unhang()
	all := append(append(slices.Clone(elsewhere), onFailing...), onHung...)
	testkit.Wait(t, 15*time.Second, "the members of the released shard to catch up", complete(all))
	have(all)
	testkit.WaitTrue(t, 10*time.Second, "outboxes to be trimmed", func() bool {
		for _, s := range fn.node.Shards() {
			state, _ := fn.node.State(s)
			if info, _ := state.Outbox(); info.First <= info.Head {
				return false
			}
		}
		return true
	})
	trimmedOnlyWhatAllHave()
}

// TestFanoutLaneCombinesSources: the deliveries of seven sources to one slow destination share
// its lane — never more than one proposal to it at a time, and the batches that queued while one
// was committing go together in the next — so the destination takes a few Raft entries per wave
// of sends instead of one per source, and still gets every entry once, in order.
func TestFanoutLaneCombinesSources(t *testing.T) {
	const dst = raftstore.ShardID(5)
	const waves = 5
	fn := startFanoutNode(t, t.TempDir())
	defer fn.stop(t)
	var onDst, elsewhere string
	for i := 0; onDst == "" || elsewhere == ""; i++ {
		uid := fmt.Sprintf("u%03d", i)
		if s := fn.slots.UserShard(uid); s == dst && onDst == "" {
			onDst = uid
		} else if s != dst && elsewhere == "" {
			elsewhere = uid
		}
	}
	// One group homed on every other shard, with the user on dst as a member.
	convs := map[raftstore.ShardID]string{}
	for i := 0; len(convs) < len(fn.node.Shards())-1; i++ {
		conv := fmt.Sprintf("g%d", i)
		if s := fn.slots.ConvShard(conv); s != dst && convs[s] == "" {
			convs[s] = conv
		}
	}
	acks := &sent{convs: map[string][]log.MsgID{}}
	members := []string{onDst, elsewhere}
	slices.Sort(members)
	propose := func(conv string, req *log.Append) {
		res, err := fn.node.Propose(context.Background(), fn.slots.ConvShard(conv), raftstore.AppendCommand(req))
		if err != nil {
			t.Error(err)
			return
		}
		acks.ack(conv, res.Append)
	}
	for _, conv := range convs {
		propose(conv, &log.Append{Conv: conv, Sender: elsewhere, ClientMsgID: "create", Kind: log.KindGroupCreate, Members: members})
	}
	received := func(n int) func() (bool, string) {
		return func() (bool, string) {
			state, _ := fn.node.State(dst)
			info, _ := state.UserInfo(onDst)
			return int(info.Head) >= n, fmt.Sprintf("%s has %d of %d entries", onDst, info.Head, n)
		}
	}
	testkit.Wait(t, 10*time.Second, "the creations to arrive", received(len(convs)))

	// From now on every proposal to dst takes 50 ms: while one commits, the others' batches queue.
	var mu sync.Mutex
	inFlight, maxInFlight, proposals := 0, 0, 0
	fn.node.FailProposals(func(shard raftstore.ShardID, _ raftstore.Command) error {
		if shard != dst {
			return nil
		}
		mu.Lock()
		inFlight++
		proposals++
		maxInFlight = max(maxInFlight, inFlight)
		mu.Unlock()
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		inFlight--
		mu.Unlock()
		return nil
	})
	for w := range waves {
		var wg sync.WaitGroup
		for _, conv := range convs {
			wg.Go(func() {
				propose(conv, &log.Append{Conv: conv, Sender: elsewhere, ClientMsgID: fmt.Sprint("m", w), Kind: log.KindMessage,
					Body: []byte(fmt.Sprint("wave ", w))})
			})
		}
		wg.Wait()
		testkit.Wait(t, 10*time.Second, fmt.Sprint("wave ", w, " to arrive"), received(len(convs)*(w+2)))
	}
	for _, conv := range convs {
		checkUserLog(t, fn, onDst, conv, acks.convs[conv])
	}
	mu.Lock()
	defer mu.Unlock()
	if maxInFlight != 1 {
		t.Errorf("%d proposals to shard %d at once; want 1 (one lane per destination)", maxInFlight, dst)
	}
	// One proposal per source and wave would be 7 a wave; a lane needs about two (the first
	// batch alone, the six that queued behind it together).
	if proposals > 4*waves {
		t.Errorf("%d proposals to shard %d for %d waves of %d sources; want at most %d", proposals, dst, waves, len(convs), 4*waves)
	}
	t.Logf("%d proposals to shard %d for %d waves of %d sources", proposals, dst, waves, len(convs))
}

// TestSourceReadKeepsRecentRecords: the drainer's reads of its outbox, served from the records
// it read last where it can, return exactly what reading the store returns — reading on from the
// end, from the middle, below the records kept, past them, after new appends and after the
// records no destination needs were forgotten — and keep at most recentMax windows.
func TestSourceReadKeepsRecentRecords(t *testing.T) {
	node := raftstoretest.OpenLocal(t, t.TempDir(), 2)
	defer func() {
		if err := node.Close(); err != nil {
			t.Error(err)
		}
	}()
	slots := cluster.Even(2)
	var conv string
	for i := 0; conv == ""; i++ {
		if c := fmt.Sprintf("g%d", i); slots.ConvShard(c) == 1 {
			conv = c
		}
	}
	state, _ := node.State(1)
	appendN := func(n int) {
		t.Helper()
		for range n {
			req := &log.Append{Conv: conv, Sender: "alice", ClientMsgID: fmt.Sprint(rand.Int64()), Kind: log.KindMessage, Body: []byte("x")}
			if _, err := node.Propose(context.Background(), 1, raftstore.AppendCommand(req)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := node.Propose(context.Background(), 1, raftstore.AppendCommand(&log.Append{Conv: conv, Sender: "alice",
		ClientMsgID: "create", Kind: log.KindGroupCreate, Members: []string{"alice", "bob"}})); err != nil {
		t.Fatal(err)
	}
	appendN(39)
	s := &source{id: 1, dests: map[raftstore.ShardID]*dest{1: {id: 1}, 2: {id: 2}}}
	const n = 8
	check := func(from uint64) []log.OutboxItem {
		t.Helper()
		info, err := state.Outbox()
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.read(state, info, from, n)
		if err != nil {
			t.Fatal(err)
		}
		want, err := state.ReadOutbox(from, n)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("read(%d): positions %v, want %v", from, positions(got), positions(want))
		}
		if len(s.recent) > recentMax*n {
			t.Fatalf("%d records kept, at most %d", len(s.recent), recentMax*n)
		}
		return got
	}
	if got := check(1); len(got) != n || got[0].Pos != 1 {
		t.Fatalf("the first read: %v", positions(got))
	}
	for from := uint64(1); from <= 41; from += 3 { // on from the end, overlapping, then past the head
		check(from)
	}
	check(20) // inside what is kept
	check(2)  // below it: read from the store, the records kept stay
	appendN(10)
	check(38) // extends what is kept with the new records
	s.dests[1].clean, s.dests[2].clean = 44, 45
	s.forget()
	if len(s.recent) == 0 || s.recent[0].Pos != 45 {
		t.Fatalf("after forgetting up to 44: kept from %v", positions(s.recent))
	}
	check(45)
	check(60) // past everything: the store says there is nothing
	s.dests[1].clean, s.dests[2].clean = 50, 50
	s.forget()
	if len(s.recent) != 0 {
		t.Fatalf("kept %v after every destination passed them", positions(s.recent))
	}
	check(51)
}

func positions(items []log.OutboxItem) []uint64 {
	var out []uint64
	for _, it := range items {
		out = append(out, it.Pos)
	}
	return out
}

// growingRouter routes users over the first shards of a Local, and, once grown, pins one user to
// a shard that was never routed to before (a shard added online, a user moved there).
type growingRouter struct {
	base  *cluster.Routing
	mu    sync.Mutex
	user  string
	shard raftstore.ShardID
}

func (r *growingRouter) UserShard(uid string) raftstore.ShardID {
	r.mu.Lock()
	defer r.mu.Unlock()
	if uid == r.user {
		return r.shard
	}
	return r.base.UserShard(uid)
}

func (r *growingRouter) Shards() []raftstore.ShardID {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := slices.Clone(r.base.Shards())
	if r.shard != 0 {
		s = append(s, r.shard)
	}
	return s
}

// TestFanoutToAShardThatJoinedLater: a shard that starts receiving after the sources have
// trimmed their outboxes (it joined the routing later) answers a mark below their first
// positions; the fan-out starts its stream there, since the trimmed positions hold nothing for
// it, instead of resending from its own idea of the mark forever.
func TestFanoutToAShardThatJoinedLater(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelError}))
	node := raftstoretest.OpenLocal(t, t.TempDir(), 8)
	defer node.Close()
	router := &growingRouter{base: cluster.Even(4)}
	fan := New(node, router, Config{Batch: 64, Logger: logger})
	node.OnApplied(fan.Notify)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); fan.Run(ctx) }()
	defer func() { cancel(); <-done }()

	const group = "g"
	members := []string{"ann", "bob", "cid", "dan"}
	home := router.base.ConvShard(group)
	propose := func(req *log.Append) {
		t.Helper()
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		defer pcancel()
		if _, err := node.Propose(pctx, home, raftstore.AppendCommand(req)); err != nil {
			t.Fatal(err)
		}
	}
	propose(&log.Append{Conv: group, Sender: "ann", ClientMsgID: "create", Kind: log.KindGroupCreate, Members: members})
	for i := range 20 {
		propose(&log.Append{Conv: group, Sender: "ann", ClientMsgID: fmt.Sprint("m", i), Kind: log.KindMessage, Body: []byte("x")})
	}
	homeState, _ := node.State(home)
	testkit.WaitTrue(t, 10*time.Second, "the home shard's outbox to be trimmed", func() bool {
		info, _ := homeState.Outbox()
		return info.First > 1 && info.First > info.Head
	})

	router.mu.Lock()
	router.user, router.shard = "eve", 8 // shard 8 was never a destination
	router.mu.Unlock()
	propose(&log.Append{Conv: group, Sender: "ann", ClientMsgID: "add", Kind: log.KindMemberAdd, Members: []string{"eve"}})
	propose(&log.Append{Conv: group, Sender: "ann", ClientMsgID: "hi", Kind: log.KindMessage, Body: []byte("hi eve")})
	eve, _ := node.State(8)
	testkit.WaitTrue(t, 10*time.Second, "eve's log on shard 8 to hold the addition and the message", func() bool {
		info, err := eve.UserInfo("eve")
		return err == nil && info.Head == 2
	})
	if m, _ := eve.SourceMark(home); m != 23 {
		t.Fatalf("shard 8's mark for the home shard is %d, want 23", m)
	}
}

// TestFanoutRoutesCachedRecordsByTheirCutover: a moved user's record read (and kept among the
// recent records) before its source cut the user over must still go where its position says —
// the old shard — when a lagging destination's batch is built from it after the cluster map
// routes the user to the new shard; it must not reach the user a second time there.
func TestFanoutRoutesCachedRecordsByTheirCutover(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelError}))
	node := raftstoretest.OpenLocal(t, t.TempDir(), 4)
	defer node.Close()
	base := cluster.Even(4)
	const group = "g"
	home := base.ConvShard(group)
	// mover lives on shard a, and moves to shard b, where bee lives (its stream will lag).
	pick := func(not ...raftstore.ShardID) (string, raftstore.ShardID) {
		for i := 0; ; i++ {
			u := fmt.Sprint("u", i)
			if s := base.UserShard(u); !slices.Contains(not, s) {
				return u, s
			}
		}
	}
	mover, a := pick(home)
	bee, b := pick(home, a)
	router := &growingRouter{base: base}
	fan := New(node, router, Config{Batch: 64, DeliverTimeout: 200 * time.Millisecond, Logger: logger})
	var hold atomic.Bool
	fan.SetFault(func(dest raftstore.ShardID, _ []log.Delivery) {
		if dest == b && hold.Load() {
			time.Sleep(300 * time.Millisecond) // past the delivery's timeout: it fails, b's mark stays
		}
	})
	node.OnApplied(fan.Notify)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); fan.Run(ctx) }()
	defer func() { cancel(); <-done }()
	propose := func(shard raftstore.ShardID, cmd raftstore.Command) raftstore.Result {
		t.Helper()
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		defer pcancel()
		res, err := node.Propose(pctx, shard, cmd)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	propose(home, raftstore.AppendCommand(&log.Append{Conv: group, Sender: "ann", ClientMsgID: "create", Kind: log.KindGroupCreate, Members: []string{mover, bee}}))
	moverA, _ := node.State(a)
	testkit.WaitTrue(t, 10*time.Second, "the creation delivered", func() bool { i, _ := moverA.UserInfo(mover); return i.Head == 1 })

	hold.Store(true)
	propose(home, raftstore.AppendCommand(&log.Append{Conv: group, Sender: "ann", ClientMsgID: "m1", Kind: log.KindMessage, Body: []byte("x")}))
	testkit.WaitTrue(t, 10*time.Second, "m1 delivered to the mover on a", func() bool { i, _ := moverA.UserInfo(mover); return i.Head == 2 })
	// The move: the home cuts the mover over to b (m1 is before the cutover: it belongs to a),
	// then the map routes the mover to b; only then does b's stream go again.
	propose(home, raftstore.MoveCommand(&log.MoveStep{Op: log.MoveCutover, Move: 5, User: mover, From: a, To: b}))
	router.mu.Lock()
	router.user, router.shard = mover, b
	router.mu.Unlock()
	hold.Store(false)
	bState, _ := node.State(b)
	testkit.WaitTrue(t, 10*time.Second, "b to have m1 for bee", func() bool { i, _ := bState.UserInfo(bee); return i.Head == 2 })
	if i, err := bState.UserInfo(mover); err != nil || i.Head != 0 {
		t.Fatalf("the mover's log on b holds %d entries (%v): a record before the cutover was delivered there too", i.Head, err)
	}
}
