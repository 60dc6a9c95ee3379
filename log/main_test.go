// TestMain fails the package's tests if any goroutine outlives them: package log starts none, and
// every Pebble database a test opens must be closed (Pebble's background goroutines stop on Close).
package log

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
