//go:build !unix

package proc

import (
	"os"
	"syscall"
)

// sysProcAttr asks for nothing: these systems have no process groups to
// put the child in.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// signalGroup ends p itself: without groups, its children are out of
// reach, and without Unix signals, the only one that can be sent is a
// kill, which SIGTERM becomes.
func signalGroup(p *os.Process, sig syscall.Signal) error {
	return p.Kill()
}
