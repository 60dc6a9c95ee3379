package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/syncd"
)

// TestGroupsScenario runs -scenario groups at tiny sizes on in-process nodes (a fresh one per
// mode and size, as the scenario does with child processes): groups of 6 and 12 members under
// write diffusion and read diffusion (threshold 5: large from their creation), a few messages
// and a join each, then the push to the larger read-diffusion group's live devices, which must
// follow it as a source (its batches name it) and receive every message, the same to the
// smaller write-diffusion group's, and the direct reference. The rows must hold every figure.
func TestGroupsScenario(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := options{shards: 2, repeat: 1, duration: 500 * time.Millisecond, body: 64}
	g := groupFlags{messages: 5, writeEntries: 40, window: 2, joins: 1, live: 4, rate: 20}
	sizes := []int{6, 12}
	runs, err := groupsScenario(ctx, o, g, sizes, func(m groupMode) (groupNode, error) {
		target, inproc, cleanup, err := startInProcess(ctx, o, func(c *syncd.Config) {
			c.LargeGroupThreshold, c.MaxGroupSize = m.threshold, maxGroupSize(12)
			c.MembersPerMinute, c.MaxGroupsPerUser = 1_000_000, 1000
		})
		if err != nil {
			return nil, err
		}
		return inProcGroupNode{t: target, srv: inproc.srv, cleanup: cleanup}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 4 {
		t.Fatalf("%d runs, want 2 modes × 2 sizes", len(runs))
	}
	for _, r := range runs {
		if r.build.Members != r.size || r.build.Took <= 0 || r.sends.Acked != r.messages || len(r.joinAck) != 1 {
			t.Errorf("%s, %d members: %+v", r.mode, r.size, r)
		}
		if want := 5; r.mode == "read" && r.messages != want || r.mode == "write" && r.messages != min(5, 40/r.size) {
			t.Errorf("%s, %d members: %d messages", r.mode, r.size, r.messages)
		}
		if push := r.mode == "read" && r.size == 12 || r.mode == "write" && r.size == 6; push != (r.group != nil) {
			t.Fatalf("%s, %d members: push measured %v", r.mode, r.size, r.group != nil)
		}
		if r.group == nil {
			continue
		}
		gp, d := r.group, r.direct
		if gp.Live != 4 || gp.Sent != 10 || gp.Failed != 0 || gp.Deliveries != gp.Sent*gp.Live || gp.Missing != 0 || gp.SendP50 <= 0 || gp.PushP99 <= 0 ||
			gp.Batches < 1 || gp.FirstP50 <= 0 || gp.LastP99 < gp.FirstP50 {
			t.Errorf("%s diffusion, group push: %+v", r.mode, gp)
		}
		// Under read diffusion every live device followed the group as a source: the warm-up and
		// the timed messages came in the source's batches (the members' logs hold only their own
		// joins); under write diffusion they came in the members' logs.
		if r.mode == "read" && (gp.SourceEntries < gp.Deliveries || gp.SourceBatches == 0) || r.mode == "write" && gp.SourceBatches != 0 {
			t.Errorf("%s diffusion, group push, sources: %+v", r.mode, gp)
		}
		if d.Live != 1 || d.Deliveries != d.Sent || d.SourceBatches != 0 {
			t.Errorf("direct push: %+v", d)
		}
	}
	out := groupRows(runs, sizes)
	var text []string
	for _, r := range out {
		text = append(text, r.name+" | "+r.value+" | "+r.ratio+" | "+r.note)
	}
	all := strings.Join(text, "\n")
	t.Log("\n" + all)
	for _, want := range []string{"write, 6 members: build", "read, 12 members: 5 messages", "read, 12 members: join of 1",
		"push: direct conversation", "push: read diffusion, 4 live of 12 members", "push: write diffusion, 4 live of 6 members"} {
		if !strings.Contains(all, want) {
			t.Errorf("no row %q", want)
		}
	}
}
