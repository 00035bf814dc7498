package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

// knownTools is a method check as the ingress's registry gives one: echo
// is served now, idle is known without a worker, strict takes no "bad"
// member, and nothing else was ever announced.
func knownTools(_ context.Context, method string, params json.RawMessage) (string, *schema.Error) {
	switch method {
	case "echo":
		return "", nil
	case "idle":
		return schema.ReasonNoWorkers, nil
	case "strict":
		var p map[string]any
		if json.Unmarshal(params, &p) == nil && p["bad"] != nil {
			return "", schema.NewError(schema.CodeInvalidParams, "invalid params: /bad: not allowed",
				map[string]any{"field": "/bad", "reason": "not allowed", "method": method, "source": "schema"})
		}
		return "", nil
	}
	return "", schema.NewError(schema.CodeMethodNotFound, "method not found: no worker has announced "+method,
		map[string]any{"reason": schema.ReasonUnknownMethod, "method": method})
}

func TestSubmitMethodCheck(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	s := newService(t, js, jobs.WithMethodCheck(knownTools))

	refused := []struct {
		name    string
		method  string
		params  string
		wantErr *schema.Error
		want    string // data.reason or data.field
	}{
		{"a method never known", "never", `{}`, schema.ErrMethodNotFound, schema.ReasonUnknownMethod},
		{"params that break the schema", "strict", `{"bad":1}`, schema.ErrInvalidParams, "/bad"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			_, rpcErr := rpc(t, s, "", schema.MethodJobsSubmit, fmt.Sprintf(`{"method":%q,"params":%s}`, tt.method, tt.params))
			if !isErr(rpcErr, tt.wantErr) {
				t.Fatalf("submit %s %s = %v, want code %d", tt.method, tt.params, rpcErr, tt.wantErr.Code)
			}
			if d := errorData(t, rpcErr); d["reason"] != tt.want && d["field"] != tt.want {
				t.Errorf("submit %s: data = %v, want %q", tt.method, d, tt.want)
			}
		})
	}
	if n := queuedMessages(t, js); n != 0 {
		t.Errorf("%d jobs queued after refused submits, want 0", n)
	}

	served := submit(t, s, "echo", `{}`)
	if r, _ := get(t, s, served); r.State != schema.JobQueued || r.Waiting != "" {
		t.Errorf("job of a served method: state %s, waiting %q; want queued, not waiting", r.State, r.Waiting)
	}
	idle := submit(t, s, "idle", `{}`)
	if r, _ := get(t, s, idle); r.State != schema.JobQueued || r.Waiting != schema.ReasonNoWorkers {
		t.Errorf("job of a method without workers: state %s, waiting %q; want queued, %q", r.State, r.Waiting, schema.ReasonNoWorkers)
	}
	res, rpcErr := rpc(t, s, "", schema.MethodJobsList, `{}`)
	if rpcErr != nil {
		t.Fatal(rpcErr)
	}
	var page schema.JobList
	if err := json.Unmarshal(res, &page); err != nil {
		t.Fatal(err)
	}
	for _, r := range page.Jobs {
		if r.ID == idle && r.Waiting != schema.ReasonNoWorkers {
			t.Errorf("rpc.jobs.list shows the idle job waiting %q, want %q", r.Waiting, schema.ReasonNoWorkers)
		}
	}

	// Once a worker takes the job, it no longer waits.
	startRunner(t, js, newRuntime(t, nc, func(rt *worker.Runtime) error {
		return rt.HandleFunc("idle", func(context.Context, *worker.Request) (any, error) { return "ran", nil })
	}))
	if r := waitState(t, s, idle, schema.JobSucceeded); r.Waiting != "" {
		t.Errorf("finished job: waiting %q, want none", r.Waiting)
	}
}

func TestSubmitWithoutMethodCheck(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js)
	id := submit(t, s, "never.announced", `{}`)
	if r, _ := get(t, s, id); r.State != schema.JobQueued || r.Waiting != "" {
		t.Errorf("job without a method check: state %s, waiting %q; want queued, not waiting", r.State, r.Waiting)
	}
}
