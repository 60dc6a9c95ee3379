package store

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them (a Pebble store left open).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
