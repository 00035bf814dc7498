package conform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os/exec"
	"syscall"
	"time"

	"github.com/toolbus/toolbus/internal/proc"
)

// process is the worker's running command, as the rules see it.
type process struct{ *proc.Process }

// startProcess starts argv in a process group of its own, so that a
// command that wraps the worker (a shell, `go run`) passes SIGTERM on,
// writing its output to out. When ctx ends, the worker is stopped.
func startProcess(ctx context.Context, argv, env []string, out io.Writer) (*process, error) {
	p, err := proc.Start(ctx, proc.Spec{Name: "the worker", Command: argv, Env: env, Stdout: out, Stderr: out,
		StopWithin: 2 * time.Second})
	if errors.Is(err, proc.ErrStart) {
		// Said of the command line, with its fix there.
		var notFound *exec.Error
		var notRun *fs.PathError
		if errors.As(err, &notFound) {
			err = notFound
		} else if errors.As(err, &notRun) {
			err = notRun
		}
		return nil, fmt.Errorf("%w: %q: %w (check the command after -- and that it is on PATH)", ErrStart, argv[0], err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStart, err)
	}
	return &process{p}, nil
}

// exited reports whether the process has exited, and how.
func (p *process) exited() (bool, string) {
	select {
	case <-p.Done():
		if err := p.Err(); err != nil {
			return true, "ended (" + err.Error() + ")"
		}
		return true, "ended (exit status 0)"
	default:
		return false, ""
	}
}

// signal sends sig to the process group.
func (p *process) signal(sig syscall.Signal) {
	// The group may be gone already; then there is nothing to signal.
	_ = p.Signal(sig)
}

// wait waits at most d for the process to exit.
func (p *process) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.Done():
		return true
	case <-t.C:
		return false
	}
}

// kill ends the process group, gently first, and waits for the process.
// How the worker ended is the rules' to judge, not the stop's.
func (p *process) kill() { _ = p.Stop() }
