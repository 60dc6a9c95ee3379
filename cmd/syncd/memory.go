package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/syncd-dev/syncd/raftstore"
)

// The Go runtime's soft memory limit (memory_limit). syncd runs with GOGC 200 (main.go), so its
// heap may grow to three times what is live, stacks included, between collections: cheap while
// the live heap is small (the write path), but 10,000 idle connections hold about 700 MB live
// and the headroom alone would then be more than a GiB. A soft limit makes the collector run
// earlier once the process nears it, and costs nothing below it (docs/BENCHMARKS.md, "Idle
// memory (issue #11)"; D42).

const (
	memoryLimitAuto = "auto"
	memoryLimitOff  = "off"

	// memoryLimitShare is the part of the memory the process may use that auto gives the Go
	// runtime, before the store's own: the rest is for the kernel's page cache of the store's
	// files, which the reads of cold logs live on, and for what a cgroup also counts.
	memoryLimitShare = 0.75
	// minMemoryLimit is the least memory_limit: below it the collector would run all the time.
	minMemoryLimit = 256 << 20
	// storeMemTables is how many of the store's memtables may be held at once (Pebble's
	// MemTableStopWritesThreshold, 2 by default) and memTableSize their size
	// (raftstore.MemTableSize). With the block cache they are allocated outside the Go heap (Pebble's
	// manual allocator, C's malloc in a cgo build), so the runtime's limit does not see them and
	// auto leaves room for them; a CGO_ENABLED=0 build holds them in the Go heap, and auto is then
	// that much more cautious.
	storeMemTables = 2
	memTableSize   = raftstore.MemTableSize
)

// storeOffHeap is what the store may hold outside the Go heap: its block cache and memtables.
func storeOffHeap() int64 {
	return raftstore.DefaultConfig().CacheSize + storeMemTables*memTableSize
}

// memoryLimit is memory_limit as parsed: off, auto, or a number of bytes.
type memoryLimit struct {
	off, auto bool
	bytes     int64
}

// parseMemoryLimit reads memory_limit: "auto", "off", or a size (parseSize), such as "900MiB",
// "1.5GiB" or "2147483648".
func parseMemoryLimit(s string) (memoryLimit, error) {
	switch s {
	case memoryLimitAuto:
		return memoryLimit{auto: true}, nil
	case memoryLimitOff:
		return memoryLimit{off: true}, nil
	}
	b, err := parseSize(s)
	if err != nil {
		return memoryLimit{}, fmt.Errorf("%q must be auto, off, or a size such as 900MiB or 2GiB", s)
	}
	if b < minMemoryLimit {
		return memoryLimit{}, fmt.Errorf("%q is less than %d MiB: the collector would run all the time; say off for no limit", s, minMemoryLimit>>20)
	}
	return memoryLimit{bytes: b}, nil
}

// resolve returns the limit in bytes, 0 for none, and where it came from. auto is
// memoryLimitShare of budget, the memory the process may use (memoryBudget), less the store's
// memory outside the Go heap; at least minMemoryLimit.
func (m memoryLimit) resolve(budget int64, budgetFrom string) (int64, string) {
	switch {
	case m.off:
		return 0, "memory_limit off"
	case !m.auto:
		return m.bytes, "memory_limit"
	case budget <= 0:
		return 0, "auto: the memory available is unknown"
	}
	return max(int64(float64(budget)*memoryLimitShare)-storeOffHeap(), minMemoryLimit),
		fmt.Sprintf("auto: %.0f%% of %s (%d MiB) less the store's cache and memtables (%d MiB)",
			memoryLimitShare*100, budgetFrom, budget>>20, storeOffHeap()>>20)
}

// memoryBudget returns the memory this process may use and what said so: the limit of its
// memory cgroup (v2 memory.max, v1 memory.limit_in_bytes) when there is one below the machine's
// memory, else the machine's (MemTotal). root is "/" but in tests. 0 if neither can be read.
func memoryBudget(root string) (int64, string) {
	total := memTotal(filepath.Join(root, "proc/meminfo"))
	if limit, ok := cgroupLimit(root); ok && (total == 0 || limit < total) {
		return limit, "the cgroup's memory limit"
	}
	return total, "the machine's memory"
}

// memTotal reads MemTotal of a meminfo file, in bytes; 0 if it cannot.
func memTotal(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// cgroupLimit reads the memory limit of this process's cgroup: v2 (the "0::" line of
// /proc/self/cgroup, its memory.max) or v1 (the "memory" controller's line, its
// memory.limit_in_bytes), each at the cgroup's path under /sys/fs/cgroup and, as in a container
// that sees only its own cgroup, at the mount's root.
func cgroupLimit(root string) (int64, bool) {
	data, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			dir, file = filepath.Join(root, "sys/fs/cgroup"), "memory.max"
		case strings.Contains(","+parts[1]+",", ",memory,"):
			dir, file = filepath.Join(root, "sys/fs/cgroup/memory"), "memory.limit_in_bytes"
		default:
			continue
		}
		for _, p := range []string{filepath.Join(dir, parts[2], file), filepath.Join(dir, file)} {
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64) // "max" (none) fails
			if err == nil && v > 0 {
				return v, true
			}
			break
		}
	}
	return 0, false
}

// applyMemoryLimit sets the runtime's soft memory limit from memory_limit, unless GOMEMLIMIT is
// in the environment (the runtime has applied it already, and an operator's environment wins,
// as with GOGC). It returns the limit in force (math.MaxInt64: none) and where it came from.
func applyMemoryLimit(m memoryLimit, root string) (int64, string) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1), "GOMEMLIMIT"
	}
	budget, from := memoryBudget(root)
	limit, why := m.resolve(budget, from)
	if limit == 0 {
		limit = math.MaxInt64 // the runtime's "no limit"
	}
	debug.SetMemoryLimit(limit)
	return limit, why
}
