package main

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// TestSyncctlCursorAndTrace: a group of three whose logs live on both shards; bob's phone syncs
// (and so acknowledges its cursor), dave's devices never do. cursor and trace show it, in text
// and as the server's JSON.
func TestSyncctlCursorAndTrace(t *testing.T) {
	t.Setenv("SYNCD_TOKEN", "")
	t.Setenv("SYNCD_ADMIN_TOKEN", "")
	srv, dataDir := startServer(t)
	admin := []string{"-admin", srv.AdminAddr().String(), "-data-dir", dataDir} // the admin token is in the data dir
	slots := cluster.Even(len(srv.Node().Shards()))
	if slots.UserShard("bob") == slots.UserShard("dave") {
		t.Fatal("bob and dave share a shard: pick users on different shards")
	}
	alice := []string{"-addr", srv.Addr().String(), "-token", mustToken(t, dataDir, "alice", "phone"), "-data-dir", dataDir, "-store", t.TempDir()}
	bob := []string{"-addr", srv.Addr().String(), "-token", mustToken(t, dataDir, "bob", "phone"), "-data-dir", dataDir, "-store", t.TempDir()}
	if code, _, _ := syncctl(t, append([]string{"group", "create", "-conv", "g:team", "-members", "bob,dave"}, alice...)...); code != 0 {
		t.Fatalf("group create: exit %d", code)
	}
	code, out, _ := syncctl(t, append([]string{"send", "-conv", "g:team", "-body", "hello"}, alice...)...)
	if code != 0 {
		t.Fatalf("send: exit %d", code)
	}
	msgID := decodeJSON[sentJSON](t, out).MsgID
	pullUntil(t, 2, bob...)

	// cursor -json, until the phone's acknowledged cursor is stored.
	var rep adminapi.CursorReport
	for deadline := time.Now().Add(20 * time.Second); len(rep.Devices) == 0 || rep.Devices[0].Pos != 2; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("bob's cursors: %+v, want the phone's at 2", rep)
		}
		code, out, _ := syncctl(t, append([]string{"cursor", "-user", "bob", "-json"}, admin...)...)
		if code != 0 {
			t.Fatalf("cursor -json: exit %d", code)
		}
		rep = decodeJSON[adminapi.CursorReport](t, out)
	}
	if rep.User != "bob" || rep.Shard != uint32(slots.UserShard("bob")) || rep.Head != 2 || len(rep.Devices) != 1 || rep.Devices[0].Device != "phone" {
		t.Fatalf("cursor -json: %+v", rep)
	}
	code, out, _ = syncctl(t, append([]string{"cursor", "-user", "bob"}, admin...)...)
	want := fmt.Sprintf("user bob: log on shard %d (node %s's replica): epoch %d, first 1, head 2", rep.Shard, rep.Node, rep.Epoch)
	if l := lines(out); code != 0 || len(l) != 3 || l[0] != want || strings.Join(strings.Fields(l[1]), " ") != "DEVICE CURSOR BEHIND" ||
		strings.Join(strings.Fields(l[2]), " ") != "phone 2 0" {
		t.Fatalf("cursor: exit %d\n%s", code, out)
	}
	if code, out, _ := syncctl(t, append([]string{"cursor", "-user", "dave"}, admin...)...); code != 0 || !strings.Contains(out, "no device has acknowledged a cursor") {
		t.Fatalf("cursor of dave: exit %d\n%s", code, out)
	}

	// trace, once fan-out has delivered to every member and trimmed the outbox.
	var tr adminapi.TraceReport
	for deadline := time.Now().Add(20 * time.Second); tr.Outbox.Retained || len(tr.Users) != 3; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("trace: %+v, want three users and the outbox trimmed", tr)
		}
		code, out, _ := syncctl(t, append([]string{"trace", "-json", msgID}, admin...)...)
		if code != 0 {
			t.Fatalf("trace -json: exit %d", code)
		}
		tr = decodeJSON[adminapi.TraceReport](t, out)
	}
	code, out, _ = syncctl(t, append(append([]string{"trace"}, admin...), msgID)...) // flags before and after
	if code != 0 {
		t.Fatalf("trace: exit %d", code)
	}
	for _, want := range []string{
		fmt.Sprintf("message %s: group conversation g:team, conv_seq 2, home shard %d", msgID, slots.ConvShard("g:team")),
		"entry: message from alice at ",
		", 5 bytes",
		"outbox: trimmed: fan-out has passed it on every shard",
		fmt.Sprintf("user alice (shard %d): delivered at position 2", slots.UserShard("alice")),
		fmt.Sprintf("user bob (shard %d): delivered at position 2", slots.UserShard("bob")),
		"device phone: cursor 2, past it",
		fmt.Sprintf("user dave (shard %d): delivered at position 2", slots.UserShard("dave")),
		"no device has acknowledged a cursor",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("trace lacks %q", want)
		}
	}
	// One user, with a scan too short to reach the message (bob's log: create, message, and
	// nothing after): scan 1 still finds it at the head, so add an entry first.
	if code, _, _ := syncctl(t, append([]string{"send", "-conv", "g:team", "-body", "later"}, alice...)...); code != 0 {
		t.Fatalf("second send: exit %d", code)
	}
	pullUntil(t, 1, bob...)
	code, out, _ = syncctl(t, append([]string{"trace", "-user", "bob", "-scan", "1", msgID}, admin...)...)
	if l := lines(out); code != 0 || len(l) != 5 || !strings.HasPrefix(l[3], "user bob") || !strings.Contains(l[3], "not delivered (not_found)") ||
		!strings.Contains(l[3], "raise the scan limit") || (l[4] != "device phone: cursor 2, not past it" && l[4] != "device phone: cursor 3, not past it") {
		t.Fatalf("trace -user bob -scan 1: exit %d\n%s", code, out)
	}

	// Refusals: exit 1 with what to do; usage errors: exit 2.
	for _, args := range [][]string{
		append([]string{"trace", "1.999999.0"}, admin...),
		{"trace", "-admin", closedAddr(t), msgID},
		{"cursor", "-admin", closedAddr(t), "-user", "bob"},
	} {
		code, _, errOut := syncctl(t, args...)
		if code != exitFail || !strings.Contains(errOut, "what to do") {
			t.Errorf("syncctl %v: exit %d, stderr %q; want exit %d and what to do", args, code, errOut, exitFail)
		}
	}
	for _, args := range [][]string{
		{"trace"}, {"trace", "hello"}, {"trace", "1.2.0", "1.3.0"}, {"trace", "-scan", "0", "1.2.0"}, {"cursor"}, {"cursor", "-user", "bob", "extra"},
	} {
		if code, _, _ := syncctl(t, args...); code != exitUsage {
			t.Errorf("syncctl %v: exit %d, want %d", args, code, exitUsage)
		}
	}
	for _, cmd := range []string{"trace", "cursor"} {
		if code, _, errOut := syncctl(t, cmd, "-h"); code != 0 || !strings.Contains(errOut, "Example:") {
			t.Errorf("syncctl %s -h: exit %d, stderr %q", cmd, code, errOut)
		}
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
