package proc

import "syscall"

// sysProcAttr puts the child in a process group of its own, and has the
// kernel kill it when the thread that started it ends with its process.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
