package bench

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestBenchTenantsRefusesUnknownDeployment(t *testing.T) {
	cfg := TenantsRunConfig{Deployments: []string{"dev", "cluster"}, Fair: []bool{true}, Command: []string{"toolbus-never-started"}}
	if err := RunTenants(context.Background(), io.Discard, nil, cfg); err == nil || !strings.Contains(err.Error(), `"cluster"`) {
		t.Errorf("RunTenants with deployment cluster = %v, want an error naming it", err)
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
	loads := []cpuPlacement{
		{name: "the victim's load generator", pids: []int{9, 11}, cpus: "1"},
		{name: "the flood's load generator", pids: []int{10}, cpus: "1"},
	}
	for _, tc := range []struct {
		name   string
		server []cpuPlacement
		loads  []cpuPlacement
		want   string
	}{
		{"apart", []cpuPlacement{{name: "toolbus dev", pids: []int{7}, cpus: "0"}}, loads,
			"CPU affinity as the kernel reports it: toolbus dev (pid 7) on CPUs 0, the victim's load generator (pids 9, 11) on CPUs 1, the flood's load generator (pid 10) on CPUs 1: the server and the load generators are pinned apart"},
		{"one of three shares", []cpuPlacement{{name: "toolbus nats", pids: []int{5}, cpus: "0"}, {name: "toolbus ingress", pids: []int{6}, cpus: "0-1"}}, loads[:1],
			"CPU affinity as the kernel reports it: toolbus nats (pid 5) on CPUs 0, toolbus ingress (pid 6) on CPUs 0-1, the victim's load generator (pids 9, 11) on CPUs 1: the server and the load generators are not pinned apart: they may share CPUs"},
		{"a load generator shares", []cpuPlacement{{name: "toolbus dev", pids: []int{7}, cpus: "0"}},
			[]cpuPlacement{loads[0], {name: "the flood's load generator", pids: []int{10}, cpus: "0-1"}},
			"CPU affinity as the kernel reports it: toolbus dev (pid 7) on CPUs 0, the victim's load generator (pids 9, 11) on CPUs 1, the flood's load generator (pid 10) on CPUs 0-1: the server and the load generators are not pinned apart: they may share CPUs"},
		{"unread", []cpuPlacement{{name: "toolbus dev", pids: []int{7}, err: errors.New("no /proc")}}, loads[:1],
			"CPU affinity as the kernel reports it: toolbus dev (pid 7) on CPUs unknown, the victim's load generator (pids 9, 11) on CPUs 1: the server and the load generators are not pinned apart: they may share CPUs"},
		{"no load generator said where it ran", []cpuPlacement{{name: "toolbus dev", pids: []int{7}, cpus: "0"}}, nil,
			"CPU affinity as the kernel reports it: toolbus dev (pid 7) on CPUs 0: the server and the load generators are not pinned apart: they may share CPUs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := placement(tc.server, tc.loads); got != tc.want {
				t.Errorf("placement(%v, %v) = %q, want %q", tc.server, tc.loads, got, tc.want)
			}
		})
	}
}

// TestTenantsLoadResultJSON checks that what a load generator measured
// reaches the bench whole: the victim's latencies, to merge with its other
// rounds, its failures and the flood's answers.
func TestTenantsLoadResultJSON(t *testing.T) {
	h := new(histogram)
	for _, d := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 40 * time.Millisecond} {
		h.record(d)
	}
	victim := Result{Concurrency: 1, Requests: 3, Elapsed: time.Second, Throughput: 3, hist: h}
	victim.setLatencies()
	in := tenantsLoadResult{Victim: victim, VictimErrors: map[string]int64{"-32002 caller_max_in_flight": 2}, FirstVictimError: "refused",
		FloodAnswers: map[string]int64{"batch call: ok": 1000}, Pid: 7, CPUs: "1"}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	var out tenantsLoadResult
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("Unmarshal(%s): %v", b, err)
	}
	merged := Result{hist: new(histogram)}
	merged.merge(out.Victim)
	if merged.P99 != victim.P99 || merged.Max != victim.Max || out.VictimErrors["-32002 caller_max_in_flight"] != 2 ||
		out.FirstVictimError != "refused" || out.FloodAnswers["batch call: ok"] != 1000 || out.Pid != 7 || out.CPUs != "1" {
		t.Errorf("after a round trip = %+v (merged p99 %v, max %v), want %+v", out, merged.P99, merged.Max, in)
	}
}

func TestTenantsLoadChildRefusesUnknownSide(t *testing.T) {
	spec := filepath.Join(t.TempDir(), "spec.json")
	b, err := json.Marshal(tenantsLoadSpec{Side: "both", Config: TenantsConfig{URL: "http://127.0.0.1:1/rpc", VictimKey: "v", FloodKey: "f"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec, b, 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := TenantsLoadChild(context.Background(), &out, io.Discard, spec); err == nil || !strings.Contains(err.Error(), `"both"`) {
		t.Errorf("TenantsLoadChild with side both = %v, want an error naming it", err)
	}
	if out.Len() > 0 {
		t.Errorf("TenantsLoadChild with side both printed %q, want nothing", out.String())
	}
}
