package client

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestSDKRebasesFromServerState (PROTOCOL §8.4, Rebase): a new device of a user whose log is
// further behind than its Config.Ceiling is not replayed the log: the server answers Rebase to
// the ceiling the SDK sends, and the SDK loads the conversation list and each conversation's
// recent history through a real server into its store — messages, members as they are now, the
// user's read mark — then syncs on from the head: the next message arrives as an entry right
// after it.
func TestSDKRebasesFromServerState(t *testing.T) {
	srv := syncdtest.Start(t, func(c *syncd.Config) { c.Shards = 2 })
	connect := func(user string) *prototest.Conn {
		tok, err := srv.MintToken(user, "raw", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return prototest.Connect(t, srv.Addr().String(), srv.Fingerprint(), tok, user, "raw")
	}
	alice, bobRaw := connect("alice"), connect("bob")
	direct := proto.DirectConv("alice", "bob")
	n := 0
	send := func(conv, body string) {
		n++
		alice.Ack(&proto.Send{ID: alice.ID(), Conv: conv, ClientMsgID: fmt.Sprint("c", n), Body: []byte(body), Peer: "bob"})
	}
	// The group: created with bob and carol, eight messages, carol removed (conv_seq 1 to 10).
	alice.Ack(&proto.CreateGroup{ID: alice.ID(), Conv: "team", ClientMsgID: "create", Members: []string{"bob", "carol"}})
	for i := range 8 {
		send("team", fmt.Sprint("t", i))
	}
	alice.Ack(&proto.RemoveMembers{ID: alice.ID(), Conv: "team", ClientMsgID: "remove", Members: []string{"carol"}})
	// The direct conversation: six messages, bob's read receipt up to 5 (conv_seq 7), ten more.
	for i := range 6 {
		send(direct, fmt.Sprint("d", i))
	}
	bobRaw.Ack(&proto.MarkRead{ID: bobRaw.ID(), Conv: direct, ClientMsgID: "read", UpTo: 5})
	for i := 6; i < 16; i++ {
		send(direct, fmt.Sprint("d", i))
	}
	const logLen = 1 + 8 + 1 + 6 + 1 + 10 // every entry above reaches bob's log
	testkit.WaitTrue(t, 10*time.Second, "bob's log to hold every entry", func() bool {
		h, ok := bobRaw.Do(&proto.HeadCheck{ID: bobRaw.ID()}).(*proto.Head)
		return ok && h.Head == logLen
	})

	token, err := srv.MintToken("bob", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bob := dialWith(t, Config{Addr: srv.Addr().String(), Token: token, Device: "phone", Fingerprint: srv.Fingerprint(),
		Ceiling: 5, RebaseHistory: 10})
	var rebase RebaseEvent
	for done := false; !done; {
		select {
		case ev := <-bob.Events():
			switch ev := ev.(type) {
			case EntryEvent:
				t.Fatalf("entry %d replayed: a log %d entries ahead of a ceiling of 5 is rebased, not replayed", ev.Entry.Seq, logLen)
			case RebaseEvent:
				rebase, done = ev, true
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no RebaseEvent within 10 s")
		}
	}
	if rebase.Head != logLen || rebase.Sub != 0 || !slices.Equal(rebase.Convs, []string{direct, "team"}) {
		t.Fatalf("RebaseEvent %+v; want head %d and both conversations", rebase, logLen)
	}

	bodies := func(conv string) []string {
		msgs, err := bob.Messages(conv)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range msgs {
			out = append(out, string(m.Body))
		}
		return out
	}
	// The group's ten entries are all loaded; of the direct conversation's 17, the latest ten
	// (conv_seq 8 to 17: d6 to d15, without bob's receipt).
	wantTeam := []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"}
	wantDirect := []string{"d6", "d7", "d8", "d9", "d10", "d11", "d12", "d13", "d14", "d15"}
	if got := bodies("team"); !slices.Equal(got, wantTeam) {
		t.Fatalf("team after the rebase: %q, want %q", got, wantTeam)
	}
	if got := bodies(direct); !slices.Equal(got, wantDirect) {
		t.Fatalf("%s after the rebase: %q, want %q", direct, got, wantDirect)
	}
	if m, err := bob.Members("team"); err != nil || !slices.Equal(m, []string{"alice", "bob"}) {
		t.Fatalf("team's members after the rebase: %q, %v; want alice and bob (carol removed)", m, err)
	}
	// Only ConvList says how far bob has read: his receipt is older than the history loaded.
	if rm, err := bob.ReadMark(direct, "bob"); err != nil || rm != 5 {
		t.Fatalf("bob's read mark: %d, %v; want 5", rm, err)
	}
	if convs, err := bob.LocalConversations(); err != nil || !slices.Equal(convs, []string{direct, "team"}) {
		t.Fatalf("local conversations: %q, %v", convs, err)
	}
	if e, p, err := bob.st.Cursor(); err != nil || e != rebase.Epoch || p != logLen {
		t.Fatalf("cursor (%d, %d), %v; want (%d, %d)", e, p, err, rebase.Epoch, logLen)
	}

	// The sync goes on from the head: the next message is the entry right after it.
	send(direct, "after")
	e := nextEvent[EntryEvent](t, bob, 10*time.Second)
	if e.Entry.Seq != logLen+1 || string(e.Entry.Body) != "after" {
		t.Fatalf("entry after the rebase: seq %d %q; want %d after", e.Entry.Seq, e.Entry.Body, logLen+1)
	}
	if got := bodies(direct); !slices.Equal(got, append(wantDirect, "after")) {
		t.Fatalf("%s: %q", direct, got)
	}
}
