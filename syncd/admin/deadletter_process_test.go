package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/test/testkit"
)

// dlqSetup is a two-shard server where alice (sender) and bob (recipient) live on different
// shards, and a user "decoy" on bob's shard is fenced by a move out of it (a real move step), so
// that a delivery naming it is refused with log.ErrMoving: a retryable refusal.
type dlqSetup struct {
	ts            *testServer
	admin         string
	bearer        testkit.RequestOption
	bob, conv     string
	bobShard, src raftstore.ShardID
	alice         *prototest.Conn
	sendSeq       int
}

func newDLQSetup(t *testing.T, tweak func(*syncd.Config)) *dlqSetup {
	t.Helper()
	ts := startServer(t, func(c *syncd.Config) { c.Shards = 2; tweak(c) })
	s := &dlqSetup{ts: ts, admin: "http://" + ts.AdminAddr().String(), bearer: testkit.Bearer(ts.AdminToken())}
	aliceShard := ts.slots.UserShard("alice")
	s.bob = "bob"
	for i := 0; ts.slots.UserShard(s.bob) == aliceShard; i++ {
		s.bob = fmt.Sprintf("bob%d", i)
	}
	s.bobShard = ts.slots.UserShard(s.bob)
	s.conv = "d:" + min("alice", s.bob) + ":" + max("alice", s.bob)
	s.src = ts.slots.ConvShard(s.conv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fence := raftstore.MoveCommand(&log.MoveStep{Op: log.MoveFence, Move: 77, User: "decoy"})
	if _, err := ts.Node().Propose(ctx, s.bobShard, fence); err != nil {
		t.Fatalf("fence the decoy on bob's shard: %v", err)
	}
	s.alice = connect(t, ts, "alice", "phone")
	return s
}

// setFault installs the fault injector: with retry, deliveries (and replays) of "retry" entries
// to bob's shard name the fenced decoy instead of bob; with permanent, "perm" entries arrive
// incomplete (log.ErrInvalid).
func (s *dlqSetup) setFault(retry, permanent bool) {
	s.ts.SetDeliveryFault(func(dest raftstore.ShardID, items []log.Delivery) {
		for i := range items {
			body := string(items[i].Entry.Body)
			switch {
			case dest != s.bobShard:
			case retry && strings.HasPrefix(body, "retry"):
				items[i].Users = []string{"decoy"} // refused: the decoy is fenced (ErrMoving)
			case permanent && strings.HasPrefix(body, "perm"):
				items[i].Entry.ConvSeq = 0 // refused: an incomplete entry (ErrInvalid)
			}
		}
	})
}

func (s *dlqSetup) send(t *testing.T, body string) *proto.Ack {
	t.Helper()
	s.sendSeq++
	return s.alice.Ack(&proto.Send{ID: s.alice.ID(), Conv: s.conv, ClientMsgID: fmt.Sprint("m", s.sendSeq), Body: []byte(body), Peer: s.bob})
}

// list returns the admin list of the held (or archived) dead letters.
func (s *dlqSetup) list(t *testing.T, archived bool) adminapi.DeadLetterList {
	t.Helper()
	url := s.admin + "/v1/deadletters"
	if archived {
		url += "?archived=1"
	}
	code, body := testkit.HTTP(t, "GET", url, s.bearer)
	var l adminapi.DeadLetterList
	if code != 200 || json.Unmarshal([]byte(body), &l) != nil {
		t.Fatalf("list: %d %s", code, body)
	}
	return l
}

// letter reads the dead letter of msg from the source shard's state (the replicated record).
func (s *dlqSetup) letter(t *testing.T, msg proto.MsgID) (log.DeadLetter, bool) {
	t.Helper()
	state, err := s.ts.Node().State(s.src)
	if err != nil {
		t.Fatal(err)
	}
	dls, err := state.DeadLetters(0, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, dl := range dls {
		if dl.Entry.MsgID.String() == string(msg) {
			return dl, true
		}
	}
	return log.DeadLetter{}, false
}

// bobCopies counts the entries of bob's log whose body is body.
func (s *dlqSetup) bobCopies(t *testing.T, body string) int {
	t.Helper()
	state, err := s.ts.Node().State(s.bobShard)
	if err != nil {
		t.Fatal(err)
	}
	r, err := state.ReadUser(s.bob, 0, 1, log.Limit{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range r.Entries {
		if string(e.Body) == body {
			n++
		}
	}
	return n
}

func (s *dlqSetup) metricsHave(t *testing.T, want ...string) {
	t.Helper()
	metrics := scrape(t, s.admin+"/metrics")
	for _, w := range want {
		if !strings.Contains(metrics, w) {
			t.Errorf("metrics lack %q", w)
		}
	}
}

// TestDeadLetterCompensation runs the dead-letter process on a real server: a delivery refused
// for a passing state (a fenced user: retryable) is replayed automatically with doubling waits
// while the refusal lasts, up to the cap, after which it stays listed as given up; one refused
// as malformed (permanent) is never retried; a retryable one whose cause passes is delivered by
// the compensation exactly once; the counts per reason and of the process are in /metrics.
func TestDeadLetterCompensation(t *testing.T) {
	const base = 200 * time.Millisecond
	s := newDLQSetup(t, func(c *syncd.Config) {
		c.DeadLetterRetryBase = base
		c.DeadLetterRetryMaxAttempts = 3
	})
	s.setFault(true, true)
	retry1 := s.send(t, "retry 1")
	perm := s.send(t, "perm 1")

	var l adminapi.DeadLetterList
	testkit.WaitTrue(t, 5*time.Second, "two dead letters", func() bool { l = s.list(t, false); return l.Total == 2 })
	for _, dl := range l.Items {
		switch dl.MsgID {
		case string(retry1.MsgID):
			if dl.Class != "retryable" || !strings.Contains(dl.Reason, "moving") {
				t.Errorf("the fenced delivery: %+v", dl)
			}
		case string(perm.MsgID):
			if dl.Class != "permanent" || dl.NextTry != nil || dl.Attempts != 0 || !strings.Contains(dl.Reason, "incomplete entry") {
				t.Errorf("the malformed delivery: %+v", dl)
			}
		default:
			t.Errorf("unexpected dead letter %+v", dl)
		}
	}
	s.metricsHave(t,
		fmt.Sprintf(`syncd_dead_letters_by_reason{reason="permanent",shard="%d"} 1`, s.src),
		fmt.Sprintf(`syncd_dead_letters_by_reason{reason="unknown",shard="%d"} 0`, s.src))

	// Each refused replay is an attempt in the record, the next one scheduled twice as far:
	// NextTry − LastTry is at most base·2^attempts, and more than half of it (the pass's time
	// between reading the clock and proposing).
	seen := map[uint32]log.DeadLetter{}
	testkit.WaitTrue(t, 20*time.Second, "the retries to reach the cap", func() bool {
		dl, ok := s.letter(t, retry1.MsgID)
		if !ok {
			t.Fatal("the retryable dead letter vanished while its destination still refuses")
		}
		if _, dup := seen[dl.Attempts]; !dup {
			seen[dl.Attempts] = dl
		}
		time.Sleep(5 * time.Millisecond)
		return dl.GaveUp()
	})
	for attempts := uint32(1); attempts < 3; attempts++ {
		dl, ok := seen[attempts]
		if !ok {
			t.Fatalf("attempt %d never observed (saw %v)", attempts, seen)
		}
		gap := time.Duration(dl.NextTry - dl.LastTry)
		want := base << attempts
		if dl.Class() != log.ClassRetryable || gap > want || gap <= want/2 {
			t.Errorf("after attempt %d: next try %v after the last, want about %v: %+v", attempts, gap, want, dl)
		}
	}
	if first := seen[1]; time.Duration(first.LastTry-first.FailedAt) < base {
		t.Errorf("first replay %v after the refusal, before the base %v", time.Duration(first.LastTry-first.FailedAt), base)
	}
	last := seen[3]
	if last.Attempts != 3 || last.NextTry != 0 {
		t.Fatalf("at the cap: %+v", last)
	}

	// Given up: it stays, listed for the operator; the permanent one was never tried.
	time.Sleep(3 * base)
	l = s.list(t, false)
	if l.Total != 2 {
		t.Fatalf("after giving up: %+v", l)
	}
	for _, dl := range l.Items {
		if dl.MsgID == string(retry1.MsgID) && (!dl.GaveUp || dl.Attempts != 3 || dl.NextTry != nil) {
			t.Errorf("given up: %+v", dl)
		}
		if dl.MsgID == string(perm.MsgID) && (dl.Attempts != 0 || dl.GaveUp) {
			t.Errorf("the permanent one was retried: %+v", dl)
		}
	}
	if n := s.bobCopies(t, "retry 1"); n != 0 {
		t.Errorf("bob has %d copies of the refused entry", n)
	}
	s.metricsHave(t,
		fmt.Sprintf(`syncd_dead_letters_by_reason{reason="retryable",shard="%d"} 1`, s.src),
		fmt.Sprintf(`syncd_dead_letters_gave_up{shard="%d"} 1`, s.src),
		`syncd_dead_letter_compensation_total{result="refused"} 2`,
		`syncd_dead_letter_compensation_total{result="gave_up"} 1`)

	// A retryable one whose cause passes: the compensation delivers it, exactly once.
	retry2 := s.send(t, "retry 2")
	testkit.WaitTrue(t, 5*time.Second, "the second retryable dead letter", func() bool { _, ok := s.letter(t, retry2.MsgID); return ok })
	s.setFault(false, true) // the fence no longer catches its users
	testkit.WaitTrue(t, 10*time.Second, "the compensation to deliver it", func() bool { return s.bobCopies(t, "retry 2") == 1 })
	testkit.WaitTrue(t, 5*time.Second, "its dead letter to go", func() bool { _, ok := s.letter(t, retry2.MsgID); return !ok })
	time.Sleep(3 * base) // more passes: still once
	if n := s.bobCopies(t, "retry 2"); n != 1 {
		t.Errorf("bob has %d copies of the compensated entry, want 1", n)
	}
	if dl, ok := s.letter(t, retry1.MsgID); !ok || dl.Attempts != 3 {
		t.Errorf("the given-up one was retried again or went: %+v %v", dl, ok)
	}
	s.metricsHave(t,
		`syncd_dead_letter_compensation_total{result="replayed"} 1`,
		fmt.Sprintf(`syncd_dead_letters{shard="%d"} 2`, s.src))
}

// TestDeadLetterArchive: dead letters not retried move to the archive once older than
// dead_letter_archive_after, out of the held count; the archive is listed apart, and its dead
// letters are replayed (exactly once) or dropped by the operator, never lost silently.
func TestDeadLetterArchive(t *testing.T) {
	const age = 400 * time.Millisecond
	s := newDLQSetup(t, func(c *syncd.Config) {
		c.DeadLetterRetryBase = 100 * time.Millisecond
		c.DeadLetterArchiveAfter = age
	})
	s.setFault(false, true)
	p1, p2 := s.send(t, "perm 1"), s.send(t, "perm 2")
	testkit.WaitTrue(t, 5*time.Second, "two held dead letters", func() bool { return s.list(t, false).Total == 2 })
	var archived adminapi.DeadLetterList
	testkit.WaitTrue(t, 10*time.Second, "both archived", func() bool {
		archived = s.list(t, true)
		return archived.Total == 2 && s.list(t, false).Total == 0
	})
	for _, dl := range archived.Items {
		if dl.ArchivedAt == nil || dl.ArchivedAt.Sub(dl.FailedAt) < age || dl.Class != "permanent" {
			t.Errorf("archived: %+v", dl)
		}
	}
	s.metricsHave(t,
		fmt.Sprintf(`syncd_dead_letters{shard="%d"} 0`, s.src),
		fmt.Sprintf(`syncd_dead_letters_archived{shard="%d"} 2`, s.src),
		`syncd_dead_letter_compensation_total{result="archived"} 2`)

	s.ts.SetDeliveryFault(nil) // the cause is fixed
	ids := map[string]string{}
	for _, dl := range archived.Items {
		ids[dl.MsgID] = dl.ID
	}
	if code, body := testkit.HTTP(t, "POST", s.admin+"/v1/deadletters/"+ids[string(p1.MsgID)]+"/replay", s.bearer); code != 200 || !strings.Contains(body, `"appended": 1`) {
		t.Fatalf("replay from the archive: %d %s", code, body)
	}
	if code, body := testkit.HTTP(t, "POST", s.admin+"/v1/deadletters/"+ids[string(p1.MsgID)]+"/replay", s.bearer); code != http.StatusNotFound {
		t.Fatalf("second replay from the archive: %d %s", code, body)
	}
	if code, body := testkit.HTTP(t, "DELETE", s.admin+"/v1/deadletters/"+ids[string(p2.MsgID)], s.bearer); code != 200 {
		t.Fatalf("drop from the archive: %d %s", code, body)
	}
	if n := s.bobCopies(t, "perm 1"); n != 1 {
		t.Errorf("bob has %d copies of the replayed archived entry", n)
	}
	if n := s.bobCopies(t, "perm 2"); n != 0 {
		t.Errorf("bob has %d copies of the dropped archived entry", n)
	}
	if l := s.list(t, true); l.Total != 0 || len(l.Items) != 0 {
		t.Errorf("archive after replay and drop: %+v", l)
	}
	s.metricsHave(t, fmt.Sprintf(`syncd_dead_letters_archived{shard="%d"} 0`, s.src))
}
