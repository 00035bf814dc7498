package main

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/clientcli"
)

// serveFakeStatus serves a fake process's status on e until the test ends
// and returns its id.
func serveFakeStatus(t *testing.T, e *bus.Embedded, prefix, kind string, st bus.Status) string {
	t.Helper()
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s, err := bus.NewSubjects(prefix)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := bus.ServeStatus(nc, s, kind, "1.4.0", func() bus.Status { return st })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop() })
	return svc.Info().ID
}

func TestStatusCommand(t *testing.T) {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	started := time.Now().Add(-90 * time.Minute)
	two := 2
	w1 := serveFakeStatus(t, e, "toolbus", bus.KindWorker, bus.Status{Started: started, InFlight: 2, Methods: []bus.MethodStatus{
		{Method: "math.add", Rate: 2, Calls: 100, Errors: 10, P50Ms: 2, P99Ms: 9, Total: 500},
		{Method: "echo", Rate: 1, Calls: 60, P50Ms: 0.5, P99Ms: 1, Total: 60},
	}})
	w2 := serveFakeStatus(t, e, "toolbus", bus.KindWorker, bus.Status{Started: started, Methods: []bus.MethodStatus{
		{Method: "math.add", Rate: 1, Calls: 50, Errors: 5, P50Ms: 5, P99Ms: 40, Total: 50},
	}})
	in := serveFakeStatus(t, e, "toolbus", bus.KindIngress, bus.Status{Started: started, InFlight: 7, Methods: []bus.MethodStatus{
		{Method: "math.add", Rate: 3, Calls: 150, Errors: 15, P50Ms: 6, P99Ms: 45, Total: 550, Workers: &two},
	}})
	other := serveFakeStatus(t, e, "elsewhere", bus.KindWorker, bus.Status{Methods: []bus.MethodStatus{{Method: "secret.method"}}})

	args := []string{"status", "--nats", e.ClientURL(), "--nats-token", e.Token(), "--wait", "300ms"}
	t.Run("text", func(t *testing.T) {
		out, err := execute(t, context.Background(), args...)
		if err != nil {
			t.Fatalf("status = %v; output:\n%s", err, out)
		}
		for _, want := range []string{
			"toolbus-embedded", e.ClientURL(), "rtt", "jetstream", "on: ",
			w1, w2, in, "1.4.0", "1h30m",
			"METHODS ON WORKERS", "math.add  2 ", "3.00", // two workers, 2+1 calls/s
			"40.0ms", "10.0%", // the largest P99; 15 errors in 150 calls
			"METHODS AT INGRESSES", "echo",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("status printed:\n%s\nwant %q in it", out, want)
			}
		}
		for _, unwanted := range []string{other, "secret.method"} {
			if strings.Contains(out, unwanted) {
				t.Errorf("status printed:\n%s\nwant nothing of another prefix (%q)", out, unwanted)
			}
		}
	})
	t.Run("json", func(t *testing.T) {
		out, err := execute(t, context.Background(), append(args, "--json")...)
		if err != nil {
			t.Fatalf("status --json = %v; output:\n%s", err, out)
		}
		var r clientcli.StatusReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("status --json printed %q: %v", out, err)
		}
		if r.NATS.ServerName != "toolbus-embedded" || !r.NATS.JetStream.Enabled || r.NATS.Version == "" {
			t.Errorf("nats = %+v, want the embedded server with JetStream on", r.NATS)
		}
		if len(r.Instances) != 3 || r.Instances[0].ID != in || r.Instances[0].Kind != bus.KindIngress {
			t.Fatalf("instances = %+v, want the ingress %s then two workers", r.Instances, in)
		}
		want := map[string]bus.MethodStatus{
			"echo":     {Method: "echo", Workers: new(1), Rate: 1, Calls: 60, P50Ms: 0.5, P99Ms: 1, Total: 60},
			"math.add": {Method: "math.add", Workers: new(2), Rate: 3, Calls: 150, Errors: 15, ErrorRate: 0.1, P50Ms: 3, P99Ms: 40, Total: 550},
		}
		if len(r.Methods) != len(want) {
			t.Fatalf("methods = %+v, want %d rows", r.Methods, len(want))
		}
		for _, m := range r.Methods {
			if !reflect.DeepEqual(m, want[m.Method]) {
				t.Errorf("method row = %+v, want %+v", m, want[m.Method])
			}
		}
	})
}

func TestStatusCommandNobody(t *testing.T) {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	out, err := execute(t, context.Background(), "status", "--nats", e.ClientURL(), "--nats-token", e.Token(), "--prefix", "acme.toolbus")
	if err != nil {
		t.Fatalf("status = %v; output:\n%s", err, out)
	}
	if !strings.Contains(out, `No ingress or worker under prefix "acme.toolbus"`) {
		t.Errorf("status printed:\n%s\nwant it to say nobody answered", out)
	}
}

func TestStatusCommandFails(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"nothing listening", []string{"--nats", "nats://127.0.0.1:1", "--connect-timeout", "1s"}},
		{"bad wait", []string{"--wait", "0s"}},
		{"bad prefix", []string{"--prefix", "a.*"}},
		{"bad auth", []string{"--nats-password", "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			out, err := execute(t, context.Background(), append([]string{"status"}, tt.args...)...)
			if err == nil {
				t.Fatalf("status %v succeeded, want an error; output:\n%s", tt.args, out)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("status %v took %v to fail, want it bounded", tt.args, d)
			}
		})
	}
}
