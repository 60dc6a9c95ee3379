//go:build unix

package syncd

import (
	"bytes"
	"log/slog"
	"strings"
	"syscall"
	"testing"
)

// TestFDLimitWarnsBelowTheBudget: with the process's open-file limit lowered below the budget
// (1,024, a common default), the start's check warns with the limit, the need and how to raise
// it; at the budget it says nothing above debug.
func TestFDLimitWarnsBelowTheBudget(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip(err)
	}
	if lim.Max < needFDs {
		t.Skipf("the hard limit %d is below the budget %d here", lim.Max, needFDs)
	}
	old := lim
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
	for _, c := range []struct {
		limit uint64
		warn  bool
	}{{1024, true}, {needFDs, false}} {
		lim.Cur = c.limit
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		checkFDLimit(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
		got := buf.String()
		if warned := strings.Contains(got, "level=WARN"); warned != c.warn {
			t.Errorf("limit %d: logged %q; want a warning: %v", c.limit, got, c.warn)
		}
		if c.warn && !(strings.Contains(got, "fd_limit=1024") && strings.Contains(got, "fd_need=2024") && strings.Contains(got, "ulimit -n")) {
			t.Errorf("limit %d: the warning %q does not give the limit, the need (2024) and how to raise it", c.limit, got)
		}
	}
}
