// TestMain fails the package's tests if any goroutine outlives them: Run returns only once its
// drainers, their deliveries and trims, and the lanes' proposals have ended.
package fanout

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
