package raftstore

import (
	"bytes"
	"io"
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

// TestRaftRoutineErrorsMappedDown: the entries hashicorp/raft logs at ERROR for routine events
// (as TestRaftQuietThroughRoutineMembership saw them) come out at info or debug, an unreachable
// peer as a warning, and real errors stay errors.
func TestRaftRoutineErrorsMappedDown(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		args []any
		want string
	}{
		{"peer has newer term, stopping replication", []any{"peer", raft.Server{Suffrage: raft.Voter, ID: "n2", Address: "127.0.0.1:7402"}}, "INFO"},
		{"failed to flush response", []any{"error", "write tcp 127.0.0.1:7401->127.0.0.1:55584: write: broken pipe"}, "DEBUG"},
		{"failed to decode incoming command", []any{"error", raft.ErrTransportShutdown}, "DEBUG"},
		{"failed to appendEntries to", []any{"peer", raft.Server{Suffrage: raft.Nonvoter, ID: "n2"}, "error", io.EOF}, "INFO"},
		{"failed to heartbeat to", []any{"peer", "127.0.0.1:7402", "backoff time", "10ms", "error", "read tcp: connection reset by peer"}, "INFO"},
		{"failed to heartbeat to", []any{"peer", "127.0.0.1:7402", "backoff time", "10ms", "error", "dial tcp 127.0.0.1:7402: connect: connection refused"}, "WARN"},
		// The peer's transport still answered while its raft was stopping (seen in CI, stop 38).
		{"failed to heartbeat to", []any{"peer", "127.0.0.1:29500", "backoff time", "10ms", "error", raft.ErrRaftShutdown.Error()}, "INFO"},
		// Real errors keep their level.
		{"failed to append to logs", []any{"error", "pebble: no space left on device"}, "ERROR"},
		{"failed to appendEntries to", []any{"peer", "n2", "error", "remote error: tls: bad certificate"}, "ERROR"},
		{"failed to decode incoming command", []any{"error", "unknown rpc type 9"}, "ERROR"},
		{"failed to persist vote", []any{"error", io.EOF}, "ERROR"},
	} {
		var buf bytes.Buffer // a logger each: the limiter would hold back a second line of a kind
		newRaftLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), 1).Error(tc.msg, tc.args...)
		if out := buf.String(); !strings.Contains(out, "level="+tc.want) || !strings.Contains(out, tc.msg) {
			t.Errorf("%s %v: logged %q, want level %s", tc.msg, tc.args, out, tc.want)
		}
	}
}
