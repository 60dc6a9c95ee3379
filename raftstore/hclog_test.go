package raftstore

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// At the default level (info) only raft's warnings and errors get through, less the warning
// every new group logs before its first election; a lost leader still warns.
func TestRaftLoggerQuietAtInfo(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	hl := newRaftLogger(logger, 3)
	if got := hl.GetLevel(); got != hclog.Warn {
		t.Errorf("hclog level %v at slog info: raft's info lines would be formatted only to be dropped", got)
	}
	hl.Info("entering leader state", "leader", "n1")
	hl.Debug("details")
	// As raft logs them, with its address and id types.
	hl.Warn("heartbeat timeout reached, starting election", "last-leader-addr", raft.ServerAddress(""), "last-leader-id", raft.ServerID(""))
	hl.Warn("heartbeat timeout reached, starting election", "last-leader-addr", "", "last-leader-id", "")
	hl.Warn("heartbeat timeout reached, starting election", "last-leader-addr", raft.ServerAddress("10.0.0.2:7400"), "last-leader-id", raft.ServerID("n2"))
	hl.Warn("Election timeout reached, restarting election")
	hl.Error("failed to make requestVote RPC", "error", "refused")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{"last-leader-id=n2", "Election timeout reached", "failed to make requestVote RPC"}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) || !strings.Contains(lines[i], "shard=3") {
			t.Errorf("line %d %q lacks %q", i, lines[i], w)
		}
	}

	// At debug the first-election warning is there, as debug.
	buf.Reset()
	logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	newRaftLogger(logger, 3).Warn("heartbeat timeout reached, starting election", "last-leader-addr", raft.ServerAddress(""), "last-leader-id", raft.ServerID(""))
	if out := buf.String(); !strings.Contains(out, "level=DEBUG") || !strings.Contains(out, "starting election") {
		t.Errorf("first-election warning at debug: %q", out)
	}
}
