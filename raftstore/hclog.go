package raftstore

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// newRaftLogger returns the hclog.Logger handed to one shard's raft instance
// and its NetworkTransport. Every line ends up in logger (slog) tagged with
// component=raft and the shard ID, at the level slogLevel gives it.
//
// A node runs one raft instance per shard, and hashicorp/raft narrates each
// one's life at info (configuration, follower, candidate, leader): on a new
// node that is some fifty lines before anything an operator needs. So raft's
// info and debug lines go to slog's debug, and only warnings and errors stay
// visible at the default level, minus the one warning every new group logs
// on its way to its first leader (see routineWarning). Warnings that mean
// something is wrong (a leader lost, an election that timed out, a quorum
// out of reach) keep their level.
//
// Rather than implementing the large hclog.Logger interface by hand, we let
// hclog format the line and forward it through hclogAdapter: hclog's
// sub-loggers (Named, With, ...) then keep working for free, and all we
// translate is the level and the text.
func newRaftLogger(logger *slog.Logger, shard ShardID) hclog.Logger {
	return newHclog(logger.With("shard", uint32(shard)))
}

// newHclog builds the hclog.Logger that writes into logger, tagged
// component=raft.
func newHclog(logger *slog.Logger) hclog.Logger {
	logger = logger.With("component", "raft")
	return hclog.New(&hclog.LoggerOptions{
		Output: &hclogAdapter{logger: logger, limit: newLogLimiter()},
		// hclog filters before formatting, so only pay for formatting
		// the lines that become debug when the slog handler keeps debug.
		Level: hclogLevelFor(logger),
		// slog stamps its own time.
		DisableTime: true,
		Color:       hclog.ColorOff,
	})
}

// hclogLevelFor returns the lowest hclog level whose lines logger's handler
// would keep, after slogLevel.
func hclogLevelFor(logger *slog.Logger) hclog.Level {
	ctx := context.Background()
	switch {
	case logger.Enabled(ctx, slog.LevelDebug-4):
		return hclog.Trace
	case logger.Enabled(ctx, slog.LevelDebug):
		return hclog.Debug
	default:
		return hclog.Warn
	}
}

// hclogAdapter is the io.Writer behind newRaftLogger's hclog output. hclog
// calls LevelWrite with the level once per formatted entry; Write is the
// fallback for plain writes and recovers the level from hclog's "[LEVEL]"
// prefix on each line. Warnings and errors are limited by kind (limit, nil
// for none): raft repeats a failing append or an unreachable peer's error as
// often as it retries. Safe for concurrent use because slog handlers and
// logLimiter are.
type hclogAdapter struct {
	logger *slog.Logger
	limit  *logLimiter
}

// LevelWrite implements hclog.LevelWriter: p is one complete hclog entry.
func (a *hclogAdapter) LevelWrite(level hclog.Level, p []byte) (int, error) {
	_, msg := splitHclogLevel(bytes.TrimRight(p, "\r\n"))
	a.log(level, msg)
	return len(p), nil
}

// Write implements io.Writer, logging each line of p separately.
func (a *hclogAdapter) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		line = bytes.TrimRight(line, "\r\n")
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		a.log(splitHclogLevel(line))
	}
	return len(p), nil
}

// splitHclogLevel strips a leading "[LEVEL]" from line and returns the level
// it named (hclog.Info if none) and the rest of the line.
func splitHclogLevel(line []byte) (hclog.Level, []byte) {
	// The brackets hclog writes at the start of a line (time is disabled
	// in newHclog).
	prefixes := [...]struct {
		prefix string
		level  hclog.Level
	}{
		{"[TRACE]", hclog.Trace},
		{"[DEBUG]", hclog.Debug},
		{"[INFO]", hclog.Info},
		{"[WARN]", hclog.Warn},
		{"[ERROR]", hclog.Error},
	}
	trimmed := bytes.TrimLeft(line, " ")
	for _, p := range prefixes {
		if rest, ok := bytes.CutPrefix(trimmed, []byte(p.prefix)); ok {
			return p.level, bytes.TrimLeft(rest, " ")
		}
	}
	return hclog.Info, line
}

// log logs one formatted hclog entry at the level slogLevel gives it, if
// a warning or an error of its kind was not logged in the last
// logLimitWindow.
func (a *hclogAdapter) log(level hclog.Level, msg []byte) {
	l := slogLevel(level, msg)
	if l < slog.LevelWarn {
		a.logger.Log(context.Background(), l, string(msg))
		return
	}
	switch ok, held := a.limit.allow(hclogKind(msg), time.Now()); {
	case !ok:
	case held > 0:
		a.logger.Log(context.Background(), l, string(msg), "held_back", held,
			"held_back_for", "repeats of this message in the previous "+logLimitWindow.String())
	default:
		a.logger.Log(context.Background(), l, string(msg))
	}
}

