package test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine (server, SDK, QUIC) outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// skipShort skips a test that runs real processes or lasts long under go test -short, the fast
// local loop; CI runs them.
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("real processes or a long run: skipped under -short")
	}
}
