package fleet_test

import (
	"os"
	"testing"
	"time"

	"github.com/switchyard/switchyard/bench/fleet"
)

func TestCPUTimeGrowsWithWork(t *testing.T) {
	t.Parallel()
	before, err := fleet.CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Spin until the process has used three more clock ticks (the reading's unit); the
	// wall-clock bound only stops a broken reading from hanging the test.
	x, grew := uint64(1), false
	for start := time.Now(); !grew && time.Since(start) < 20*time.Second; {
		for range 1 << 20 {
			x = x*6364136223846793005 + 1442695040888963407
		}
		now, err := fleet.CPUTime(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		grew = now-before >= 30*time.Millisecond
	}
	if !grew {
		t.Fatalf("CPU time did not grow past %v while spinning (x=%d)", before, x)
	}
	if _, err := fleet.CPUTime(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
}
