package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine running: every
// command must stop its NATS server, connections and HTTP server.
//
// With [runMainEnv] set, the test binary is the toolbus command instead,
// so that a test can start it as a process of its own.
func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	goleak.VerifyTestMain(m)
}

// runMainEnv makes the test binary run main with its arguments.
const runMainEnv = "TOOLBUS_TEST_RUN_MAIN"

// execute runs the toolbus command line args with ctx and returns what the
// command printed. Logs go to standard error at level error only, and the
// default logger the command installs is put back when the test ends.
func execute(t *testing.T, ctx context.Context, args ...string) (string, error) {
	t.Helper()
	var out syncBuffer
	err := start(t, &out, args...).ExecuteContext(ctx)
	return out.String(), err
}

// start prepares the root command with args, writing to out. Run it with
// ExecuteContext.
func start(t *testing.T, out *syncBuffer, args ...string) *cobra.Command {
	t.Helper()
	prev := slog.Default()
	t.Cleanup(func() { slog.SetDefault(prev) })
	cmd := newRootCmd()
	cmd.SetArgs(append([]string{"--log-level", "error"}, args...))
	cmd.SetOut(out)
	cmd.SetErr(out)
	return cmd
}

// syncBuffer is a bytes.Buffer safe for a command writing in one goroutine
// while the test reads in another.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until re matches the output and returns the match's first
// group. It fails the test when done is closed first (the command ended,
// with the error ended returns) or after a generous bound.
func (b *syncBuffer) waitFor(t *testing.T, re *regexp.Regexp, done <-chan struct{}, ended func() error) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if m := re.FindStringSubmatch(b.String()); m != nil {
			return m[1]
		}
		select {
		case <-done:
			if m := re.FindStringSubmatch(b.String()); m != nil {
				return m[1]
			}
			t.Fatalf("command ended before printing %q: %v; output:\n%s", re, ended(), b.String())
		case <-timeout:
			t.Fatalf("no %q in the output after 30s; output:\n%s", re, b.String())
		case <-tick.C:
		}
	}
}
