package bench

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
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
