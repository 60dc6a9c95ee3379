package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto/ident"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/raftstoretest"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// checkReplicas asks the node at adminAddr to check the replicas at path (POST) and returns its
// report.
func checkReplicas(t *testing.T, adminAddr, adminToken, path string) adminapi.ReplicaCheckReport {
	t.Helper()
	code, body := testkit.HTTP(t, http.MethodPost, "http://"+adminAddr+path, testkit.Bearer(adminToken))
	var r adminapi.ReplicaCheckReport
	if code != http.StatusOK || json.Unmarshal([]byte(body), &r) != nil {
		t.Fatalf("POST %s: HTTP %d %s", path, code, body)
	}
	return r
}

// TestReplicaCheckEndpoint: on a three-node cluster of servers under traffic (sends to every
// shard, and the fan-out's deliveries they cause), a check of every shard through one node's
// admin endpoint finds the three replicas of each at one index with one checksum; after one
// replica's state was corrupted on disk (a key no command wrote) and its node restarted, a check
// of that shard reports that replica as differing and the others as matching, and the node
// counts the mismatch. Bad shards and waits are refused.
func TestReplicaCheckEndpoint(t *testing.T) {
	dirs := make([]string, 3)
	c := syncdtest.StartCluster(t, 3, func(i int, cfg *syncd.Config) { dirs[i] = cfg.Dir })
	asked := c.Server(1)
	base, bearer := "http://"+asked.AdminAddr().String(), testkit.Bearer(asked.AdminToken())

	// Traffic through node 0, which stays up: sends in direct conversations whose homes and
	// members are spread over the shards.
	node := c.Server(0).Node()
	slots := c.Server(0).Cluster().Routing()
	var acked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			u, v := fmt.Sprintf("u%d", i%16), fmt.Sprintf("v%d", i%16)
			conv := ident.DirectConv(u, v)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := node.Propose(ctx, slots.ConvShard(conv), raftstore.AppendCommand(&log.Append{Conv: conv, Sender: u,
				ClientMsgID: fmt.Sprint("m", i), Kind: log.KindMessage, Body: []byte("hello"), Members: []string{u, v}}))
			cancel()
			if err == nil {
				acked.Add(1)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	testkit.WaitTrue(t, 20*time.Second, "traffic to flow", func() bool { return acked.Load() >= 40 })

	r := checkReplicas(t, asked.AdminAddr().String(), asked.AdminToken(), "/v1/shards/check")
	if r.Node != "n2" || r.WaitMS != adminapi.DefaultCheckWait.Milliseconds() || len(r.Shards) != 4 || r.Mismatches != 0 {
		t.Fatalf("report: %+v", r)
	}
	for _, s := range r.Shards {
		if s.Verdict != adminapi.CheckAgree || s.Index == 0 || len(s.Replicas) != 3 {
			t.Fatalf("shard %d: %+v", s.Shard, s)
		}
		for _, rc := range s.Replicas {
			if rc.Status != adminapi.ReplicaMatch || len(rc.Checksum) != 16 || rc.Checksum != s.Replicas[0].Checksum ||
				rc.Keys == 0 || rc.Applied < s.Index || rc.ComputedAt == nil || !rc.Voter {
				t.Fatalf("shard %d, replica %s: %+v", s.Shard, rc.Node, rc)
			}
		}
	}
	r = checkReplicas(t, asked.AdminAddr().String(), asked.AdminToken(), "/v1/shards/3/check?wait=5s")
	if len(r.Shards) != 1 || r.Shards[0].Shard != 3 || r.Shards[0].Verdict != adminapi.CheckAgree || r.WaitMS != 5000 {
		t.Fatalf("check of shard 3: %+v", r)
	}
	for _, path := range []string{"/v1/shards/9/check", "/v1/shards/0/check", "/v1/shards/x/check"} {
		wantRefused(t, http.MethodPost, base+path, http.StatusNotFound, "not_found", bearer)
	}
	for _, wait := range []string{"2m", "0s", "soon"} {
		wantRefused(t, http.MethodPost, base+"/v1/shards/check?wait="+wait, http.StatusBadRequest, "bad_request", bearer)
	}

	c.Stop(2)
	raftstoretest.CorruptState(t, dirs[2], 1)
	c.Start(2)
	r = checkReplicas(t, asked.AdminAddr().String(), asked.AdminToken(), "/v1/shards/check?wait=30s")
	if r.Mismatches != 1 || len(r.Shards) != 4 {
		t.Fatalf("after corrupting n3's replica of shard 1: %+v", r)
	}
	for _, s := range r.Shards {
		want := adminapi.CheckAgree
		if s.Shard == 1 {
			want = adminapi.CheckMismatch
		}
		if s.Verdict != want || len(s.Replicas) != 3 {
			t.Fatalf("after corrupting n3's replica of shard 1, shard %d: %+v", s.Shard, s)
		}
		for _, rc := range s.Replicas {
			want := adminapi.ReplicaMatch
			if s.Shard == 1 && rc.Node == "n3" {
				want = adminapi.ReplicaDiffers
			}
			if rc.Status != want || rc.Checksum == "" {
				t.Fatalf("after corrupting n3's replica of shard 1, shard %d, replica %s: %+v", s.Shard, rc.Node, rc)
			}
		}
	}
	if got := asked.Node().ChecksumMismatches(); got != 1 {
		t.Fatalf("the node asked counted %d mismatches, want 1", got)
	}
}

// TestReplicaCheckNames: the admin API's verdicts and statuses are raftstore's, word for word
// (the endpoint passes them through).
func TestReplicaCheckNames(t *testing.T) {
	for _, p := range [][2]string{
		{string(raftstore.VerdictAgree), adminapi.CheckAgree}, {string(raftstore.VerdictMismatch), adminapi.CheckMismatch},
		{string(raftstore.VerdictIncomplete), adminapi.CheckIncomplete}, {string(raftstore.VerdictFailed), adminapi.CheckFailed},
		{string(raftstore.SumMatch), adminapi.ReplicaMatch}, {string(raftstore.SumDiffers), adminapi.ReplicaDiffers},
		{string(raftstore.SumPending), adminapi.ReplicaPending}, {string(raftstore.SumMissed), adminapi.ReplicaMissed},
		{string(raftstore.SumFailed), adminapi.ReplicaFailed},
	} {
		if p[0] != p[1] {
			t.Errorf("raftstore says %q, the admin API %q", p[0], p[1])
		}
	}
}
