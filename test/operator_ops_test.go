package test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto/ident"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestOperatorActionsRandomized runs a random sequence of operator actions — shards added, users'
// logs, sub-logs and conversations moved, ranges of slots moved, shards split, users' streams
// split — while the conversations homed on a random few shards carry traffic at each step, so
// that the other shards stay idle, some for several actions in a row. Every action must finish within moveBound, and
// at the end every message sent reaches every member's device exactly once, in its
// conversation's order, with no device told to rebase or that its epoch changed.
//
// The short run (always on) is a single node and 16 actions; SYNCD_FAULT_LONG=1 runs three
// nodes and 40. The seed is logged; SYNCD_FAULT_SEED=<seed> replays a sequence.
func TestOperatorActionsRandomized(t *testing.T) {
	seed, long := faultMode(t)
	t.Logf("seed %d (rerun with SYNCD_FAULT_SEED=%d); long mode %v", seed, seed, long)
	rng := rand.New(rand.NewPCG(seed, seed))

	var servers []*syncd.Server
	actions := 16
	if long {
		c := syncdtest.StartCluster(t, 3, nil)
		for i := range c.Size() {
			servers = append(servers, c.Server(i))
		}
		actions = 40
	} else {
		servers = []*syncd.Server{startServer(t)}
	}
	ops := &operator{t: t, rng: rng, servers: servers}

	// Six users, one of them on two devices; five direct conversations and two groups, each with
	// one sender, so that its order is the order of that sender's sends.
	users := []string{"ann", "ben", "cat", "dan", "eve", "fay"}
	devices := map[string][]*device{}
	for i, u := range users {
		srv := servers[i%len(servers)]
		d := dialDevice(t, srv, u, "phone", t.TempDir())
		t.Cleanup(func() { d.Close() })
		devices[u] = append(devices[u], d)
	}
	laptop := dialDevice(t, servers[len(servers)-1], "ann", "laptop", t.TempDir())
	t.Cleanup(func() { laptop.Close() })
	devices["ann"] = append(devices["ann"], laptop)

	var convs []*opsConv
	for _, pair := range [][2]string{{"ann", "ben"}, {"cat", "dan"}, {"eve", "fay"}, {"ben", "eve"}, {"dan", "ann"}} {
		convs = append(convs, &opsConv{id: ident.DirectConv(pair[0], pair[1]), sender: pair[0], peer: pair[1], members: pair[:]})
	}
	for i, members := range [][]string{{"cat", "ann", "eve"}, {"fay", "ben", "dan", "ann"}} {
		g := &opsConv{id: fmt.Sprintf("g:ops%d", i), sender: members[0], members: members}
		if _, err := devices[g.sender][0].CreateGroup(g.id, members[1:]); err != nil {
			t.Fatal(err)
		}
		var all []*device
		for _, u := range members {
			all = append(all, devices[u]...)
		}
		waitMember(t, g.id, all...)
		convs = append(convs, g)
	}

	// One sender per conversation, sending while its conversation is active.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, cv := range convs {
		wg.Go(func() { cv.send(t, devices[cv.sender][0], stop) })
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()

	for i := range actions {
		// Traffic on the conversations homed on up to two random shards: the others stay idle,
		// some of them for several actions in a row.
		m, _ := servers[0].Cluster().Map()
		table := servers[0].Cluster().Routing()
		shards := m.DataShards()
		busy := map[raftstore.ShardID]bool{}
		for range rng.IntN(3) {
			busy[shards[rng.IntN(len(shards))]] = true
		}
		var active []string
		for _, cv := range convs {
			on := busy[table.ConvShard(cv.id)]
			cv.active.Store(on)
			if on {
				active = append(active, cv.id)
			}
		}
		what := ops.act()
		t.Logf("action %d: %s; traffic on %v", i+1, what, active)
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
	}
	for _, cv := range convs {
		cv.active.Store(false) // from here on no send is queued; bodies waits for one being queued
	}

	total := 0
	for _, cv := range convs {
		sent := cv.bodies()
		total += len(sent)
		for _, u := range cv.members {
			for i, d := range devices[u] {
				var got []string
				testkit.Wait(t, 30*time.Second, fmt.Sprintf("%s's device %d to store every message of %s", u, i, cv.id), func() (bool, string) {
					got = bodies(t, d, cv.id)
					return slices.Equal(got, sent), fmt.Sprintf("stores %d of %d: %s", len(got), len(sent), diffBodies(got, sent))
				})
			}
		}
	}
	for u, ds := range devices {
		for i, d := range ds {
			select {
			case e := <-d.rebases:
				t.Errorf("%s's device %d was told to rebase: %+v", u, i, e)
			case e := <-d.epochs:
				t.Errorf("%s's device %d was told its epoch changed: %+v", u, i, e)
			default:
			}
		}
	}
	t.Logf("%d actions, %d messages, every one stored once and in order on every member's devices", actions, total)
}

// opsConv is a conversation of TestOperatorActionsRandomized and what its sender sent.
type opsConv struct {
	id, sender, peer string
	members          []string
	active           atomic.Bool
	// mu is held while a send is being queued, and guards sent: bodies, once active is false,
	// returns every message sent for good. (Not a WaitGroup for the sends in progress: its Add
	// from zero would race the Wait, as the race detector said.)
	mu   sync.Mutex
	sent []string
}

