package log

import (
	"fmt"
	"testing"
)

// TestDeadLetterClasses pins the class of every refusal a dead letter may carry: only the
// refusals about the destination's passing state are retried automatically; code 0 (records
// before codes) and codes this version does not know are unknown, never retried.
func TestDeadLetterClasses(t *testing.T) {
	retryable := map[error]bool{ErrMoving: true, ErrMoved: true, ErrNotYet: true, ErrOutOfOrder: true}
	for _, err := range rejections {
		code, ok := RejectionCode(fmt.Errorf("wrapped: %w", err))
		if !ok {
			t.Fatalf("%v has no code", err)
		}
		want := ClassPermanent
		if retryable[err] {
			want = ClassRetryable
		}
		if got := ClassOfRejection(code); got != want {
			t.Errorf("%v (code %d): class %v, want %v", err, code, got, want)
		}
	}
	for _, code := range []uint8{0, uint8(len(rejections) + 1), 255} {
		if got := ClassOfRejection(code); got != ClassUnknown {
			t.Errorf("code %d: class %v, want unknown", code, got)
		}
	}
	if s := DeadLetterClass(9).String(); s != "unknown" {
		t.Errorf("an out-of-range class prints %q", s)
	}
}
