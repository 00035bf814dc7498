package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/clientcli"
)

// TestConformGoWorker runs `toolbus conform` against `toolbus worker
// --tools conform`, started as a process: the Go runtime passes every
// rule it speaks.
func TestConformGoWorker(t *testing.T) {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	t.Setenv(runMainEnv, "1") // for the worker process the kit starts
	out, err := execute(t, context.Background(), "conform", "--nats", e.ClientURL(), "--nats-token", e.Token(), "--",
		os.Args[0], "worker", "--tools", "conform", "--metrics-listen", "", "--log-level", "error")
	if err != nil {
		t.Fatalf("toolbus conform: %v\n%s", err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "FAIL"):
			t.Errorf("%s", line)
		case strings.HasPrefix(line, "SKIP"):
			// The Go runtime speaks every rule, the optional ones
			// (liveness, orphans, busy refusals, progress reports)
			// included.
			t.Errorf("%s", line)
		}
	}
	if !strings.Contains(out, "0 failed") {
		t.Errorf("summary missing:\n%s", out)
	}
	if t.Failed() {
		t.Logf("toolbus conform printed:\n%s", out)
	}
}

func TestConformNeedsACommand(t *testing.T) {
	_, err := execute(t, context.Background(), "conform", "--nats", "nats://127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "after --") {
		t.Errorf("toolbus conform without a command: %v, want an error that says to give it after --", err)
	}
	if errors.Is(err, clientcli.ErrReported) {
		t.Errorf("error %v is reported as a failed check", err)
	}
}
