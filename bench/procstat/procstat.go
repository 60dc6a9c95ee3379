// Package procstat reads what the benchmarks measure of other processes from /proc: the CPU time
// a server process used over a run. It is shared by syncbench and the peer load generator
// (bench/peers, a module of its own), so that syncd and its peers are measured the same way; it
// imports only the standard library.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// CPU returns the CPU time (user and system) process pid has used, from /proc/<pid>/stat, or zero
// if it cannot be read (not Linux, process gone). It assumes the usual 100 clock ticks per second.
func CPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, rest, ok := strings.Cut(string(b), ") ") // the command name may hold spaces
	if !ok {
		return 0
	}
	f := strings.Fields(rest) // from field 3 (state) on: utime and stime are fields 14 and 15
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
