package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestSyncctlShardCheck: against a real three-node cluster holding messages, shard check prints
// every shard's replicas agreeing and exits 0 (as a table, and as JSON for one shard); with a node
// stopped, its replicas are pending, not a mismatch, and it exits 3; once one replica's state has
// been corrupted on disk and its node is back, it exits 1, names the replica that differs and
// says how to replace it; a bad shard or -wait is a usage error.
func TestSyncctlShardCheck(t *testing.T) {
	dirs := make([]string, 3)
	c := syncdtest.StartCluster(t, 3, func(i int, cfg *syncd.Config) { dirs[i] = cfg.Dir })
	srv := c.Server(0)
	t.Setenv("SYNCD_ADMIN_TOKEN", srv.AdminToken())
	admin := []string{"-admin", srv.AdminAddr().String()}
	check := func(args ...string) (int, string, string) {
		t.Helper()
		return syncctl(t, append(append([]string{"shard", "check"}, args...), admin...)...)
	}
	token, err := srv.MintToken("alice", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	alice := prototest.Connect(t, srv.Addr().String(), srv.Fingerprint(), token, "alice", "phone")
	for i := range 5 {
		alice.Ack(&proto.Send{ID: alice.ID(), Conv: "d:alice:bob", ClientMsgID: fmt.Sprint("m", i), Body: []byte("hi"), Peer: "bob"})
	}

	code, out, errOut := check()
	if code != exitOK || strings.Count(out, " agree ") != 4 || strings.Count(out, " match ") != 12 || errOut != "" {
		t.Fatalf("shard check: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = check("2", "-json")
	rep := decodeJSON[adminapi.ReplicaCheckReport](t, out)
	if code != exitOK || len(rep.Shards) != 1 || rep.Shards[0].Shard != 2 || rep.Shards[0].Verdict != adminapi.CheckAgree || len(rep.Shards[0].Replicas) != 3 {
		t.Fatalf("shard check 2 -json: exit %d: %+v", code, rep)
	}
	for _, args := range [][]string{{"x"}, {"0"}, {"-wait", "2m"}, {"1", "2"}} {
		if code, _, _ := check(args...); code != exitUsage {
			t.Errorf("shard check %v: exit %d, want %d", args, code, exitUsage)
		}
	}
	if code, _, errOut := check("9"); code != exitFail || !strings.Contains(errOut, "not_found") {
		t.Errorf("shard check 9 (of 4): exit %d: %s", code, errOut)
	}

	c.Stop(2)
	testkit.WaitTrue(t, 20*time.Second, "every shard to have a leader without n3", func() bool {
		for s := raftstore.ShardID(1); s <= 4; s++ {
			if c.LeaderOf(s) < 0 {
				return false
			}
		}
		return true
	})
	code, out, errOut = check("-wait", "3s")
	if code != exitIncomplete || !strings.Contains(out, "INCOMPLETE") || !strings.Contains(errOut, "no checksum from n3 (pending") ||
		!strings.Contains(errOut, "not a mismatch") || strings.Contains(errOut, "MISMATCH") {
		t.Fatalf("shard check with n3 stopped: exit %d\n%s\n%s", code, out, errOut)
	}

	raftstoretest.CorruptState(t, dirs[2], 1)
	c.Start(2)
	code, out, errOut = check("1", "-wait", "30s")
	if code != exitFail || !strings.Contains(out, "MISMATCH") || !strings.Contains(out, "DIFFERS") {
		t.Fatalf("shard check 1 after corrupting n3's replica: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"MISMATCH: shard 1: the replica on n3 holds other state", "syncctl node remove n3", "-join", runbook} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr does not say %q:\n%s", want, errOut)
		}
	}
}