// hclogKind returns what identifies the kind of an hclog entry: its text
// before the first key=value pair, which carries the details (a peer, an
// index, the error).
func hclogKind(msg []byte) string {
	if i := bytes.IndexByte(msg, '='); i >= 0 {
		msg = msg[:bytes.LastIndexByte(msg[:i], ' ')+1]
	}
	return string(msg)
}

// routineWarning reports whether msg is the warning hashicorp/raft logs
// whenever a follower that has never heard of a leader starts an election:
// every shard of a new node, and every shard of a restarted single node, logs
// it once. With a leader named (last-leader-id=n2) the same message means a
// leader was lost, and stays a warning. raft passes the id as a ServerID,
// which hclog prints bare (last-leader-id=); a plain "" would be quoted.
func routineWarning(msg []byte) bool {
	m := string(msg)
	return strings.HasPrefix(m, "heartbeat timeout reached, starting election:") &&
		(strings.HasSuffix(m, " last-leader-id=") || strings.HasSuffix(m, ` last-leader-id=""`))
}

// hangUps are the errors of a connection the other side closed, or that this
// node's own transport closed as it stops: a peer restarting, stopping or
// removed, a leader that stepped down and dropped its pipelines. A peer whose
// transport still answers while its raft stops says so ("raft is already
// shutdown", the error its RPC returns). raft dials again on the next attempt,
// where a peer that is really gone fails to dial (unreachable).
var hangUps = []string{"error=EOF", `error="unexpected EOF"`, "broken pipe", "connection reset by peer",
	"use of closed network connection", "transport shutdown", raft.ErrRaftShutdown.Error()}

// unreachable are the errors of a dial to a peer that does not answer.
var unreachable = []string{"connection refused", "i/o timeout", "no route to host", "network is unreachable"}

// serveErrors are the messages raft's transport logs about one incoming
// connection; replicationErrors those its leader (or candidate) logs about
// one RPC to a peer. Both repeat the error that ended it.
var (
	serveErrors       = []string{"failed to flush response:", "failed to decode incoming command:", "failed to accept connection:"}
	replicationErrors = []string{"failed to appendEntries to:", "failed to heartbeat to:", "failed to pipeline appendEntries:",
		"failed to start pipeline replication to:", "failed to make requestVote RPC:", "failed to send snapshot to:"}
)

// routineErrorLevel returns the level for an entry hashicorp/raft logs at
// ERROR, which it does for every failed RPC and for a leader stepping down
// (21 such lines over a normal start, join, remove and stop of a cluster,
// where OPERATIONS says an error means something is wrong):
//
//   - "peer has newer term, stopping replication": a leader learnt of a newer
//     term and steps down, as after a leadership transfer (balancing) or an
//     election it missed: info;
//   - a served connection or an RPC ended by a hang-up: debug for the served
//     side, info for an RPC (raft retries at once);
//   - an RPC whose dial failed: a warning, the peer is unreachable (limited
//     like every warning; the follower side says whether a leader was lost).
//
// Everything else keeps ERROR: storage failures (logs, votes, snapshots), an
// RPC failing otherwise (a TLS refusal, a decoding error), an unexpected
// command.
func routineErrorLevel(msg []byte) slog.Level {
	m := string(msg)
	has := func(subs []string) bool {
		return slices.ContainsFunc(subs, func(s string) bool { return strings.Contains(m, s) })
	}
	prefixed := func(prefixes []string) bool {
		return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(m, p) })
	}
	switch {
	case strings.HasPrefix(m, "peer has newer term, stopping replication"):
		return slog.LevelInfo
	case prefixed(serveErrors) && has(hangUps):
		return slog.LevelDebug
	case prefixed(replicationErrors) && has(hangUps):
		return slog.LevelInfo
	case prefixed(replicationErrors) && has(unreachable):
		return slog.LevelWarn
	}
	return slog.LevelError
}

// slogLevel maps the level of an hclog entry msg to slog: info and debug,
// raft's per-shard narrative, become debug (see newRaftLogger); trace is
// slog's conventional Debug-4; warnings and errors keep their level, except
// routineWarning and what routineErrorLevel maps down.
func slogLevel(l hclog.Level, msg []byte) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Warn:
		if routineWarning(msg) {
			return slog.LevelDebug
		}
		return slog.LevelWarn
	case hclog.Error:
		return routineErrorLevel(msg)
	default:
		return slog.LevelDebug
	}
}
