package test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine (server, SDK, QUIC) outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
