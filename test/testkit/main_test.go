package testkit

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a relay goroutine outlives its Close. goleak is a test-only
// dependency: the package itself still imports only the standard library.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
