package clientcli

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
)

func TestMergeWorkerMethods(t *testing.T) {
	statuses := []bus.Status{
		{Kind: bus.KindIngress, Methods: []bus.MethodStatus{{Method: "a", Calls: 1000}}},
		{Kind: bus.KindWorker, Methods: []bus.MethodStatus{{Method: "b", Calls: 3, P50Ms: 10, P99Ms: 20}, {Method: "a", Calls: 1, P50Ms: 1, P99Ms: 1}}},
		{Kind: bus.KindWorker, Methods: []bus.MethodStatus{{Method: "b", Calls: 1, Errors: 1, P50Ms: 2, P99Ms: 50}}},
		{Kind: bus.KindWorker, Extra: map[string]any{"error": "timeout"}},
		{Kind: bus.KindWorker, Methods: []bus.MethodStatus{{Method: "idle"}}},
	}
	got := mergeWorkerMethods(statuses)
	want := []bus.MethodStatus{
		{Method: "a", Workers: new(1), Calls: 1, P50Ms: 1, P99Ms: 1},
		{Method: "b", Workers: new(2), Calls: 4, Errors: 1, ErrorRate: 0.25, P50Ms: 8, P99Ms: 50},
		{Method: "idle", Workers: new(1)},
	}
	if len(got) != len(want) {
		t.Fatalf("mergeWorkerMethods = %+v, want %+v", got, want)
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("mergeWorkerMethods row %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestPrintStatusNotes(t *testing.T) {
	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	r := StatusReport{
		NATS: natsReport{URL: "nats://n:4222", JetStream: jetStreamReport{Error: "not enabled on the server"}},
		Instances: []bus.Status{
			{Kind: bus.KindIngress, ID: "in1", Host: "h1", Version: "1.0.0", Started: now.Add(-time.Hour), InFlight: 4},
			{Kind: bus.KindWorker, ID: "w1", Host: "h2", Version: "1.0.0", Extra: map[string]any{"error": "context deadline exceeded"}},
		},
	}
	var out strings.Builder
	printStatus(&out, r, StatusConfig{Prefix: "toolbus", Wait: time.Second}, now)
	for _, want := range []string{"jetstream      unavailable: not enabled on the server", "NOTE", "1h0m0s", "no status: context deadline exceeded", "none reported"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("printStatus wrote:\n%s\nwant %q in it", out.String(), want)
		}
	}
	for i, line := range strings.Split(out.String(), "\n") {
		if strings.TrimRight(line, " ") != line {
			t.Errorf("line %d %q ends in spaces", i+1, line)
		}
	}
}
