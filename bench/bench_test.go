package bench

import (
	"context"
	"testing"
	"time"
)

// TestBareQUIC runs the bare-QUIC reference briefly: it needs no server.
func TestBareQUIC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := BareQUIC(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bare QUIC: %.0f req/s, bulk %.1f MB/s (%.0f frames/s)", res.ReqPerSec, res.BulkMBPerSec, res.BulkFramesPerSec)
	if res.ReqPerSec <= 0 || res.BulkMBPerSec <= 0 || res.BulkFramesPerSec <= 0 {
		t.Fatalf("non-positive result: %+v", res)
	}
}

func TestPercentile(t *testing.T) {
	s := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if p := percentile(s, 0.5); p != 5 && p != 6 {
		t.Errorf("p50 = %v", p)
	}
	if p := percentile(s, 0.99); p != 10 {
		t.Errorf("p99 = %v", p)
	}
	if p := percentile(nil, 0.5); p != 0 {
		t.Errorf("p50 of nothing = %v", p)
	}
}
