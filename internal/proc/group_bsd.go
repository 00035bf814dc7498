//go:build unix && !linux

package proc

import "syscall"

// sysProcAttr puts the child in a process group of its own. These systems
// have no parent-death signal that Go can ask for: see the package doc.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
