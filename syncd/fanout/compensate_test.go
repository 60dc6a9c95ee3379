package fanout

import (
	"testing"
	"time"

	"github.com/syncd-dev/syncd/log"
)

// TestDeadLetterBackoff: the next try doubles from the base per refused replay, stops at the cap
// of attempts, never waits more than maxRetryDelay (nor overflows for a large cap), and a policy
// without a base, without attempts or off schedules nothing.
func TestDeadLetterBackoff(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p := DeadLetterPolicy{RetryBase: time.Minute, MaxAttempts: 4}
	for done, want := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 0} {
		got := p.nextTry(now, uint32(done))
		if want == 0 {
			if got != 0 {
				t.Errorf("after %d of %d attempts: next try %d, want none", done, p.MaxAttempts, got)
			}
			continue
		}
		if d := time.Duration(got - now.UnixNano()); d != want {
			t.Errorf("after %d attempts: wait %v, want %v", done, d, want)
		}
	}
	long := DeadLetterPolicy{RetryBase: time.Hour, MaxAttempts: 1000}
	for _, done := range []uint32{5, 31, 32, 63, 64, 999} {
		if d := time.Duration(long.nextTry(now, done) - now.UnixNano()); d != maxRetryDelay {
			t.Errorf("after %d attempts: wait %v, want the bound %v", done, d, maxRetryDelay)
		}
	}
	for _, off := range []DeadLetterPolicy{{MaxAttempts: 3}, {RetryBase: time.Minute}, {Off: true, RetryBase: time.Minute, MaxAttempts: 3}} {
		if got := off.nextTry(now, 0); got != 0 {
			t.Errorf("%+v schedules a try at %d", off, got)
		}
	}
	// Retrying only while scheduled and under the cap: a lowered cap stops one scheduled before.
	if !p.retrying(&log.DeadLetter{NextTry: 1, Attempts: 3}) || p.retrying(&log.DeadLetter{NextTry: 1, Attempts: 4}) ||
		p.retrying(&log.DeadLetter{Attempts: 1}) {
		t.Error("retrying misjudges the schedule or the cap")
	}
}
