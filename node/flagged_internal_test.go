package node

import (
	"regexp"
	"slices"
	"testing"
)

// TestFlaggedOptionsNameRealFlags checks that every flag an option of
// the parts is labelled with, which Validate's errors name, is a flag of
// the process's tables, with every conditional option of a config made.
func TestFlaggedOptionsNameRealFlags(t *testing.T) {
	c := DefaultGatewayConfig()
	c.AckTimeout, c.RetrySafe, c.BreakerFailures, c.CallerMaxInFlight = 1, []string{"echo"}, 1, 1
	c.CallerMaxBytesInFlight, c.WSOrigins, c.MCPStateKey, c.RateLimit = 1, []string{"x"}, "k", 1
	c.Idempotency.On, c.Discovery, c.Jobs.On = true, true, true
	gateway := map[string]bool{}
	for _, f := range GatewayFlags {
		gateway[f.Name] = true
	}
	var labels []string
	for _, f := range c.aggregatorOptions(map[string]int{"echo": 1}) {
		labels = append(labels, f.flags)
	}
	for _, f := range c.ingressOptions() {
		labels = append(labels, f.flags)
	}
	for _, f := range c.gatewayOptions() {
		labels = append(labels, f.flags)
	}
	checkLabels(t, labels, gateway, "GatewayFlags")

	w := DefaultWorkerConfig()
	w.A2A.Prefix, w.A2A.Token, w.A2A.APIKey = "p", "t", "k"
	worker := map[string]bool{}
	for _, f := range slices.Concat(WorkerFlags, StandaloneWorkerFlags) {
		worker[f.Name] = true
	}
	labels = labels[:0]
	for _, f := range w.A2A.options() {
		labels = append(labels, f.flags)
	}
	checkLabels(t, labels, worker, "WorkerFlags")
}

var flagName = regexp.MustCompile(`--[a-z0-9-]+`)

func checkLabels(t *testing.T, labels []string, known map[string]bool, table string) {
	t.Helper()
	for _, l := range labels {
		names := flagName.FindAllString(l, -1)
		if len(names) == 0 {
			t.Errorf("option labelled %q names no flag", l)
		}
		for _, n := range names {
			if !known[n[2:]] {
				t.Errorf("option labelled %q names %s, which is not in %s", l, n, table)
			}
		}
	}
}
