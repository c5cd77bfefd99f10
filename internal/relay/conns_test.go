package relay

import (
	"testing"
	"time"
)

func TestAbortErrorIsATimeoutOnlyForTheTimeouts(t *testing.T) {
	t.Parallel()
	for why, want := range map[uint32]bool{AbortFirstOutput: true, AbortStreamIdle: true, AbortShutdown: false, AbortUnanswered: false} {
		if got := AbortError(why).Timeout(); got != want {
			t.Errorf("AbortError(%d).Timeout() = %v, want %v", why, got, want)
		}
	}
}

// The watchdog's period and tick counts: a timeout T fires between T and T + one period
// after the wait began when the period divides T.
func TestConnsTicks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		first, idle           time.Duration
		period                time.Duration
		firstTicks, idleTicks uint64
	}{
		{30 * time.Second, 30 * time.Second, time.Second, 31, 31},
		{time.Second, time.Second, 125 * time.Millisecond, 9, 9},
		{0, 2 * time.Second, 250 * time.Millisecond, 0, 9},
		{time.Second, 0, 125 * time.Millisecond, 9, 0},
		{4 * time.Millisecond, time.Minute, time.Millisecond, 5, 60001},
		{0, 0, 0, 0, 0},
	} {
		w := NewConns(nil, tc.first, tc.idle, func(uint32) {})
		if w.period != tc.period || w.firstTicks != tc.firstTicks || w.idleTicks != tc.idleTicks {
			t.Errorf("timeouts %v/%v: period %v, ticks %d/%d; want %v, %d/%d", tc.first, tc.idle, w.period, w.firstTicks, w.idleTicks, tc.period, tc.firstTicks, tc.idleTicks)
		}
	}
}
