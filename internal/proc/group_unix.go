//go:build unix

package proc

import (
	"os"
	"syscall"
)

// signalGroup sends sig to the process group that p leads.
func signalGroup(p *os.Process, sig syscall.Signal) error {
	return syscall.Kill(-p.Pid, sig)
}
