package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/bench"
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

// tenantsTestCommand starts the test binary as the toolbus program of a
// tenants bench: its children run TestBenchTenantsServer.
var tenantsTestCommand = []string{os.Args[0], "-test.run=^TestBenchTenantsServer$", "--"}

// shortTenants is a tenants bench too short to measure anything, unpinned.
func shortTenants() bench.TenantsRunConfig {
	return bench.TenantsRunConfig{Duration: 200 * time.Millisecond, Rounds: 1, Concurrency: 1, FloodConns: 2, Batch: 50,
		SlowConns: 4, WSAnswer: 16 << 10, Deployments: []string{"dev", "split"}, Fair: []bool{true}, ServerCPUs: "0", LoadCPUs: "1",
		Command: tenantsTestCommand, Env: []string{tenantsServerEnv + "=1"}}
}

func runShortTenants(t *testing.T, cfg bench.TenantsRunConfig) string {
	t.Helper()
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("the tenants bench reads the server's memory and CPUs from /proc, which this system lacks")
	}
	var out bytes.Buffer
	if err := bench.RunTenants(context.Background(), &out, nil, cfg); err != nil {
		t.Fatalf("bench tenants: %v\n%s", err, out.String())
	}
	return out.String()
}

// TestBenchTenants runs a very short tenants bench against the dev and
// the split deployment, each started as child processes and loaded from
// load generator children, the victim's and the flood's apart, and checks
// what it reports, not how fast anything was: every round, the three
// verdicts, the flood's answers, the server's memory, where each process
// ran, the table of both deployments, and no failed call of the victim. Which of the flood's requests are answered
// within so short a round depends on the machine, so their classes are
// not asserted.
func TestBenchTenants(t *testing.T) {
	f := shortTenants()
	f.Hostile = true
	out := runShortTenants(t, f)
	for _, w := range []string{
		"toolbus bench tenants: load average ",
		"not pinned (--pin=false)",
		"== dev, --fair=true: toolbus dev --auth on --fair=true",
		"== split, --fair=true: toolbus nats + toolbus worker + toolbus ingress --auth on --fair=true",
		"toolbus dev (pid ", "toolbus nats (pid ", "toolbus worker (pid ", "toolbus ingress (pid ",
		"the victim's load generator (pids ", "the flood's load generator (pid ",
		"50-call echo batches on 2 connections, job submits",
		"round  flood", "all    no", "all    yes",
		"victim p99 under the flood ≤ 3× without it",
		"victim calls/s under the flood ≥ 40% of without it",
		"PASS  victim calls failed = 0: got 0",
		"victim failures: none",
		"flood answers:",
		"server RSS: ",
		"side by side:",
		"deployment  fair",
		"load average ",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("bench tenants output lacks %q:\n%s", w, out)
		}
	}
}

// TestBenchTenantsPinned checks that the bench pins the server and the
// load generators apart, as the kernel reports their affinity.
func TestBenchTenantsPinned(t *testing.T) {
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skip("pinning needs taskset, which is not in PATH")
	}
	cpus, err := bench.ProcessCPUs(os.Getpid())
	if err != nil {
		t.Skip(err)
	}
	if !strings.Contains(cpus, "0") || !strings.Contains(cpus, "1") || cpus == "0" || cpus == "1" {
		t.Skipf("pinning to CPUs 0 and 1 needs both, and this process may run on CPUs %s", cpus)
	}
	f := shortTenants()
	f.Pin, f.Deployments = true, []string{"dev"}
	out := runShortTenants(t, f)
	for _, w := range []string{
		"pinned with taskset: the servers on CPUs 0, the load generators (the victim's and the flood's, in processes apart) on CPUs 1",
		") on CPUs 0, the victim's load generator (pids ",
		") on CPUs 1, the flood's load generator (pid ",
		") on CPUs 1: the server and the load generators are pinned apart",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("bench tenants output lacks %q:\n%s", w, out)
		}
	}
}

// TestBenchTenantsAlone checks that --alone measures the victim against
// a server with fairness on and one with it off, in alternating runs, and
// prints their ratio.
func TestBenchTenantsAlone(t *testing.T) {
	f := shortTenants()
	f.Alone, f.Rounds, f.Deployments = true, 2, []string{"dev"}
	out := runShortTenants(t, f)
	order := []string{
		"== dev, --fair=true", "== dev, --fair=false",
		"run 1, --fair=true", "run 1, --fair=false", "run 2, --fair=false", "run 2, --fair=true",
		"the victim alone, fairness on and off", "dev         on/off",
	}
	rest := out
	for _, w := range order {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("bench tenants --alone output lacks %q after what came before, in the order %q:\n%s", w, order, out)
		}
		rest = rest[i+len(w):]
	}
	if strings.Contains(out, "flood answers") {
		t.Errorf("bench tenants --alone output has a flood:\n%s", out)
	}
}
