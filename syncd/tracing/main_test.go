package tracing

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine (an exporter's) outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
