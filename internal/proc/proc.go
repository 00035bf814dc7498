package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Default bounds of a [Spec].
const (
	// DefaultReadyWithin is how long [Start] waits for the ready line
	// when [Spec.ReadyWithin] is zero.
	DefaultReadyWithin = time.Minute
	// DefaultStopWithin is how long [Process.Stop] waits after SIGTERM
	// before it sends SIGKILL when [Spec.StopWithin] is zero.
	DefaultStopWithin = 10 * time.Second
)

// pipeWait bounds how long a process's end waits for its output once it
// has exited: a child it left running that holds the output open must not
// keep the supervisor waiting.
const pipeWait = 2 * time.Second

// Errors of [Start] and [Process.Stop]. Each is wrapped in a sentence that
// names the process, its pid and command line, and ends with the last
// lines of its output.
var (
	// ErrStart means the program could not be started: it does not
	// exist or may not be run.
	ErrStart = errors.New("could not be started")
	// ErrEnded means the process ended before it printed its ready line;
	// the error wraps the [exec.ExitError] too.
	ErrEnded = errors.New("ended before it was ready")
	// ErrNotReady means the process printed no ready line within
	// [Spec.ReadyWithin].
	ErrNotReady = errors.New("printed no ready line in time")
	// ErrKilled means the process did not end within [Spec.StopWithin]
	// of SIGTERM and was killed.
	ErrKilled = errors.New("did not stop when asked and was killed")
	// ErrFailed means the process ended by itself with a non-zero exit
	// status or a signal [Process.Stop] did not send, or ended with a
	// non-zero exit status when asked to stop.
	ErrFailed = errors.New("failed")
)

// Spec is a program to run and how to supervise it. Only Command is
// required.
type Spec struct {
	// Name names the process in errors; the default is the base name of
	// the program.
	Name string
	// Command is the program and its arguments.
	Command []string
	// Env is added to this process's environment.
	Env []string
	// Ready matches the line, on standard output or standard error, that
	// the process prints once it is ready; [Process.Ready] returns its
	// submatches. Nil means that [Start] does not wait.
	Ready *regexp.Regexp
	// ReadyWithin bounds the wait for the ready line; zero means
	// [DefaultReadyWithin].
	ReadyWithin time.Duration
	// StopWithin bounds how long [Process.Stop] waits after SIGTERM
	// before it sends SIGKILL; zero means [DefaultStopWithin].
	StopWithin time.Duration
	// Stdout and Stderr, when not nil, receive what the process writes,
	// one write at a time even when they are the same writer. When one
	// fails, it receives nothing more; the process's output is still
	// read, so that the process never blocks on it. When nil, the stream
	// goes to an unlinked temporary file, read while the ready line is
	// looked for and when [Process.Tail] asks: a process that logs much
	// costs this one nothing.
	Stdout, Stderr io.Writer
}

// Process is a running child started by [Start]. Its methods may be called
// from any goroutine.
type Process struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr *stream
	stopWithin     time.Duration

	readyRE    *regexp.Regexp
	readyFound atomic.Bool   // a ready line was seen; set once
	readyLine  []string      // its submatches; read after readyCh is closed
	readyCh    chan struct{} // closed when a ready line is seen

	done      chan struct{} // closed when the process has ended
	err       error         // how it ended; read after done is closed
	stopCtx   func() bool   // stops the context's watch
	forwardMu sync.Mutex    // one write at a time to Spec.Stdout and Spec.Stderr
	stopOnce  sync.Once
	stopErr   error
}

