package main

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// tenantsServerEnv marks the child process TestBenchTenants starts.
const tenantsServerEnv = "TOOLBUS_BENCH_TENANTS_SERVER"

// TestBenchTenantsServer is the server of TestBenchTenants, run as its
// child process: the test binary stands in for the toolbus program, and
// runs the command line that follows "--".
func TestBenchTenantsServer(t *testing.T) {
	if os.Getenv(tenantsServerEnv) == "" {
		t.Skip("the server of TestBenchTenants: runs only as its child process")
	}
	i := slices.Index(os.Args, "--")
	cmd := newRootCmd()
	cmd.SetArgs(os.Args[i+1:])
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// TestBenchTenants runs a very short tenants bench against a child
// process and checks what it reports, not how fast anything was: every
// round, both verdicts, the flood's answers and the server's memory, and
// no failed call of the victim. Which of the flood's requests are answered
// within so short a round depends on the machine, so their classes are not
// asserted.
func TestBenchTenants(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("the tenants bench reads the server's memory from /proc, which this system lacks")
	}
	var out bytes.Buffer
	f := benchTenantsFlags{duration: 200 * time.Millisecond, rounds: 1, concurrency: 2, floodConns: 2, batch: 50, slowConns: 4, wsAnswer: 16 << 10}
	err := runBenchTenants(context.Background(), &out, newProgressStarter(nil),
		[]string{os.Args[0], "-test.run=^TestBenchTenantsServer$", "--"}, []string{tenantsServerEnv + "=1"}, f)
	if err != nil {
		t.Fatalf("bench tenants: %v\n%s", err, out.String())
	}
	for _, w := range []string{
		"toolbus dev --auth on",
		"round  flood", "all    no", "all    yes",
		"victim p99 under the flood ≤ 2× without it",
		"PASS  victim calls failed = 0: got 0",
		"victim failures: none",
		"flood answers:",
		"server RSS: ",
	} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("bench tenants output lacks %q:\n%s", w, out.String())
		}
	}
}
