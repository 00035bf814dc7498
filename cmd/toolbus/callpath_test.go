//go:build callpath

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/proc"
)

// The most source files a reader may have to open to follow one call
// through the cluster (ARCHITECTURE.md lists them), for each of the two
// paths a call of `toolbus dev` can take. The bounds are the counts as
// they are, so that a file more fails. A bus call needs four files that a
// local call does not: the bus protocol (bus/protocol.go), the envelope
// (schema/envelope.go), what the table keeps besides its calls
// (aggregator/memory.go) and the worker's heartbeats (worker/heartbeat.go);
// it leaves out one, the local hand-off (worker/invoke.go). The concerns
// that have a file and tests of their own (the in-flight caps, the
// fairness layer and its scheduler) are on both paths. A feature that is
// off is on neither: the circuit breaker, off by default, is not counted.
const (
	// maxLocalCallFiles bounds a call that the process's own worker runs
	// without the bus (`toolbus dev`, --local-calls on by default).
	maxLocalCallFiles = 18
	// maxBusCallFiles bounds a call sent over the embedded NATS, as every
	// call of a split deployment is (`toolbus dev --local-calls=false`).
	maxBusCallFiles = 21
)

// callPathCalls is how many echo calls the measured process answers more
// than the baseline one: a block of code is on the path of a call when it
// ran at least this many times more, which background work (heartbeats,
// announcements, status) in the same few seconds never reaches.
const callPathCalls = 300

// TestCallPath counts the files whose code runs for one POST /rpc echo
// call to `toolbus dev`, on each of its paths: run by the process's own
// worker (its defaults), and over the bus (--local-calls=false). It builds
// the binary with coverage counters, runs it twice per path (answering 5
// calls, then 5 + callPathCalls), and compares the counters of the two
// runs.
//
//	go test -tags callpath -run CallPath -v ./cmd/toolbus
func TestCallPath(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "toolbus")
	build := exec.Command("go", "build", "-cover", "-covermode=atomic", "-coverpkg=github.com/toolbus/toolbus/...", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -cover: %v\n%s", err, out)
	}
	tests := []struct {
		name  string
		flags []string
		max   int
		// path is a file only this path runs: the proof that the calls
		// took it.
		path string
	}{
		{name: "local", max: maxLocalCallFiles, path: "worker/invoke.go"},
		{name: "bus", flags: []string{"--local-calls=false"}, max: maxBusCallFiles, path: "schema/envelope.go"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := runCounted(t, bin, filepath.Join(dir, tc.name, "base"), 0, tc.flags)
			more := runCounted(t, bin, filepath.Join(dir, tc.name, "more"), callPathCalls, tc.flags)
			names := callPathFiles(base, more)
			what := strings.TrimSpace("one POST /rpc echo call to toolbus dev " + strings.Join(tc.flags, " "))
			t.Logf("%s runs code in %d files:\n  %s", what, len(names), strings.Join(names, "\n  "))
			if !slices.Contains(names, tc.path) {
				t.Errorf("%s did not run %s: the calls did not take the path measured", what, tc.path)
			}
			if len(names) > tc.max {
				t.Errorf("%s runs code in %d files, more than %d: merge what a reader must follow, or update ARCHITECTURE.md and this bound with a reason",
					what, len(names), tc.max)
			}
		})
	}
}

// callPathFiles returns the files, sorted and relative to the module,
// holding a block that ran at least callPathCalls times more in more than
// in base.
func callPathFiles(base, more map[string]int) []string {
	files := map[string]bool{}
	for block, n := range more {
		if n-base[block] >= callPathCalls {
			file, _, _ := strings.Cut(block, ":")
			files[strings.TrimPrefix(file, "github.com/toolbus/toolbus/")] = true
		}
	}
	names := make([]string, 0, len(files))
	for f := range files {
		names = append(names, f)
	}
	slices.Sort(names)
	return names
}

// runCounted runs `toolbus dev` with flags and its coverage counters
// written to covDir, makes 5 + calls echo calls, stops it with SIGINT, and
// returns its counters by block.
func runCounted(t *testing.T, bin, covDir string, calls int, flags []string) map[string]int {
	t.Helper()
	if err := os.MkdirAll(covDir, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := proc.Start(ctx, proc.Spec{
		Name:    "toolbus dev",
		Command: append([]string{bin, "dev", "--listen", addr, "--nats-listen", ""}, flags...),
		Env:     []string{"GOCOVERDIR=" + covDir},
		Ready:   regexp.MustCompile(`toolbus dev ready`),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop() })
	base := "http://" + addr
	for i := range 5 + calls {
		resp, err := http.Post(base+"/rpc", "application/json",
			strings.NewReader(`{"jsonrpc":"2.0","id":`+strconv.Itoa(i)+`,"method":"echo","params":{"n":1}}`))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(`{"jsonrpc":"2.0","result":{"n":1},"id":%d}`, i); resp.StatusCode != http.StatusOK || string(body) != want {
			t.Fatalf("echo = HTTP %d %s, want 200 %s", resp.StatusCode, body, want)
		}
	}
	// SIGINT, so that it exits as a person stops it and writes its
	// counters on the way out.
	if err := p.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("%v\n%s", err, p.Tail())
	}
	prof := filepath.Join(covDir, "profile.txt")
	if out, err := exec.Command("go", "tool", "covdata", "textfmt", "-i="+covDir, "-o="+prof).CombinedOutput(); err != nil {
		t.Fatalf("go tool covdata: %v\n%s", err, out)
	}
	f, err := os.Open(prof)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	counts := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// file:start,end statements count
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 || strings.HasPrefix(fields[0], "mode:") {
			continue
		}
		n, err := strconv.Atoi(fields[2])
		if err != nil {
			t.Fatalf("profile line %q: %v", sc.Text(), err)
		}
		counts[fields[0]] += n
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(counts) == 0 {
		t.Fatalf("no coverage counters in %s", covDir)
	}
	return counts
}
