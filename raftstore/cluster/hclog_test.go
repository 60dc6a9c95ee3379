package cluster_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/test/testkit"
)

// TestRaftQuietThroughRoutineMembership (issue #21: 21 ERROR lines over a normal start, join,
// remove and stop, while OPERATIONS says an error means something is wrong): a managed cluster
// of three nodes starts, a fourth joins and takes its share, a first node is removed, and every
// node stops; raft logs no ERROR line through it all. Real raft, real TLS transport, real Pebble.
func TestRaftQuietThroughRoutineMembership(t *testing.T) {
	var out testkit.Buffer
	c := managedCluster(t, 4, 3, func(cfg *raftstore.Config) {
		// What an operator sees at the default level, with the node named as syncd names it.
		cfg.Logger = slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", cfg.NodeID)
	})
	placementSettled(t, c, "n4 to join and take its share")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Member(3).RemoveNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitTrue(t, 60*time.Second, "n1 to be forgotten and to host nothing", func() bool {
		m, _ := c.Member(1).Map()
		_, still := m.Nodes["n1"]
		return !still && len(c.Node(0).Shards()) == 0
	})
	placementSettled(t, c, "the placement without n1")
	for i := range c.Size() {
		c.Stop(i)
	}
	var errs []string
	for line := range strings.Lines(out.String()) {
		if strings.Contains(line, "level=ERROR") && strings.Contains(line, "component=raft") {
			errs = append(errs, strings.TrimSpace(line))
		}
	}
	if len(errs) > 0 {
		t.Errorf("raft logged %d ERROR lines through a routine start, join, remove and stop:\n%s", len(errs), strings.Join(errs, "\n"))
	}
}
