package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
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

// tenantsTestCommand starts the test binary as the toolbus program of a
// tenants bench: its children run TestBenchTenantsServer.
var tenantsTestCommand = []string{os.Args[0], "-test.run=^TestBenchTenantsServer$", "--"}

// shortTenants is a tenants bench too short to measure anything, unpinned.
func shortTenants() benchTenantsFlags {
	return benchTenantsFlags{duration: 200 * time.Millisecond, rounds: 1, concurrency: 1, floodConns: 2, batch: 50,
		slowConns: 4, wsAnswer: 16 << 10, deployments: []string{"dev", "split"}, fair: []bool{true}, serverCPUs: "0", loadCPUs: "1"}
}

func runShortTenants(t *testing.T, f benchTenantsFlags) string {
	t.Helper()
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("the tenants bench reads the server's memory and CPUs from /proc, which this system lacks")
	}
	var out bytes.Buffer
	if err := runBenchTenants(context.Background(), &out, nil, tenantsTestCommand, []string{tenantsServerEnv + "=1"}, f); err != nil {
		t.Fatalf("bench tenants: %v\n%s", err, out.String())
	}
	return out.String()
}

// TestBenchTenants runs a very short tenants bench against the dev and
// the split deployment, each started as child processes and loaded from a
// load generator child, and checks what it reports, not how fast anything
// was: every round, the three verdicts, the flood's answers, the server's
// memory, where each process ran, the table of both deployments, and no
// failed call of the victim. Which of the flood's requests are answered
// within so short a round depends on the machine, so their classes are
// not asserted.
func TestBenchTenants(t *testing.T) {
	f := shortTenants()
	f.hostile = true
	out := runShortTenants(t, f)
	for _, w := range []string{
		"toolbus bench tenants: load average ",
		"not pinned (--pin=false)",
		"== dev, --fair=true: toolbus dev --auth on --fair=true",
		"== split, --fair=true: toolbus nats + toolbus worker + toolbus ingress --auth on --fair=true",
		"toolbus dev (pid ", "toolbus nats (pid ", "toolbus worker (pid ", "toolbus ingress (pid ", "the load generator (pid ",
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
// load generator apart, as the kernel reports their affinity.
func TestBenchTenantsPinned(t *testing.T) {
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skip("pinning needs taskset, which is not in PATH")
	}
	cpus, err := processCPUs(os.Getpid())
	if err != nil {
		t.Skip(err)
	}
	if !strings.Contains(cpus, "0") || !strings.Contains(cpus, "1") || cpus == "0" || cpus == "1" {
		t.Skipf("pinning to CPUs 0 and 1 needs both, and this process may run on CPUs %s", cpus)
	}
	f := shortTenants()
	f.pin, f.deployments = true, []string{"dev"}
	out := runShortTenants(t, f)
	for _, w := range []string{
		"pinned with taskset: the servers on CPUs 0, the load generator on CPUs 1",
		") on CPUs 0, the load generator (pid ",
		") on CPUs 1: the server and the load generator are pinned apart",
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
	f.alone, f.rounds, f.deployments = true, 2, []string{"dev"}
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

func TestBenchTenantsRefusesUnknownDeployment(t *testing.T) {
	f := shortTenants()
	f.deployments = []string{"dev", "cluster"}
	if err := runBenchTenants(context.Background(), io.Discard, nil, tenantsTestCommand, nil, f); err == nil || !strings.Contains(err.Error(), `"cluster"`) {
		t.Errorf("runBenchTenants with deployment cluster = %v, want an error naming it", err)
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

func TestPlacement(t *testing.T) {
	load := cpuPlacement{name: "the load generator", pid: 9, cpus: "1"}
	for _, tc := range []struct {
		name   string
		server []cpuPlacement
		load   cpuPlacement
		want   string
	}{
		{"apart", []cpuPlacement{{name: "toolbus dev", pid: 7, cpus: "0"}}, load,
			"CPU affinity as the kernel reports it: toolbus dev (pid 7) on CPUs 0, the load generator (pid 9) on CPUs 1: the server and the load generator are pinned apart"},
		{"one of three shares", []cpuPlacement{{name: "toolbus nats", pid: 5, cpus: "0"}, {name: "toolbus ingress", pid: 6, cpus: "0-1"}}, load,
			"CPU affinity as the kernel reports it: toolbus nats (pid 5) on CPUs 0, toolbus ingress (pid 6) on CPUs 0-1, the load generator (pid 9) on CPUs 1: the server and the load generator are not pinned apart: they may share CPUs"},
		{"unread", []cpuPlacement{{name: "toolbus dev", pid: 7, err: errors.New("no /proc")}}, load,
			"CPU affinity as the kernel reports it: toolbus dev (pid 7) on CPUs unknown, the load generator (pid 9) on CPUs 1: the server and the load generator are not pinned apart: they may share CPUs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := placement(tc.server, tc.load); got != tc.want {
				t.Errorf("placement(%v, %v) = %q, want %q", tc.server, tc.load, got, tc.want)
			}
		})
	}
}
