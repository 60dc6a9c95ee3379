package main

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// TestParseMemoryLimit: memory_limit's spellings, and the values it refuses.
func TestParseMemoryLimit(t *testing.T) {
	for in, want := range map[string]memoryLimit{
		"auto": {auto: true}, "off": {off: true},
		"900MiB": {bytes: 900 << 20}, "1.5GiB": {bytes: 3 << 29}, "2GiB": {bytes: 2 << 30}, "1TiB": {bytes: 1 << 40},
		"268435456": {bytes: 256 << 20}, "268435456B": {bytes: 256 << 20}, "262144KiB": {bytes: 256 << 20},
	} {
		if got, err := parseMemoryLimit(in); err != nil || got != want {
			t.Errorf("parseMemoryLimit(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "lots", "1GB", "-1GiB", "NaN", "Inf", "100MiB", "0", "9000000TiB", "GiB"} {
		if got, err := parseMemoryLimit(in); err == nil {
			t.Errorf("parseMemoryLimit(%q) = %+v, want an error", in, got)
		}
	}
}

// TestMemoryLimitAuto: auto is 75% of the budget less the store's memory outside the Go heap,
// never below the floor; off is none, and a size is itself.
func TestMemoryLimitAuto(t *testing.T) {
	auto := memoryLimit{auto: true}
	if got, from := auto.resolve(8<<30, "the machine's memory"); got != 6<<30-storeOffHeap() || !strings.Contains(from, "the machine's memory (8192 MiB)") {
		t.Errorf("auto of 8 GiB = %d (%s), want %d", got, from, 6<<30-storeOffHeap())
	}
	if got, _ := auto.resolve(512<<20, "x"); got != minMemoryLimit {
		t.Errorf("auto of 512 MiB = %d, want the floor %d", got, minMemoryLimit)
	}
	if got, _ := auto.resolve(0, ""); got != 0 {
		t.Errorf("auto of an unknown budget = %d, want 0 (none)", got)
	}
	if got, _ := (memoryLimit{off: true}).resolve(8<<30, "x"); got != 0 {
		t.Errorf("off = %d, want 0", got)
	}
	if got, _ := (memoryLimit{bytes: 900 << 20}).resolve(8<<30, "x"); got != 900<<20 {
		t.Errorf("900MiB = %d", got)
	}
}

// TestMemoryBudget reads the budget from a cgroup v2 or v1 limit below the machine's memory,
// and from MemTotal when the cgroup has none ("max", or v1's huge number) or none is found. The
// files are written under a fake root: a test cannot put itself in a cgroup with a limit.
func TestMemoryBudget(t *testing.T) {
	const meminfo = "MemTotal:       16384000 kB\nMemFree:  1 kB\n"
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
		from  string
	}{
		{"v2 limit", map[string]string{"proc/self/cgroup": "0::/svc/syncd\n", "sys/fs/cgroup/svc/syncd/memory.max": "1073741824\n"}, 1 << 30, "cgroup"},
		{"v2 at the mount's root", map[string]string{"proc/self/cgroup": "0::/svc/syncd\n", "sys/fs/cgroup/memory.max": "2147483648\n"}, 2 << 30, "cgroup"},
		{"v2 max", map[string]string{"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "max\n"}, 16384000 << 10, "machine"},
		{"v1 limit", map[string]string{"proc/self/cgroup": "5:cpu,cpuacct:/\n4:memory:/docker/abc\n0::/\n",
			"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "536870912\n"}, 512 << 20, "cgroup"},
		{"v1 unlimited", map[string]string{"proc/self/cgroup": "4:memory:/x\n", "sys/fs/cgroup/memory/x/memory.limit_in_bytes": "9223372036854771712\n"}, 16384000 << 10, "machine"},
		{"no cgroup file", nil, 16384000 << 10, "machine"},
	} {
		root := t.TempDir()
		files := map[string]string{"proc/meminfo": meminfo}
		for k, v := range tc.files {
			files[k] = v
		}
		for name, data := range files {
			p := filepath.Join(root, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if got, from := memoryBudget(root); got != tc.want || !strings.Contains(from, tc.from) {
			t.Errorf("%s: budget %d (%s), want %d (%s)", tc.name, got, from, tc.want, tc.from)
		}
	}
	if got, _ := memoryBudget(t.TempDir()); got != 0 {
		t.Errorf("nothing readable: budget %d, want 0", got)
	}
}

// TestApplyMemoryLimit: the limit reaches the runtime; off lifts it; GOMEMLIMIT wins.
func TestApplyMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	t.Setenv("GOMEMLIMIT", "")
	if got, from := applyMemoryLimit(memoryLimit{bytes: 900 << 20}, "/"); got != 900<<20 || from != "memory_limit" || debug.SetMemoryLimit(-1) != 900<<20 {
		t.Errorf("900MiB: applied %d (%s), runtime %d", got, from, debug.SetMemoryLimit(-1))
	}
	if got, _ := applyMemoryLimit(memoryLimit{off: true}, "/"); got != math.MaxInt64 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("off: applied %d, runtime %d", got, debug.SetMemoryLimit(-1))
	}
	if got, from := applyMemoryLimit(memoryLimit{auto: true}, "/"); got == math.MaxInt64 || got < minMemoryLimit || !strings.HasPrefix(from, "auto:") {
		t.Errorf("auto on this machine: applied %d (%s)", got, from)
	}
	debug.SetMemoryLimit(700 << 20) // as the runtime does for GOMEMLIMIT=700MiB at start
	t.Setenv("GOMEMLIMIT", "700MiB")
	if got, from := applyMemoryLimit(memoryLimit{bytes: 900 << 20}, "/"); got != 700<<20 || from != "GOMEMLIMIT" || debug.SetMemoryLimit(-1) != 700<<20 {
		t.Errorf("with GOMEMLIMIT: applied %d (%s), runtime %d", got, from, debug.SetMemoryLimit(-1))
	}
}
