package test

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/proto/prototest"
)

// TestSIGTERMHandsOver: a node of a three-node cluster stopped with SIGTERM hands the leadership
// of every shard it leads to the other nodes before it exits (its log says how many groups, at
// least the shards it led), so the others lead every shard at once; a device on another node
// sending to conversations spread over every shard meanwhile gets every send acked (resending a
// retryable refusal, as the SDK does). The longest wait for an ack around the stop is logged,
// for OPERATIONS' figure (it is not asserted: this machine's timing is not the product's).
func TestSIGTERMHandsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes")
	}
	tl := newTimeline(t)
	c := startClusterWithSpares(t, 3, 0, tl)
	leaders := c.waitLeaders(60 * time.Second)
	victim := c.mostLeader(leaders)
	led := 0
	for _, n := range leaders {
		if n == victim {
			led++
		}
	}
	var other *clusterNode
	for _, n := range c.nodes {
		if n != victim {
			other = n
			break
		}
	}
	token, err := c.pc.Token("alice", "phone", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	alice := prototest.Connect(t, other.ClientAddr, c.pc.Fingerprint(), token, "alice", "phone")

	// Conversations with 32 peers land on every shard with near certainty; each send waits for
	// its ack, so a shard without a leader shows as one long wait. Paced within the device's
	// send rate.
	stop := make(chan struct{})
	done := make(chan struct{})
	var longest time.Duration
	var sent int
	var failed error
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(30 * time.Millisecond):
			}
			peer := "p" + strconv.Itoa(i%32)
			start := time.Now()
			for { // a retryable refusal is resent with the same cmid, as the SDK does
				f := alice.Do(&proto.Send{ID: alice.ID(), Conv: proto.DirectConv("alice", peer), ClientMsgID: fmt.Sprint("m", i), Body: []byte("hi"), Peer: peer})
				if e, ok := f.(*proto.Error); ok && e.Code.Retryable() && time.Since(start) < 20*time.Second {
					time.Sleep(max(time.Duration(e.RetryAfterMs)*time.Millisecond, 20*time.Millisecond))
					continue
				}
				if a, ok := f.(*proto.Ack); !ok || a.MsgID == "" {
					failed = fmt.Errorf("send %d: %#v", i, f)
					return
				}
				break
			}
			longest, sent = max(longest, time.Since(start)), sent+1
		}
	}()
	time.Sleep(time.Second)
	tl.add("SIGTERM to %s, which leads %d of %d shards", victim.ID, led, len(leaders))
	if err := victim.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	tl.add("%s exited", victim.ID)
	time.Sleep(2 * time.Second)
	close(stop)
	<-done
	if failed != nil {
		t.Fatal(failed)
	}

	b, err := os.ReadFile(victim.Log)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`handed the leadership of this node's groups to other nodes.* groups=(\d+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s's log does not say it handed its groups over:\n%s", victim.ID, tail(b, 3000))
	}
	if n, _ := strconv.Atoi(string(m[1])); n < led {
		t.Errorf("%s handed %d groups over, but led %d shards", victim.ID, n, led)
	}
	if bytes.Contains(b, []byte("some groups were not handed over")) {
		t.Errorf("%s could not hand every group over:\n%s", victim.ID, tail(b, 3000))
	}
	after := c.waitLeaders(10 * time.Second)
	for shard, n := range after {
		if n == victim {
			t.Errorf("shard %d is still led by the stopped %s", shard, victim.ID)
		}
	}
	t.Logf("%d sends through %s, every one acked; the longest wait for an ack, around %s's SIGTERM: %v",
		sent, other.ID, victim.ID, longest.Round(time.Millisecond))
	c.checkLogs()
}

// tail returns the last n bytes of b.
func tail(b []byte, n int) []byte { return b[max(0, len(b)-n):] }
