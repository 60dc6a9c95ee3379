package bench

import (
	"context"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/syncd-dev/syncd/proto"
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

// TestRefusedBusy: a handshake refused for want of room is retried after the server's own
// retry-after, read from the close reason (proto.ErrorFromClose), and one QUIC refuses before
// the server accepts after a short growing pause; any other failure is not retried.
func TestRefusedBusy(t *testing.T) {
	closed := asProtoError(&quic.ApplicationError{Remote: true, ErrorCode: quic.ApplicationErrorCode(proto.CodeOverloaded),
		ErrorMessage: proto.CloseReason(&proto.Error{Code: proto.CodeOverloaded, RetryAfterMs: 1500, Message: "handshakes"})})
	for _, c := range []struct {
		name    string
		err     error
		attempt int
		wait    time.Duration
		busy    bool
	}{
		{"overloaded, its retry-after", closed, 1, 1500 * time.Millisecond, true},
		{"too many connections, its retry-after", &proto.Error{Code: proto.CodeTooManyConnections, RetryAfterMs: 5000}, 3, 5 * time.Second, true},
		{"overloaded without a hint", &proto.Error{Code: proto.CodeOverloaded}, 2, 200 * time.Millisecond, true},
		{"CONNECTION_REFUSED", &quic.TransportError{Remote: true, ErrorCode: quic.ConnectionRefused}, 1, 100 * time.Millisecond, true},
		{"CONNECTION_REFUSED, late attempt", &quic.TransportError{Remote: true, ErrorCode: quic.ConnectionRefused}, 9, 2 * time.Second, true},
		{"our own refusal", &quic.TransportError{Remote: false, ErrorCode: quic.ConnectionRefused}, 1, 0, false},
		{"unauthenticated", &proto.Error{Code: proto.CodeUnauthenticated}, 1, 0, false},
		{"a timeout", context.DeadlineExceeded, 1, 0, false},
	} {
		wait, busy := refusedBusy(c.err, c.attempt)
		if wait != c.wait || busy != c.busy {
			t.Errorf("%s: refusedBusy = %v, %v; want %v, %v", c.name, wait, busy, c.wait, c.busy)
		}
	}
	if pe, ok := closed.(*proto.Error); !ok || pe.Message != "handshakes" {
		t.Errorf("asProtoError of a close = %#v", closed)
	}
}
