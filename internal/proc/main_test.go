//go:build unix

package proc_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/internal/proc"
)

// helperEnv, when set, makes the test binary one of the helper processes
// below instead of running tests; its value names which.
const helperEnv = "PROC_TEST_HELPER"

// The helper processes the tests start.
const (
	// helperServe prints a line on standard output, its ready line on
	// standard error, and runs until SIGTERM, then exits with status 0.
	helperServe = "serve"
	// helperFail prints a line on each stream and exits with status 3.
	helperFail = "fail"
	// helperMute prints its pid, never a ready line, and runs until
	// SIGTERM.
	helperMute = "mute"
	// helperStubborn prints its ready line and ignores SIGTERM.
	helperStubborn = "stubborn"
	// helperSpawner starts a grandchild (the helper named by
	// grandchildEnv) in its own group, prints the grandchild's pid, and
	// runs until SIGTERM.
	helperSpawner = "spawner"
	// helperParent starts helperServe through [proc.Start], prints the
	// child's pid, and runs until it is killed.
	helperParent = "parent"
)

// grandchildEnv names the helper that helperSpawner starts.
const grandchildEnv = "PROC_TEST_GRANDCHILD"

var (
	serveReady = regexp.MustCompile(`^listening on (.+)$`)
	pidLine    = regexp.MustCompile(`pid (\d+)`)
)

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(helper(h))
	}
	goleak.VerifyTestMain(m)
}

func helper(name string) int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	switch name {
	case helperServe:
		fmt.Println("starting")
		fmt.Fprintln(os.Stderr, "listening on 127.0.0.1:4242")
		<-term
		return 0
	case helperFail:
		fmt.Println("loading /etc/nowhere.conf")
		fmt.Fprintln(os.Stderr, "open /etc/nowhere.conf: no such file or directory")
		return 3
	case helperMute:
		fmt.Printf("pid %d\n", os.Getpid())
		<-term
		return 0
	case helperStubborn:
		fmt.Fprintf(os.Stderr, "listening on pid %d\n", os.Getpid())
		for range term {
		}
	case helperSpawner:
		// Started as any program starts its own children: in its group.
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), helperEnv+"="+os.Getenv(grandchildEnv))
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("listening on pid %d\n", cmd.Process.Pid)
		<-term
		return 0
	case helperParent:
		child, err := proc.Start(context.Background(), helperSpec(helperServe))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("listening on pid %d\n", child.Pid())
		<-term
		return 0
	}
	fmt.Fprintf(os.Stderr, "no helper %q\n", name)
	return 1
}

// helperSpec runs the test binary as the helper named name.
func helperSpec(name string, env ...string) proc.Spec {
	return proc.Spec{
		Name:    "helper-" + name,
		Command: []string{os.Args[0]},
		Env:     append([]string{helperEnv + "=" + name}, env...),
		Ready:   serveReady,
	}
}

// alive reports whether process pid runs: a zombie, which waits only for
// its parent to collect it, does not.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !os.IsNotExist(err) || !procMounted()
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

func procMounted() bool {
	_, err := os.Stat("/proc/self/stat")
	return err == nil
}
