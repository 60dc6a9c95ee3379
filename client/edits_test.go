package client

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
)

// TestSDKEditsAndReactions: against a real server, alice edits her message twice and bob puts on
// two reactions and takes one off; bob's device that follows live and his device that syncs
// afterwards (and so gets the superseded entries folded) show the same message: the latest body,
// and the reactions that are on. A bad reaction is refused before it is queued.
func TestSDKEditsAndReactions(t *testing.T) {
	srv := syncdtest.Start(t, func(c *syncd.Config) { c.Shards = 2 })
	conv := proto.DirectConv("alice", "bob")
	alice := dialTo(t, srv, srv.Addr().String(), srv.Fingerprint(), "alice", "phone")
	bob := dialTo(t, srv, srv.Addr().String(), srv.Fingerprint(), "bob", "phone")
	nextEvent[SyncedEvent](t, alice, 10*time.Second)
	nextEvent[SyncedEvent](t, bob, 10*time.Second)

	if _, err := alice.Send(conv, "bob", []byte("helo")); err != nil {
		t.Fatal(err)
	}
	sent := nextEvent[StatusEvent](t, alice, 10*time.Second)
	if sent.Status != StatusSent {
		t.Fatalf("the send: %+v", sent)
	}
	target := sent.Ack.MsgID
	var perr *proto.Error
	if _, err := bob.React(conv, target, "a b", false); !errors.As(err, &perr) || perr.Code != proto.CodeInvalidArgument {
		t.Fatalf("a bad reaction: %v, want invalid_argument", err)
	}
	for _, step := range []func() (string, error){
		func() (string, error) { return alice.Edit(conv, target, []byte("hello")) },
		func() (string, error) { return bob.React(conv, target, "👍", false) },
		func() (string, error) { return bob.React(conv, target, "🎉", false) },
		func() (string, error) { return alice.Edit(conv, target, []byte("hello!")) },
		func() (string, error) { return bob.React(conv, target, "👍", true) },
	} {
		if _, err := step(); err != nil {
			t.Fatal(err)
		}
	}
	want := func(c *Client, who string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			msgs, err := c.Messages(conv)
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) == 1 && string(msgs[0].Body) == "hello!" && msgs[0].EditedAt != 0 &&
				len(msgs[0].Reactions) == 1 && slices.Equal(msgs[0].Reactions["🎉"], []string{"bob"}) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s's view of the message: %+v", who, msgs)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	want(alice, "alice")
	want(bob, "bob's live device")

	// Bob's new device syncs the log with its superseded entries folded: the same message.
	tablet := dialTo(t, srv, srv.Addr().String(), srv.Fingerprint(), "bob", "tablet")
	var folded int
	awaitEvents(t, tablet, 15*time.Second, "the tablet's sync", func(ev Event) bool {
		if e, ok := ev.(EntryEvent); ok && e.Entry.Folded != 0 {
			folded++
		}
		_, synced := ev.(SyncedEvent)
		return synced
	})
	if folded < 2 { // the first edit and the 👍 put on (and superseded delivered reports, if any)
		t.Errorf("the tablet got %d folded entries, want at least 2", folded)
	}
	want(tablet, "bob's tablet")
}
