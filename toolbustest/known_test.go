package toolbustest_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

// submitOn sends rpc.jobs.submit of method with params to the ingress at
// url and returns the submit's answer.
func submitOn(t *testing.T, c *toolbustest.Cluster, url, method, params string) schema.Response {
	t.Helper()
	status, body := c.PostURL(t, url, `{"jsonrpc":"2.0","id":1,"method":"rpc.jobs.submit","params":{"method":"`+method+`","params":`+params+`}}`)
	var r schema.Response
	if status != http.StatusOK || json.Unmarshal(body, &r) != nil {
		t.Fatalf("rpc.jobs.submit of %s = HTTP %d %s", method, status, body)
	}
	return r
}

// recordOn reads job id's record on the ingress at url.
func recordOn(t *testing.T, c *toolbustest.Cluster, url, id string) schema.JobRecord {
	t.Helper()
	status, body := c.PostURL(t, url, `{"jsonrpc":"2.0","id":1,"method":"rpc.jobs.get","params":{"id":"`+id+`"}}`)
	var r schema.Response
	if status != http.StatusOK || json.Unmarshal(body, &r) != nil || r.Error != nil {
		t.Fatalf("rpc.jobs.get = HTTP %d %s", status, body)
	}
	var rec schema.JobRecord
	if err := json.Unmarshal(r.Result, &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestSubmitJudgedByKnownTools(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithDiscovery(), toolbustest.WithJobs(), toolbustest.WithoutWorker())
	second := c.AddIngress(t)
	w := c.AddWorker(t, func(rt *worker.Runtime) error {
		return rt.HandleFunc("report.build", func(context.Context, *worker.Request) (any, error) { return "built", nil },
			worker.Schema(json.RawMessage(`{"type":"object","required":["year"],"properties":{"year":{"type":"integer"}}}`), nil))
	})
	// AddWorker returned once both registries list the tool; now its only
	// worker goes, as when a tool is scaled to zero.
	w.Kill()
	toolbustest.Eventually(t, func() bool {
		_, first := c.Registry.Lookup("report.build")
		_, other := second.Registry.Lookup("report.build")
		return !first && !other
	}, "both ingresses see report.build without workers")

	// An ingress started now, that never heard the worker, knows the tool
	// from the bucket the others share.
	third := c.AddIngress(t)
	if !third.Registry.Known("report.build") {
		t.Fatal("an ingress started after the worker left does not know report.build")
	}

	for _, ing := range []*toolbustest.Ingress{second, third} {
		r := submitOn(t, c, ing.URL, "report.build", `{"year":2025}`)
		if r.Error != nil {
			t.Fatalf("submit of a known tool without workers on %s = %v, want accepted", ing.URL, r.Error)
		}
		var sub schema.JobSubmitResult
		if err := json.Unmarshal(r.Result, &sub); err != nil {
			t.Fatal(err)
		}
		// A runner may be trying it at the moment it is read (running,
		// for as long as NATS takes to say that nobody serves it); it goes
		// back to the queue and says why.
		var rec schema.JobRecord
		toolbustest.Eventually(t, func() bool {
			rec = recordOn(t, c, c.URL, sub.ID)
			return rec.State == schema.JobQueued && rec.Waiting == schema.ReasonNoWorkers
		}, "the job of a tool without workers is queued, waiting for a worker")
	}

	refused := []struct {
		name, method, params string
		want                 *schema.Error
	}{
		{"a method never known", "report.burn", `{"year":2025}`, schema.ErrMethodNotFound},
		{"params that break the known schema", "report.build", `{"year":"last"}`, schema.ErrInvalidParams},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			r := submitOn(t, c, third.URL, tt.method, tt.params)
			if !errors.Is(r.Error, tt.want) {
				t.Fatalf("submit of %s %s = %s %v, want code %d", tt.method, tt.params, r.Result, r.Error, tt.want.Code)
			}
			if tt.want == schema.ErrMethodNotFound && r.Error.Reason() != schema.ReasonUnknownMethod {
				t.Errorf("reason = %q, want %q", r.Error.Reason(), schema.ReasonUnknownMethod)
			}
		})
	}
}
