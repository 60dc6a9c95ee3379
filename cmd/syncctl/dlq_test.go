package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// TestSyncctlDLQ lists, replays and drops real dead letters: the server's fault injector makes
// bob's shard refuse two messages, which land in the dead letters.
func TestSyncctlDLQ(t *testing.T) {
	t.Setenv("SYNCD_TOKEN", "")
	t.Setenv("SYNCD_ADMIN_TOKEN", "")
	srv, dataDir := startServer(t)
	srv.SetDeliveryFault(func(_ raftstore.ShardID, items []log.Delivery) {
		for i := range items {
			if slices.Contains(items[i].Users, "bob") && strings.HasPrefix(string(items[i].Entry.Body), "poison") {
				items[i].Entry.ConvSeq = 0 // an incomplete entry: refused by the destination
			}
		}
	})
	admin := []string{"-admin", srv.AdminAddr().String(), "-data-dir", dataDir} // the admin token is in the data dir
	alice := []string{"-addr", srv.Addr().String(), "-token", mustToken(t, dataDir, "alice", "phone"), "-data-dir", dataDir, "-store", t.TempDir()}
	bob := []string{"-addr", srv.Addr().String(), "-token", mustToken(t, dataDir, "bob", "phone"), "-data-dir", dataDir, "-store", t.TempDir()}
	for _, body := range []string{"poison a", "poison b"} {
		if code, _, _ := syncctl(t, append([]string{"send", "-conv", "d:alice:bob", "-peer", "bob", "-body", body}, alice...)...); code != 0 {
			t.Fatalf("send: exit %d", code)
		}
	}

	var list adminapi.DeadLetterList
	for deadline := time.Now().Add(20 * time.Second); list.Total < 2; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("dead letters: %+v, want 2", list)
		}
		code, out, _ := syncctl(t, append([]string{"dlq", "list", "-json"}, admin...)...)
		if code != 0 {
			t.Fatalf("dlq list -json: exit %d", code)
		}
		list = decodeJSON[adminapi.DeadLetterList](t, out)
	}
	first, second := list.Items[0], list.Items[1]
	code, out, _ := syncctl(t, append([]string{"dlq", "list"}, admin...)...)
	if code != 0 || !strings.Contains(out, first.ID) || !strings.Contains(out, second.MsgID) || !strings.Contains(out, "incomplete entry") {
		t.Fatalf("dlq list: exit %d\n%s", code, out)
	}

	// Still refused: exit 1, the reason and what to do; the dead letter stays.
	code, _, errOut := syncctl(t, append([]string{"dlq", "replay", first.ID}, admin...)...)
	if code != exitFail || !strings.Contains(errOut, "refused") || !strings.Contains(errOut, "what to do") {
		t.Fatalf("replay while refused: exit %d: %s", code, errOut)
	}
	srv.SetDeliveryFault(nil)
	if code, out, _ := syncctl(t, append([]string{"dlq", "replay", first.ID}, admin...)...); code != 0 || !strings.Contains(out, first.ID+" replayed") {
		t.Fatalf("replay: exit %d: %s", code, out)
	}
	if code, _, errOut := syncctl(t, append([]string{"dlq", "replay", first.ID}, admin...)...); code != exitFail || !strings.Contains(errOut, "not_found") {
		t.Fatalf("second replay: exit %d: %s", code, errOut)
	}
	if code, out, _ := syncctl(t, append([]string{"dlq", "drop", "-all"}, admin...)...); code != 0 || strings.TrimSpace(out) != second.ID+" dropped" {
		t.Fatalf("drop -all: exit %d: %s", code, out)
	}
	if code, out, _ := syncctl(t, append([]string{"dlq", "list"}, admin...)...); code != 0 || strings.TrimSpace(out) != "no dead letters" {
		t.Fatalf("list after: exit %d: %s", code, out)
	}
	for _, bad := range [][]string{{"dlq"}, {"dlq", "purge"}, {"dlq", "replay"}, {"dlq", "drop", "-all", "1-1-1"}} {
		if code, _, _ := syncctl(t, append(bad, admin...)...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", bad, code, exitUsage)
		}
	}
	// bob got the replayed message, once, and never the dropped one (the delivered entry his
	// pull's ack brings is not a message).
	got := pullUntilIgnoringReports(t, 1, bob...)
	if got[0].Body != "poison a" || got[0].MsgID != first.MsgID {
		t.Fatalf("bob pulled %+v", got)
	}
}
