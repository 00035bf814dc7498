package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestBenchInFlightSplit runs a small in-flight scenario through the split
// deployment of two programs, in two alternating rounds, and checks what
// it reports, not how fast: every round in order, each figure, both
// verdicts, the table of the rounds, and no child left running. Both
// programs are this test binary, run as the toolbus command under two
// names; a batch answered wrongly fails the bench.
func TestBenchInFlightSplit(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("the bench reads the processes' memory from /proc, which this system lacks")
	}
	t.Setenv(runMainEnv, "1")
	dir := t.TempDir()
	a, b := filepath.Join(dir, "toolbus-a"), filepath.Join(dir, "toolbus-b")
	for _, name := range []string{a, b} {
		if err := os.Symlink(os.Args[0], name); err != nil {
			t.Fatal(err)
		}
	}
	out, err := execute(t, context.Background(), "bench", "inflight-split", "--binary", a, "--binary", b, "--rounds", "2",
		"--batches", "2", "--calls", "20", "--sleep", "200ms")
	if err != nil {
		t.Fatalf("bench inflight-split: %v\n%s", err, out)
	}
	order := []string{
		"toolbus worker --concurrency 80; toolbus ingress --auth off --max-in-flight 2040 --batch-concurrency 20",
		"round 1, " + a + ": 2 batches of 20 sleep calls of 200ms at once",
		"round 1, " + b, "round 2, " + a, "round 2, " + b,
		"side by side, in the order they ran:",
		"1      " + a, "1      " + b, "2      " + a, "2      " + b,
		"load average ",
	}
	rest := out
	for _, w := range order {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("bench inflight-split output lacks %q after what came before, in the order %q:\n%s", w, order, out)
		}
		rest = rest[i+len(w):]
	}
	for _, w := range []string{"ingress RSS (pid ", "\n  answered in ", "worker RSS (pid ", "NATS RSS (pid ",
		"40 calls in flight through one ingress of a split deployment: its resident memory grows ≤ 0.16 MB (4 KB a call)",
		"40 calls in flight answered within 500ms of the tools' 200ms"} {
		if n := strings.Count(out, w); n != 4 {
			t.Errorf("bench inflight-split output has %q %d times, want once a round:\n%s", w, n, out)
		}
	}
	for _, m := range regexp.MustCompile(`\(pid (\d+)\)`).FindAllStringSubmatch(out, -1) {
		pid, _ := strconv.Atoi(m[1])
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("child %s is still running after the bench (kill 0: %v)", m[0], err)
		}
	}
}
