package syncd

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine (fan-out, raft, Pebble) outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
