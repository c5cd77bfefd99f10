package fleet

import (
	"os"
	"strconv"
	"syscall"
	"time"
)

// sysProcAttr puts the child in its own process group and has the kernel SIGKILL it if
// the bench dies first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// CPUTime returns the user plus system CPU time all threads of process pid, live and
// exited, have used so far (/proc/PID/stat, in clock ticks of 10 ms).
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err //nolint:wrapcheck // names the file
	}
	return parseStatCPU(string(b))
}

// TreeCPUTime is CPUTime of process pid plus that of its live child processes (nginx's
// workers, say), found by their parent pid in /proc.
func TreeCPUTime(pid int) (time.Duration, error) {
	total, err := CPUTime(pid)
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err //nolint:wrapcheck // names the directory
	}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		if ppid, err := parseStatPPID(string(b)); err == nil && ppid == pid {
			if d, err := parseStatCPU(string(b)); err == nil {
				total += d
			}
		}
	}
	return total, nil
}