// send queues a message from d every 15 ms while the conversation is active, until stop closes.
func (cv *opsConv) send(t *testing.T, d *device, stop <-chan struct{}) {
	for n := 0; ; {
		select {
		case <-stop:
			return
		case <-time.After(15 * time.Millisecond):
		}
		if !cv.queue(t, d, n) {
			return
		}
		n++
	}
}

// queue sends message n from d if the conversation is active, reporting false if the send failed.
func (cv *opsConv) queue(t *testing.T, d *device, n int) bool {
	cv.mu.Lock()
	defer cv.mu.Unlock()
	if !cv.active.Load() {
		return true
	}
	body := fmt.Sprintf("%s %d", cv.id, n)
	if _, err := d.Send(cv.id, cv.peer, []byte(body)); err != nil {
		t.Errorf("send %q: %v", body, err)
		return false
	}
	cv.sent = append(cv.sent, body)
	return true
}

func (cv *opsConv) bodies() []string {
	cv.mu.Lock()
	defer cv.mu.Unlock()
	return slices.Clone(cv.sent)
}

// operator picks and carries out random operator actions through the admin API of random nodes.
type operator struct {
	t       *testing.T
	rng     *rand.Rand
	servers []*syncd.Server
}

// act carries out one action the cluster map allows, waits for it to finish within moveBound,
// and describes it.
func (o *operator) act() string {
	srv := o.servers[o.rng.IntN(len(o.servers))]
	m, _ := srv.Cluster().Map()
	table := srv.Cluster().Routing()
	shards := m.DataShards()
	other := func(not raftstore.ShardID) raftstore.ShardID {
		for {
			if s := shards[o.rng.IntN(len(shards))]; s != not {
				return s
			}
		}
	}
	users := []string{"ann", "ben", "cat", "dan", "eve", "fay"}
	convs := []string{ident.DirectConv("ann", "ben"), ident.DirectConv("cat", "dan"), ident.DirectConv("ben", "eve"), "g:ops0", "g:ops1"}
	for {
		switch o.rng.IntN(7) {
		case 0: // a shard added by hand, owning nothing until slots or keys move to it
			if len(shards) >= 7 {
				continue
			}
			code, body := testkit.HTTP(o.t, http.MethodPost, o.admin(srv)+"/v1/shards", testkit.Bearer(srv.AdminToken()))
			if code != http.StatusOK {
				o.t.Fatalf("POST /v1/shards: HTTP %d %s", code, body)
			}
			testkit.WaitTrue(o.t, moveBound, "the new shard to have a leader", func() bool {
				m, _ := srv.Cluster().Map()
				return len(m.Creating) == 0
			})
			return "shard added: " + strings.TrimSpace(body)
		case 1: // a user's log to another shard, or to a new one
			u := users[o.rng.IntN(len(users))]
			if len(shards) < 7 && o.rng.IntN(3) == 0 {
				return o.move(srv, "user="+u+"&new_shard=1")
			}
			return o.move(srv, fmt.Sprintf("user=%s&to=%d", u, other(table.UserShard(u))))
		case 2: // a sub-log of a split user
			var subs []string
			for uid, s := range m.Splits {
				for i := 1; i < s.Subs; i++ {
					subs = append(subs, log.SubLog(uid, i))
				}
			}
			if len(subs) == 0 {
				continue
			}
			slices.Sort(subs) // the map's order is random: keep the run replayable
			sub := subs[o.rng.IntN(len(subs))]
			return o.move(srv, fmt.Sprintf("user=%s&to=%d", url.QueryEscape(sub), other(table.UserShard(sub))))
		case 3: // a conversation
			c := convs[o.rng.IntN(len(convs))]
			return o.move(srv, fmt.Sprintf("conv=%s&to=%d", url.QueryEscape(c), other(table.ConvShard(c))))
		case 4: // a range of slots, from the top of a range one shard owns
			r := m.Slots[o.rng.IntN(len(m.Slots))]
			if r.First == r.Last {
				continue
			}
			first := r.First + 1 + o.rng.IntN(r.Last-r.First)
			return o.move(srv, fmt.Sprintf("slots=%d-%d&to=%d", first, r.Last, other(r.Shard)))
		case 5: // a shard split in two
			r := m.Slots[o.rng.IntN(len(m.Slots))]
			if r.First == r.Last || len(shards) >= 7 {
				continue
			}
			return o.start(srv, fmt.Sprintf("/v1/shards/%d/split", r.Shard))
		case 6: // a user's stream into sub-logs
			u := users[o.rng.IntN(len(users))]
			if m.Splits[u].Subs != 0 {
				continue
			}
			return o.start(srv, fmt.Sprintf("/v1/users/%s/split?subs=%d", u, 2+o.rng.IntN(2)))
		}
	}
}

func (o *operator) admin(srv *syncd.Server) string { return "http://" + srv.AdminAddr().String() }

func (o *operator) move(srv *syncd.Server, query string) string {
	return o.start(srv, "/v1/moves?"+query)
}

// start starts a move or a split with POST path and waits for it to finish.
func (o *operator) start(srv *syncd.Server, path string) string {
	started := startMoveAndWait(o.t, srv, path)
	b, _ := json.Marshal(started)
	return fmt.Sprintf("%s: %s", path, b)
}
