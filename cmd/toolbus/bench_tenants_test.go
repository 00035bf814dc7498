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
		"the server runs on CPUs ",
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

func TestDisjointCPUs(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"0", "1", true},
		{"0-1", "1", false},
		{"0,2", "1,3", true},
		{"0-3", "4-7", true},
		{"0-3", "2", false},
		{"0-x", "1", false}, // unreadable: counts as sharing
		{"", "1", false},
	}
	for _, tc := range tests {
		if got := disjoint(tc.a, tc.b); got != tc.want {
			t.Errorf("disjoint(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestPlacementSaysWhetherPinnedApart(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("CPU placement is read from /proc, which this system lacks")
	}
	// This process against itself shares every CPU it may run on.
	if got := placement(os.Getpid(), os.Getpid()); !strings.Contains(got, "not pinned apart") || !strings.Contains(got, "the server runs on CPUs ") {
		t.Errorf("placement of one process against itself = %q, want it named not pinned apart", got)
	}
}
