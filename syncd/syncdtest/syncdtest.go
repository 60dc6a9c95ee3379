// Package syncdtest runs real syncd servers inside a test process: QUIC, Raft and Pebble on
// loopback and temp dirs, stopped (gracefully, checked) when the test ends.
package syncdtest

import (
	"context"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/test/testkit"
)

// Start runs a server on free loopback ports (from testkit.FreeAddr, as Cluster's) with its data
// in a temp dir (Config.Dir) and returns once it is ready (Server.Ready: it has the cluster map
// and every shard a leader). tweak, if not nil, adjusts the config first. Logs go to the test
// log at Error level.
func Start(t testing.TB, tweak func(*syncd.Config)) *syncd.Server {
	t.Helper()
	cfg := syncd.Config{Dir: t.TempDir(), ListenAddr: testkit.FreeAddr(t), WebAddr: testkit.FreeAddr(t), RaftAddr: testkit.FreeAddr(t),
		AdminAddr: testkit.FreeAddr(t), Shards: 4, Logger: Logger(t)}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := syncd.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitTrue(t, 10*time.Second, "the server to be ready", func() bool { return srv.Ready() == nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := awaitShutdown(t, done); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
	})
	return srv
}

// shutdownLimit bounds a graceful shutdown in tests: far above the seconds one takes even on a
// loaded machine, far below the test binary's own timeout, whose panic names only the test.
const shutdownLimit = 2 * time.Minute

// awaitShutdown waits for Server.Run to return after its context was cancelled. A shutdown that
// hangs fails the test with every goroutine's stack — the hang is a bug (the server must stop
// everything it started), and the stacks say where it is — instead of hanging the test binary.
func awaitShutdown(t testing.TB, done <-chan error) error {
	select {
	case err := <-done:
		return err
	case <-time.After(shutdownLimit):
		buf := make([]byte, 8<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("the server did not shut down within %v; goroutines:\n%s", shutdownLimit, buf)
		return nil
	}
}

// Logger returns a logger writing Error-level records to the test log.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
