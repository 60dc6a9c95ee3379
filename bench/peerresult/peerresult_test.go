package peerresult

import (
	"strings"
	"testing"
	"time"
)

// TestLines: what Write writes, Read reads back the same; lines that are not results are
// refused with their line number.
func TestLines(t *testing.T) {
	var b strings.Builder
	in := []Result{
		{System: "Redis 7.0.15, appendfsync always", Nodes: 1, Shape: Appends, PerSec: 54321.5, P50: time.Millisecond, P99: 3 * time.Millisecond, Count: 543215},
		{System: "etcd, 3 members", Nodes: 3, Skip: "etcd not installed"},
	}
	for _, r := range in {
		if err := Write(&b, r); err != nil {
			t.Fatal(err)
		}
	}
	out, err := Read(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) || out[0] != in[0] || out[1] != in[1] {
		t.Fatalf("read back %+v, want %+v", out, in)
	}
	for _, bad := range []string{
		"# a progress line\n",
		`{"nodes":1,"shape":"appends"}` + "\n",
		`{"system":"x","shape":"appends"}` + "\n",
		`{"system":"x","nodes":1,"shape":"sends"}` + "\n",
		`{"system":"x","nodes":1}` + "\n",
	} {
		if _, err := Read(strings.NewReader(b.String() + bad)); err == nil || !strings.Contains(err.Error(), "line 3") {
			t.Errorf("Read(%q) = %v, want an error for line 3", bad, err)
		}
	}
}
