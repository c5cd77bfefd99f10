//go:build !linux

package fleet

import (
	"errors"
	"syscall"
	"time"
)

// sysProcAttr puts the child in its own process group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// TreeCPUTime is not available here.
func TreeCPUTime(int) (time.Duration, error) {
	return 0, errors.ErrUnsupported
}

// CPUTime is not available here.
func CPUTime(int) (time.Duration, error) {
	return 0, errors.ErrUnsupported
}
