//go:build callpath

package main

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/toolbustest"
)

// maxCallPathFiles is how many source files a reader may have to open to
// follow one call through the cluster (ARCHITECTURE.md lists them).
const maxCallPathFiles = 20

// callPathCalls is how many echo calls the measured process answers more
// than the baseline one: a block of code is on the path of a call when it
// ran at least this many times more, which background work (heartbeats,
// announcements, status) in the same few seconds never reaches.
const callPathCalls = 300

// TestCallPath counts the files whose code runs for one POST /rpc echo
// call to `toolbus dev` with its defaults. It builds the binary with
// coverage counters, runs it twice (answering 5 calls, then 5 +
// callPathCalls), and compares the counters of the two runs.
//
//	go test -tags callpath -run CallPath -v ./cmd/toolbus
func TestCallPath(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "toolbus")
	build := exec.Command("go", "build", "-cover", "-covermode=atomic", "-coverpkg=github.com/toolbus/toolbus/...", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -cover: %v\n%s", err, out)
	}
	base := runCounted(t, bin, filepath.Join(dir, "base"), 0)
	more := runCounted(t, bin, filepath.Join(dir, "more"), callPathCalls)
	files := map[string]int{}
	for block, n := range more {
		if n-base[block] >= callPathCalls {
			files[strings.SplitN(block, ":", 2)[0]]++
		}
	}
	names := make([]string, 0, len(files))
	for f := range files {
		names = append(names, strings.TrimPrefix(f, "github.com/toolbus/toolbus/"))
	}
	slices.Sort(names)
	t.Logf("one POST /rpc echo call runs code in %d files:\n  %s", len(names), strings.Join(names, "\n  "))
	if len(names) > maxCallPathFiles {
		t.Errorf("one call runs code in %d files, more than %d: merge what a reader must follow, or update ARCHITECTURE.md and this bound with a reason",
			len(names), maxCallPathFiles)
	}
}

// runCounted runs `toolbus dev` with its coverage counters written to
// covDir, makes 5 + calls echo calls, stops it with SIGINT, and returns
// its counters by block.
func runCounted(t *testing.T, bin, covDir string, calls int) map[string]int {
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
	cmd := exec.CommandContext(ctx, bin, "dev", "--listen", addr, "--nats-listen", "")
	cmd.Env = append(os.Environ(), "GOCOVERDIR="+covDir)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	base := "http://" + addr
	toolbustest.Eventually(t, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "toolbus dev is ready")
	for i := range 5 + calls {
		resp, err := http.Post(base+"/rpc", "application/json",
			strings.NewReader(`{"jsonrpc":"2.0","id":`+strconv.Itoa(i)+`,"method":"echo","params":{"n":1}}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("echo = HTTP %d", resp.StatusCode)
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("toolbus dev: %v\n%s", err, logs.String())
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
