package fleet_test

import (
	"os"
	"os/exec"
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

func TestTreeCPUTimeCountsChildren(t *testing.T) {
	t.Parallel()
	// A child that spins: once it has used three clock ticks, the parent's tree time less
	// the parent's own must include them (less one tick: the readings follow each other).
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Skip("no sh:", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var child time.Duration
	for start := time.Now(); child < 3*tick && time.Since(start) < 20*time.Second; {
		c, err := fleet.CPUTime(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		child = c
	}
	own, err := fleet.CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	tree, err := fleet.TreeCPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if child < 3*tick || tree-own+tick < child {
		t.Fatalf("tree %v less own %v does not include the child's %v", tree, own, child)
	}
	if _, err := fleet.TreeCPUTime(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
}

// tick is one /proc clock tick, the readings' unit.
const tick = 10 * time.Millisecond
