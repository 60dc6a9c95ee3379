package procstat

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// TestCPUOfThisProcess: the reading grows while this process burns CPU, and is zero for a process
// that does not exist.
func TestCPUOfThisProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	before := CPU(os.Getpid())
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); {
	}
	if after := CPU(os.Getpid()); after <= before {
		t.Fatalf("CPU went from %v to %v after 100 ms of spinning", before, after)
	}
	if got := CPU(1 << 30); got != 0 {
		t.Fatalf("CPU of a process that does not exist: %v", got)
	}
}
