package pace_test

import (
	"testing"
	"time"

	"github.com/switchyard/switchyard/bench/pace"
)

func TestSchedule(t *testing.T) {
	t.Parallel()
	s := pace.Schedule{Offsets: []time.Duration{0, 100 * time.Millisecond, 100 * time.Millisecond, time.Second}, Scale: 0.5}
	tests := []struct {
		elapsed time.Duration
		hits    uint64
		wait    time.Duration
		stop    bool
	}{
		{0, 0, 0, false},
		{0, 1, 50 * time.Millisecond, false},
		{20 * time.Millisecond, 1, 30 * time.Millisecond, false},
		{80 * time.Millisecond, 2, 0, false}, // late: at once
		{100 * time.Millisecond, 3, 400 * time.Millisecond, false},
		{time.Second, 4, 0, true},
	}
	for _, tt := range tests {
		wait, stop := s.Pace(tt.elapsed, tt.hits)
		if wait != tt.wait || stop != tt.stop {
			t.Errorf("Pace(%v, %d) = %v, %t; want %v, %t", tt.elapsed, tt.hits, wait, stop, tt.wait, tt.stop)
		}
	}
	if d := s.Duration(); d != 500*time.Millisecond {
		t.Errorf("Duration %v", d)
	}
	if d := (pace.Schedule{}).Duration(); d != 0 {
		t.Errorf("empty Duration %v", d)
	}
	if w, _ := (pace.Schedule{Offsets: []time.Duration{0, time.Second}}).Pace(0, 1); w != time.Second {
		t.Errorf("unscaled wait %v", w)
	}
}

func TestConstant(t *testing.T) {
	t.Parallel()
	c := pace.Constant{Rate: 4, Count: 3}
	for _, tt := range []struct {
		elapsed time.Duration
		hits    uint64
		wait    time.Duration
		stop    bool
	}{
		{0, 0, 0, false},
		{0, 1, 250 * time.Millisecond, false},
		{600 * time.Millisecond, 2, 0, false},
		{0, 3, 0, true},
	} {
		wait, stop := c.Pace(tt.elapsed, tt.hits)
		if wait != tt.wait || stop != tt.stop {
			t.Errorf("Pace(%v, %d) = %v, %t; want %v, %t", tt.elapsed, tt.hits, wait, stop, tt.wait, tt.stop)
		}
	}
	if _, stop := (pace.Constant{Count: 3}).Pace(0, 0); !stop {
		t.Error("zero rate does not stop")
	}
}

// TestPacingReplaysSchedule replays a schedule with a pacing loop on a simulated clock
// and checks every hit lands exactly at its due time.
func TestPacingReplaysSchedule(t *testing.T) {
	t.Parallel()
	s := pace.Schedule{Offsets: []time.Duration{0, 3 * time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond}, Scale: 2}
	var now time.Duration
	var sent []time.Duration
	for hits := uint64(0); ; hits++ {
		wait, stop := s.Pace(now, hits)
		if stop {
			break
		}
		now += wait
		sent = append(sent, now)
	}
	want := []time.Duration{0, 6 * time.Millisecond, 6 * time.Millisecond, 20 * time.Millisecond}
	for i := range want {
		if sent[i] != want[i] {
			t.Fatalf("sent at %v, want %v", sent, want)
		}
	}
}
