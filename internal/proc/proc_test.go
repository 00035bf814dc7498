//go:build unix

package proc_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/proc"
	"github.com/toolbus/toolbus/internal/testwait"
)

func TestStartWaitsForTheReadyLine(t *testing.T) {
	for _, tc := range []struct {
		name    string
		writers bool
	}{
		{"output to the caller's writers", true},
		{"output to files of its own", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := helperSpec(helperServe)
			var out bytes.Buffer
			if tc.writers {
				spec.Stdout, spec.Stderr = &out, &out
			}
			p, err := proc.Start(context.Background(), spec)
			if err != nil {
				t.Fatalf("Start = %v", err)
			}
			if got := p.Ready(); len(got) != 2 || got[1] != "127.0.0.1:4242" {
				t.Errorf("Ready() = %q, want the line and 127.0.0.1:4242", got)
			}
			// While it runs, a piped stream may not have been read yet;
			// the one that held the ready line has.
			if got, want := p.Tail(), "stderr: listening on 127.0.0.1:4242"; !strings.HasPrefix(got, want) {
				t.Errorf("Tail() while it runs = %q, want it to begin with %q", got, want)
			}
			const tail = "stderr: listening on 127.0.0.1:4242\nstdout: starting"
			if err := p.Stop(); err != nil {
				t.Errorf("Stop = %v, want nil: the helper exits 0 on SIGTERM", err)
			}
			if got := p.Tail(); got != tail {
				t.Errorf("Tail() once it ended = %q, want %q", got, tail)
			}
			if !tc.writers {
				return
			}
			for _, want := range []string{"starting\n", "listening on 127.0.0.1:4242\n"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("the writers got %q, want it to hold %q", out.String(), want)
				}
			}
		})
	}
}

func TestStartNamesWhyTheProcessEnded(t *testing.T) {
	_, err := proc.Start(context.Background(), helperSpec(helperFail))
	if !errors.Is(err, proc.ErrEnded) {
		t.Fatalf("Start = %v, want ErrEnded", err)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("Start = %v, want it to wrap exit status 3", err)
	}
	// The sentence a person reads names the process and shows the cause.
	for _, want := range []string{"helper-fail (pid ", os.Args[0], "exit status 3",
		"stderr: open /etc/nowhere.conf: no such file or directory", "stdout: loading /etc/nowhere.conf"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start = %q, want it to hold %q", err, want)
		}
	}
}

func TestStartFailsForAMissingProgram(t *testing.T) {
	_, err := proc.Start(context.Background(), proc.Spec{Command: []string{"/nonexistent/program"}})
	if !errors.Is(err, proc.ErrStart) {
		t.Fatalf("Start = %v, want ErrStart", err)
	}
}

// TestStartGivesUpWithoutTheReadyLine bounds the wait by a short
// ReadyWithin, since the timeout firing is the behaviour under test.
func TestStartGivesUpWithoutTheReadyLine(t *testing.T) {
	spec := helperSpec(helperMute)
	spec.ReadyWithin = 100 * time.Millisecond
	_, err := proc.Start(context.Background(), spec)
	if !errors.Is(err, proc.ErrNotReady) {
		t.Fatalf("Start = %v, want ErrNotReady", err)
	}
	waitGone(t, pidIn(t, err.Error()))
}

func TestStartStopsWhenTheContextEnds(t *testing.T) {
	t.Run("before the ready line", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		spec := helperSpec(helperMute)
		var out lineWriter
		out.line = func(line string) { cancel() }
		spec.Stdout = &out
		_, err := proc.Start(ctx, spec)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Start = %v, want context.Canceled", err)
		}
		waitGone(t, pidIn(t, out.String()))
	})
	t.Run("after the ready line", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		p, err := proc.Start(ctx, helperSpec(helperServe))
		if err != nil {
			t.Fatalf("Start = %v", err)
		}
		cancel()
		waitDone(t, p)
		if err := p.Err(); err != nil {
			t.Errorf("Err() = %v, want nil: the helper exits 0 on SIGTERM", err)
		}
		if err := p.Stop(); err != nil {
			t.Errorf("Stop after the context's stop = %v, want nil", err)
		}
	})
}

