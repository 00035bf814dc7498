package main

import "testing"

func TestTracingService(t *testing.T) {
	for name, want := range map[string]string{"ingress": "toolbus-ingress", "worker": "toolbus-worker", "dev": "toolbus"} {
		cmd, _, err := newRootCmd().Find([]string{name})
		if err != nil {
			t.Fatal(err)
		}
		if got := tracingService(cmd); got != want {
			t.Errorf("tracingService(%s) = %q, want %q", name, got, want)
		}
	}
}
