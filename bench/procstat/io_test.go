package procstat

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestWriteBytesOfThisProcess: the reading grows by at least what this process writes and syncs
// to a file, and is -1 for a process that does not exist.
func TestWriteBytesOfThisProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	before := WriteBytes(os.Getpid())
	if before < 0 {
		t.Skip("/proc/self/io cannot be read here")
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	after := WriteBytes(os.Getpid())
	if after == 0 && before == 0 {
		t.Skip("the filesystem of the temporary directory counts no block writes (tmpfs?)")
	}
	if after-before < 1<<20 {
		t.Fatalf("write_bytes went from %d to %d after writing and syncing 1 MiB", before, after)
	}
	if got := WriteBytes(1 << 30); got != -1 {
		t.Fatalf("WriteBytes of a process that does not exist: %d", got)
	}
}
