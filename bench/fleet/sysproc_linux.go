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