func TestStopKillsTheWholeGroup(t *testing.T) {
	for _, tc := range []struct {
		name       string
		grandchild string
	}{
		{"a grandchild that ends on SIGTERM", helperMute},
		{"a grandchild that ignores SIGTERM", helperStubborn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := proc.Start(context.Background(), helperSpec(helperSpawner, grandchildEnv+"="+tc.grandchild))
			if err != nil {
				t.Fatalf("Start = %v", err)
			}
			grandchild := pidIn(t, p.Ready()[1])
			t.Cleanup(func() { syscall.Kill(grandchild, syscall.SIGKILL) })
			if err := p.Stop(); err != nil {
				t.Errorf("Stop = %v, want nil", err)
			}
			waitGone(t, grandchild)
		})
	}
}

// TestStopKillsWhatIgnoresSIGTERM bounds the wait after SIGTERM by a short
// StopWithin, since the bound firing is the behaviour under test.
func TestStopKillsWhatIgnoresSIGTERM(t *testing.T) {
	spec := helperSpec(helperStubborn)
	spec.StopWithin = 100 * time.Millisecond
	p, err := proc.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	if err := p.Stop(); !errors.Is(err, proc.ErrKilled) {
		t.Errorf("Stop = %v, want ErrKilled", err)
	}
	if err := p.Stop(); !errors.Is(err, proc.ErrKilled) {
		t.Errorf("Stop again = %v, want what the first returned", err)
	}
}

func TestStopReportsAnEndOfItsOwn(t *testing.T) {
	spec := helperSpec(helperFail)
	spec.Ready = nil
	p, err := proc.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	waitDone(t, p)
	var ee *exec.ExitError
	if err := p.Stop(); !errors.Is(err, proc.ErrFailed) || !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("Stop = %v, want ErrFailed with exit status 3", err)
	}
}

// TestNoOrphanWhenTheParentIsKilled kills a parent process (the test
// binary as helperParent) that started its child through proc, and waits
// for the child to end with it.
func TestNoOrphanWhenTheParentIsKilled(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skipf("only Linux has a parent-death signal; on %s the child outlives a killed parent, as the package doc says", runtime.GOOS)
	}
	parent, err := proc.Start(context.Background(), helperSpec(helperParent))
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	t.Cleanup(func() { parent.Stop() })
	child := pidIn(t, parent.Ready()[1])
	t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
	if !alive(child) {
		t.Fatalf("the child %d has ended before its parent was killed", child)
	}
	// The parent alone, not its group: the child is in a group of its own
	// anyway.
	if err := syscall.Kill(parent.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitDone(t, parent)
	waitGone(t, child)
}

// lineWriter calls line with each line written to it.
type lineWriter struct {
	bytes.Buffer
	line func(string)
}

func (w *lineWriter) Write(b []byte) (int, error) {
	n, err := w.Buffer.Write(b)
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if strings.HasSuffix(l, "\n") {
			w.line(strings.TrimSuffix(l, "\n"))
		}
	}
	return n, err
}

// pidIn returns the pid that text names as "pid N".
func pidIn(t *testing.T, text string) int {
	t.Helper()
	m := pidLine.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no pid in %q", text)
	}
	pid, err := strconv.Atoi(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitDone waits until p has ended.
func waitDone(t *testing.T, p *proc.Process) {
	t.Helper()
	guard := time.NewTimer(testwait.Limit)
	defer guard.Stop()
	select {
	case <-p.Done():
	case <-guard.C:
		t.Fatalf("%s has not ended within %v", p, testwait.Limit)
	}
}

// waitGone waits until process pid no longer runs: no event tells of the
// end of a process that is not this one's child, so it asks.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	testwait.Eventually(t, func() bool { return !alive(pid) }, "process "+strconv.Itoa(pid)+" has ended")
}
