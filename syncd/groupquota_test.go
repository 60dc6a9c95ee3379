package syncd

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// userGroups returns how many groups uid is in, as its shard counts them.
func userGroups(t *testing.T, ts *testServer, uid string) int {
	t.Helper()
	st, err := ts.node.State(ts.slots.UserShard(uid))
	if err != nil {
		t.Fatal(err)
	}
	n, err := st.UserGroups([]string{uid})
	if err != nil {
		t.Fatal(err)
	}
	return n[0]
}

// TestGroupQuotaNotSpentByStrangers (issue #21, 6: one user put a victim into 1,000 groups, after
// which nobody could add the victim to any group): users the victim has not talked to fill at most
// the stranger share of the victim's quota; the rest stays for people the victim has talked to
// and for the victim's own groups.
func TestGroupQuotaNotSpentByStrangers(t *testing.T) {
	const limit = 10
	ts := startServer(t, func(c *Config) { c.MaxGroupsPerUser = limit })
	strangers := strangerGroups(limit)
	mallory := connect(t, ts, "mallory", "laptop")
	victim := connect(t, ts, "victim", "phone")
	created := 0
	for i := range limit {
		f := mallory.Do(&proto.CreateGroup{ID: mallory.ID(), Conv: fmt.Sprint("spam", i), ClientMsgID: fmt.Sprint("s", i), Members: []string{"victim"}})
		if _, ok := f.(*proto.Ack); ok {
			created++
			continue
		}
		if e, ok := f.(*proto.Error); !ok || e.Code != proto.CodeTooManyGroups || !strings.Contains(e.Message, "victim") {
			t.Fatalf("spam group %d: %#v, want ack or too_many_groups naming the victim", i, f)
		}
	}
	if created != strangers {
		t.Fatalf("a stranger put the victim into %d groups of %d, want the stranger share %d", created, limit, strangers)
	}
	testkit.WaitTrue(t, 10*time.Second, "the victim's count to reach the stranger share", func() bool { return userGroups(t, ts, "victim") == strangers })

	// alice has talked to the victim: the victim read her message in their direct conversation.
	alice := connect(t, ts, "alice", "phone")
	dm := proto.DirectConv("alice", "victim")
	alice.Ack(&proto.Send{ID: alice.ID(), Conv: dm, Peer: "victim", ClientMsgID: "hi", Body: []byte("hi")})
	victim.Ack(&proto.MarkRead{ID: victim.ID(), Conv: dm, ClientMsgID: "r1", UpTo: 1})
	alice.Ack(&proto.CreateGroup{ID: alice.ID(), Conv: "friends", ClientMsgID: "f", Members: []string{"victim"}})
	// Another stranger is refused too, saying why.
	trudy := connect(t, ts, "trudy", "laptop")
	e, ok := trudy.Do(&proto.CreateGroup{ID: trudy.ID(), Conv: "t1", ClientMsgID: "t1", Members: []string{"victim"}}).(*proto.Error)
	if !ok || e.Code != proto.CodeTooManyGroups || !strings.Contains(e.Message, "talked") {
		t.Fatalf("another stranger: %#v, want too_many_groups saying the victim has not talked to them", e)
	}
	// The victim's own group counts against the whole quota.
	victim.Ack(&proto.CreateGroup{ID: victim.ID(), Conv: "mine", ClientMsgID: "m", Members: []string{"alice"}})
	testkit.WaitTrue(t, 10*time.Second, "the victim's count", func() bool { return userGroups(t, ts, "victim") == strangers+2 })
}

// TestGroupQuotaConcurrentCreators (issue #21, 6: with a cap of 10, eight concurrent creators got
// a victim into 20 groups): creations naming the same user through one node hold a place in the
// user's count from their check until their delivery shows in it, so concurrent creators cannot
// pass the cap together.
func TestGroupQuotaConcurrentCreators(t *testing.T) {
	const limit = 10
	ts := startServer(t, func(c *Config) { c.MaxGroupsPerUser = limit })
	var conns []*prototest.Conn
	for i := range 8 {
		conns = append(conns, connect(t, ts, fmt.Sprint("creator", i), "laptop"))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := 0
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 3 {
				f := c.Do(&proto.CreateGroup{ID: c.ID(), Conv: fmt.Sprintf("c%d-%d", i, j), ClientMsgID: fmt.Sprint(j), Members: []string{"victim"}})
				if _, ok := f.(*proto.Ack); ok {
					mu.Lock()
					acked++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	want := strangerGroups(limit)
	if acked > want {
		t.Fatalf("%d concurrent creations naming the victim were accepted, want at most the stranger share %d of %d", acked, want, limit)
	}
	testkit.WaitTrue(t, 10*time.Second, "the victim's count to show every accepted group", func() bool { return userGroups(t, ts, "victim") == acked })
}

// TestGroupSeatsLeaveWithTheirDeliveries: a seat holds a place until the count shows it or it
// expires, and seats of users never named again are swept, so the map holds only what was
// admitted within seatHold.
func TestGroupSeatsLeaveWithTheirDeliveries(t *testing.T) {
	var g groupSeats
	now := time.Now()
	pass := func(int, int) error { return nil }
	if err := g.admit([]string{"a", "b"}, []int{3, 0}, now, pass); err != nil {
		t.Fatal(err)
	}
	if n := g.effective("a", 3, now); n != 4 {
		t.Fatalf("a's count with its seat: %d, want 4", n)
	}
	if n := g.effective("a", 4, now); n != 4 {
		t.Fatalf("a's count once the delivery shows: %d, want 4 (the seat left)", n)
	}
	var seen int
	g.admit([]string{"c"}, []int{0}, now.Add(seatHold), func(_, eff int) error { seen = eff; return nil })
	if _, kept := g.pending["b"]; kept || seen != 0 {
		t.Fatalf("after seatHold: b's seats kept %v, c counted %d", kept, seen)
	}
}

// TestGroupSeatsStaleCount: counts are read before the seats' lock, so a check may bring a count
// older than one another check already used to drop seats; it must not count those seats' groups
// as neither delivered nor pending (TestGroupQuotaConcurrentCreators let one creation too many
// through under load).
func TestGroupSeatsStaleCount(t *testing.T) {
	var g groupSeats
	now := time.Now()
	for n := range 3 { // three creations admitted at counts 0: seats want 1, 2 and 3
		if err := g.admit([]string{"v"}, []int{0}, now, func(_, eff int) error {
			if eff != n {
				t.Fatalf("admission %d saw %d", n, eff)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if n := g.effective("v", 2, now); n != 3 { // two delivered, one pending
		t.Fatalf("with a count of 2: %d, want 3", n)
	}
	if n := g.effective("v", 1, now); n != 3 { // a count read before the second delivery
		t.Fatalf("with a stale count of 1: %d, want 3", n)
	}
}
