package main

import (
	"context"
	"strings"
	"testing"
)

// TestBenchRunsEveryScenario runs a very short bench over both bus
// transports and checks that each part reports, not how fast it was; a
// scenario answered wrongly (a missing id, a wrong result) makes bench fail.
func TestBenchRunsEveryScenario(t *testing.T) {
	for _, tc := range []struct {
		name string
		bus  string
		args []string
		want []string
	}{
		{"in-process", "in-process", []string{"--concurrency", "1,4", "--repeats", "1", "--jobs-concurrency", "4", "--ws-concurrency", "8"}, []string{
			"bus in-process", "plain net/http", "toolbus", "b/a",
			"added mean latency at concurrency 1",
			"fan-out: 100 sleep calls", "slow backend", "overload: sleep", "heap growth at 10×",
			"jobs: rpc.jobs.get of one finished job", "job submits ≥ 5000/s (concurrency 4", "job poll p50 ≤ 1ms",
			"websocket: 8 callers of echo sharing one WebSocket connection", "WebSocket/HTTP",
		}},
		{"tcp, comparison only", "tcp", []string{"--concurrency", "1", "--skip-scenarios", "--skip-jobs", "--skip-ws"}, []string{
			"bus tcp", "plain net/http", "b/a",
		}},
		{"tcp, jobs and WebSocket only", "tcp", []string{"--skip-compare", "--skip-scenarios", "--jobs-concurrency", "2", "--ws-concurrency", "2"}, []string{
			"bus tcp", "job submits ≥ 5000/s (concurrency 2", "websocket: 2 callers",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"bench", "--bus", tc.bus, "--duration", "100ms", "--rounds", "1"}, tc.args...)
			out, err := execute(t, context.Background(), args...)
			if err != nil {
				t.Fatalf("bench: %v\n%s", err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("bench output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestBenchRejectsUnknownBus(t *testing.T) {
	_, err := execute(t, context.Background(), "bench", "--bus", "carrier-pigeon")
	if err == nil || !strings.Contains(err.Error(), "--bus") {
		t.Fatalf("bench --bus carrier-pigeon = %v, want an error naming --bus", err)
	}
}
