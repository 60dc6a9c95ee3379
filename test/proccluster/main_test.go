package proccluster

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine (a process waiter, an HTTP connection) outlives the
// tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