// Start runs spec.Command in a process group of its own and, when
// spec.Ready is set, waits until the process prints its ready line. It
// fails with [ErrStart] when the program cannot run, and, after stopping
// the process, with [ErrEnded] when it ends first, [ErrNotReady] when
// spec.ReadyWithin passes first, or ctx's error when ctx ends first.
//
// ctx bounds the life of the process, as for [exec.CommandContext]: when
// ctx ends, the process is stopped as by [Process.Stop].
func Start(ctx context.Context, spec Spec) (*Process, error) {
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return nil, errors.New("proc: Spec.Command is empty: give the program to run")
	}
	if spec.ReadyWithin < 0 || spec.StopWithin < 0 {
		return nil, fmt.Errorf("proc: Spec.ReadyWithin %v and Spec.StopWithin %v: want bounds of zero (the default) or more", spec.ReadyWithin, spec.StopWithin)
	}
	name := spec.Name
	if name == "" {
		name = filepath.Base(spec.Command[0])
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("proc: %s was not started: %w", name, err)
	}
	readyWithin := orDefault(spec.ReadyWithin, DefaultReadyWithin)
	p := &Process{
		name:       name,
		cmd:        exec.Command(spec.Command[0], spec.Command[1:]...),
		stopWithin: orDefault(spec.StopWithin, DefaultStopWithin),
		readyRE:    spec.Ready,
		readyCh:    make(chan struct{}),
		done:       make(chan struct{}),
	}
	var err error
	if p.stdout, err = newStream(p, "stdout", spec.Stdout); err == nil {
		if p.stderr, err = newStream(p, "stderr", spec.Stderr); err != nil {
			p.stdout.finish()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("proc: %s was not started: no file for its output: %w", name, err)
	}
	p.cmd.Env = append(os.Environ(), spec.Env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout.output(), p.stderr.output()
	p.cmd.SysProcAttr = sysProcAttr()
	p.cmd.WaitDelay = pipeWait
	if err := p.cmd.Start(); err != nil {
		p.stdout.finish()
		p.stderr.finish()
		return nil, fmt.Errorf("proc: %s (%s) %w: %w (check that the program exists and may be run)", name, p.commandLine(), ErrStart, err)
	}
	p.stopCtx = context.AfterFunc(ctx, func() { p.Stop() })
	go p.wait()
	if spec.Ready == nil {
		return p, nil
	}
	timeout := time.NewTimer(readyWithin)
	defer timeout.Stop()
	// A stream written to a file is read on a tick; a piped one signals.
	var scan <-chan time.Time
	if p.stdout.filed() || p.stderr.filed() {
		tick := time.NewTicker(fileScan)
		defer tick.Stop()
		scan = tick.C
	}
	for {
		select {
		case <-scan:
			p.stdout.scanFile()
			p.stderr.scanFile()
		case <-p.readyCh:
			return p, nil
		case <-p.done:
			if p.readyFound.Load() {
				// The ready line came, then the end; the caller learns of
				// the end from Done.
				return p, nil
			}
			p.Stop()
			return nil, fmt.Errorf("proc: %s %w (%w); %s", p, ErrEnded, p.err, p.lastOutput())
		case <-timeout.C:
			p.Stop()
			return nil, fmt.Errorf("proc: %s %w: no line matching %q within %v (it may need longer, or print another line); %s",
				p, ErrNotReady, spec.Ready, readyWithin, p.lastOutput())
		case <-ctx.Done():
			p.Stop()
			return nil, fmt.Errorf("proc: %s was stopped before it was ready: %w", p, ctx.Err())
		}
	}
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func (p *Process) wait() {
	p.err = p.cmd.Wait()
	p.stdout.finish()
	p.stderr.finish()
	p.stopCtx()
	close(p.done)
}

// String names the process: its name, pid and command line.
func (p *Process) String() string {
	return fmt.Sprintf("%s (pid %d: %s)", p.name, p.cmd.Process.Pid, p.commandLine())
}

func (p *Process) commandLine() string { return strings.Join(p.cmd.Args, " ") }

// Pid returns the process id, which is also its group's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Ready returns the submatches of the ready line, the whole line first, or
// nil when [Spec.Ready] was nil.
func (p *Process) Ready() []string {
	if !p.readyFound.Load() {
		return nil
	}
	<-p.readyCh
	return p.readyLine
}

// Done returns a channel closed when the process has ended and its output
// has been read.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err returns how the process ended, as [exec.Cmd.Wait] says: nil for exit
// status 0. Call it after [Process.Done] is closed.
func (p *Process) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return errors.New("proc: Err called while the process runs: wait for Done first")
	}
}

// Wait waits until the process has ended and returns [Process.Err].
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// Signal sends sig to the process's group: to the process and what it
// started.
func (p *Process) Signal(sig syscall.Signal) error { return signalGroup(p.cmd.Process, sig) }

// Stop ends the process's group: SIGTERM, then SIGKILL when the process has
// not ended within [Spec.StopWithin], then SIGKILL to what is left of the
// group once the process has ended. It waits for the end, and returns nil
// when the process ended at its request (by the signal or with exit status
// 0), [ErrKilled] when it had to be killed and [ErrFailed] otherwise.
// Later calls return what the first returned.
func (p *Process) Stop() error {
	p.stopOnce.Do(func() { p.stopErr = p.stop() })
	return p.stopErr
}

func (p *Process) stop() error {
	select {
	case <-p.done:
		// It ended by itself; what it started may not have.
		_ = p.Signal(syscall.SIGKILL)
		if p.err != nil {
			return fmt.Errorf("proc: %s %w by itself before it was stopped (%w); %s", p, ErrFailed, p.err, p.lastOutput())
		}
		return nil
	default:
	}
	// The group may have ended meanwhile; then there is nothing to signal.
	_ = p.Signal(syscall.SIGTERM)
	t := time.NewTimer(p.stopWithin)
	defer t.Stop()
	select {
	case <-p.done:
		_ = p.Signal(syscall.SIGKILL)
		var ee *exec.ExitError
		if p.err != nil && !(errors.As(p.err, &ee) && !ee.Exited()) {
			return fmt.Errorf("proc: %s %w when asked to stop (%w); %s", p, ErrFailed, p.err, p.lastOutput())
		}
		return nil
	case <-t.C:
		_ = p.Signal(syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("proc: %s %w: it was still running %v after SIGTERM; %s", p, ErrKilled, p.stopWithin, p.lastOutput())
	}
}

// Tail returns the last lines the process wrote, each prefixed by its
// stream (stderr: or stdout:), standard error first; "" when it wrote
// nothing.
func (p *Process) Tail() string {
	var lines []string
	for _, s := range []*stream{p.stderr, p.stdout} {
		for _, l := range s.last(tailLines) {
			lines = append(lines, s.label+": "+l)
		}
	}
	return strings.Join(lines, "\n")
}

// lastOutput ends an error sentence with the process's last output.
func (p *Process) lastOutput() string {
	if t := p.Tail(); t != "" {
		return "its last output:\n" + t
	}
	return "it wrote no output"
}

// found records the ready line m, the first time only.
func (p *Process) found(m [][]byte) {
	if !p.readyFound.CompareAndSwap(false, true) {
		return
	}
	p.readyLine = make([]string, len(m))
	for i, b := range m {
		p.readyLine[i] = string(b)
	}
	close(p.readyCh)
}
