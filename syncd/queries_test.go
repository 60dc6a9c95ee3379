package syncd

import (
	"fmt"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestServerConversationQueries: a user lists its conversations in pages, reads a conversation's
// state and pages its history backwards; non-members see nothing (G7).
func TestServerConversationQueries(t *testing.T) {
	ts := startServer(t, nil)
	alice := connect(t, ts, "alice", "phone")
	carol := connect(t, ts, "carol", "phone")
	alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: "d1", Body: []byte("hi"), Peer: "bob"})
	alice.Ack(&proto.CreateGroup{ID: alice.ID(), Conv: "team", ClientMsgID: "g", Members: []string{"bob", "carol"}})
	for i := range 3 {
		alice.Ack(&proto.Send{ID: alice.ID(), Conv: "team", ClientMsgID: fmt.Sprint("t", i), Body: []byte(fmt.Sprint("m", i))})
	}
	testkit.WaitTrue(t, 10*time.Second, "alice's log to hold all five entries", func() bool {
		h, ok := alice.Do(&proto.HeadCheck{ID: alice.ID()}).(*proto.Head)
		return ok && h.Head == 5
	})

	first, ok := alice.Do(&proto.ConvList{ID: alice.ID(), Limit: 1}).(*proto.ConvListResult)
	if !ok || len(first.Convs) != 1 || first.Convs[0].Conv != "d:alice:bob" || !first.More {
		t.Fatalf("first page: %#v", first)
	}
	second, ok := alice.Do(&proto.ConvList{ID: alice.ID(), After: "d:alice:bob"}).(*proto.ConvListResult)
	if !ok || len(second.Convs) != 1 || second.More {
		t.Fatalf("second page: %#v", second)
	}
	team := second.Convs[0]
	if team.Conv != "team" || team.Kind != proto.ConvGroup || team.Head != 4 || fmt.Sprint(team.Members) != "[alice bob carol]" {
		t.Fatalf("team: %+v", team)
	}
	if st, ok := carol.Do(&proto.ConvState{ID: carol.ID(), Conv: "team"}).(*proto.ConvStateResult); !ok || st.Conv.Head != 4 {
		t.Fatalf("carol's view of team: %#v", st)
	}
	carol.WantCode(&proto.ConvState{ID: carol.ID(), Conv: "d:alice:bob"}, proto.CodeNotMember)
	carol.WantCode(&proto.History{ID: carol.ID(), Conv: "d:alice:bob"}, proto.CodeNotMember)
	carol.WantCode(&proto.ConvState{ID: carol.ID(), Conv: "nope"}, proto.CodeNoConversation)

	latest, ok := carol.Do(&proto.History{ID: carol.ID(), Conv: "team", Limit: 2}).(*proto.HistoryResult)
	if !ok || len(latest.Entries) != 2 || latest.Entries[0].ConvSeq != 3 || latest.Entries[1].ConvSeq != 4 || latest.Head != 4 {
		t.Fatalf("latest page: %#v", latest)
	}
	earlier, ok := carol.Do(&proto.History{ID: carol.ID(), Conv: "team", Before: 3, Limit: 2}).(*proto.HistoryResult)
	if !ok || len(earlier.Entries) != 2 || earlier.Entries[0].ConvSeq != 1 || earlier.Entries[1].ConvSeq != 2 ||
		earlier.Entries[0].Kind != proto.KindGroupCreate {
		t.Fatalf("earlier page: %#v", earlier)
	}
}
