package fleet

import "syscall"

// sysProcAttr puts the child in its own process group and has the kernel SIGKILL it if
// the bench dies first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
