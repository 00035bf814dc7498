package conform

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// process is the worker's running command.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // how it exited; read after done
	once sync.Once
}

// startProcess starts argv in a process group of its own, so that a
// command that wraps the worker (a shell, `go run`) passes SIGTERM on,
// writing its output to out.
func startProcess(argv, env []string, out io.Writer) (*process, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	if out == nil {
		out = io.Discard
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A child of the worker that keeps its output open must not keep the
	// kit waiting once the worker itself has exited.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: %q: %w (check the command after -- and that it is on PATH)", ErrStart, argv[0], err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has exited, and how.
func (p *process) exited() (bool, string) {
	select {
	case <-p.done:
		return true, p.exitText()
	default:
		return false, ""
	}
}

func (p *process) exitText() string {
	if p.err == nil {
		return "ended (exit status 0)"
	}
	return "ended (" + p.err.Error() + ")"
}

// signal sends sig to the process group.
func (p *process) signal(sig syscall.Signal) {
	// The group may be gone already; then there is nothing to signal.
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
}

// wait waits at most d for the process to exit.
func (p *process) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// kill ends the process group, gently first, and waits for the process.
func (p *process) kill() {
	p.once.Do(func() {
		if ok, _ := p.exited(); ok {
			p.signal(syscall.SIGKILL) // what the worker left running
			return
		}
		p.signal(syscall.SIGTERM)
		if !p.wait(2 * time.Second) {
			p.signal(syscall.SIGKILL)
			<-p.done
		}
	})
}
