package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// WriteBytes returns the bytes process pid has caused to be written to storage, the write_bytes
// of /proc/<pid>/io (what reached the block layer: for a syncd node its write-ahead log, memtable
// flushes and compactions; a page written again before writeback counts once), or -1 if it
// cannot be read (not Linux, process gone, not permitted).
func WriteBytes(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}
