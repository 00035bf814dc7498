package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/bench"
)

// TestBenchRunsEveryScenario runs a very short bench and checks that each
// part reports, not how fast it was; a scenario answered wrongly (a missing
// id, a wrong result) makes bench fail. The targets and load generators of
// the outside comparison are this test binary, run as the toolbus command.
func TestBenchRunsEveryScenario(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("the in-flight scenario reads the server's memory from /proc, which this system lacks")
	}
	t.Setenv(runMainEnv, "1")
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"outside, every target", []string{"--concurrency", "1,4", "--targets", "plain,proxy,dev,split,batch,dev-access-log",
			"--skip-scenarios", "--skip-jobs", "--skip-ws", "--skip-overload", "--inflight-batches", "2", "--inflight-calls", "10", "--inflight-sleep", "50ms"}, []string{
			"measured from a load generator process of its own",
			"plain net/http", "reverse proxy", "toolbus dev", "toolbus split", "toolbus dev, 10-call batch", "toolbus dev --access-log",
			"toolbus dev added mean latency at concurrency 1",
			"toolbus split mean latency at concurrency 1 ≤ reverse proxy's",
			"in flight: 2 batches of 10 sleep calls", "20 calls in flight in one process: resident memory ≤ 100 MB",
		}},
		{"in-process scenarios", []string{"--skip-compare", "--skip-inflight", "--repeats", "1", "--jobs-concurrency", "4", "--ws-concurrency", "8"}, []string{
			"in-process scenarios: the load generator and the cluster (bus in-process) share this process",
			"fan-out: 100 sleep calls", "slow backend", "overload: sleep", "heap growth at 10×",
			"jobs: rpc.jobs.get of one finished job", "job submits ≥ 5000/s (concurrency 4", "job poll p50 ≤ 1ms",
			"websocket: 8 callers of echo sharing one WebSocket connection", "WebSocket/HTTP",
		}},
		{"in-process scenarios over tcp", []string{"--bus", "tcp", "--skip-compare", "--skip-inflight", "--skip-scenarios", "--skip-overload", "--jobs-concurrency", "2", "--ws-concurrency", "2"}, []string{
			"bus tcp", "job submits ≥ 5000/s (concurrency 2", "websocket: 2 callers",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"bench", "--binary", os.Args[0], "--duration", "100ms", "--rounds", "1"}, tc.args...)
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

// TestBenchChildStartsNoChildren checks that a process a bench started
// refuses to start targets of its own.
func TestBenchChildStartsNoChildren(t *testing.T) {
	t.Setenv(bench.ChildEnv, "1")
	_, err := execute(t, context.Background(), "bench", "--skip-scenarios", "--skip-jobs", "--skip-ws", "--skip-overload")
	if err == nil || !strings.Contains(err.Error(), bench.ChildEnv) {
		t.Fatalf("bench in a bench's child = %v, want an error naming %s", err, bench.ChildEnv)
	}
}
