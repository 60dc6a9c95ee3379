package raftstore

import (
	"bytes"
	"context"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// newRaftLogger returns the hclog.Logger handed to one shard's raft instance
// and its NetworkTransport. Every line ends up in logger (slog) tagged with
// component=raft and the shard ID, at the level hclog logged it.
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
		Output: &hclogAdapter{logger: logger},
		// hclog filters before formatting, so only pay for formatting
		// debug/trace lines when the slog handler would keep them.
		Level: hclogLevelFor(logger),
		// slog stamps its own time.
		DisableTime: true,
		Color:       hclog.ColorOff,
	})
}

// hclogLevelFor maps the lowest level logger's handler accepts to hclog.
func hclogLevelFor(logger *slog.Logger) hclog.Level {
	ctx := context.Background()
	switch {
	case logger.Enabled(ctx, slog.LevelDebug-4):
		return hclog.Trace
	case logger.Enabled(ctx, slog.LevelDebug):
		return hclog.Debug
	default:
		return hclog.Info
	}
}

// hclogAdapter is the io.Writer behind newRaftLogger's hclog output. hclog
// calls LevelWrite with the level once per formatted entry; Write is the
// fallback for plain writes and recovers the level from hclog's "[LEVEL]"
// prefix on each line. Safe for concurrent use because slog handlers are.
type hclogAdapter struct {
	logger *slog.Logger
}

// LevelWrite implements hclog.LevelWriter: p is one complete hclog entry.
func (a *hclogAdapter) LevelWrite(level hclog.Level, p []byte) (int, error) {
	_, msg := splitHclogLevel(bytes.TrimRight(p, "\r\n"))
	a.logger.Log(context.Background(), slogLevel(level), string(msg))
	return len(p), nil
}

// Write implements io.Writer, logging each line of p separately.
func (a *hclogAdapter) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		line = bytes.TrimRight(line, "\r\n")
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		level, msg := splitHclogLevel(line)
		a.logger.Log(context.Background(), slogLevel(level), string(msg))
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

// slogLevel maps an hclog level to slog; trace is slog's conventional
// Debug-4.
func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}
