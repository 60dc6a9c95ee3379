package raftstore

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine (raft, transport,
// mux, Pebble) outlives them: shard shutdown must be complete.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
