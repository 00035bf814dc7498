package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

// subscribe subscribes caller to job id.
func subscribe(ctx context.Context, s *jobs.Service, caller, id string) (json.RawMessage, func(context.Context, func(string, json.RawMessage)), *schema.Error) {
	call := schema.Call{Request: schema.Request{ID: json.RawMessage(`1`), Method: schema.MethodJobsSubscribe,
		Params: json.RawMessage(fmt.Sprintf(`{"id":%q}`, id))}, Caller: caller}
	return s.Subscribe(ctx, call)
}

// submitFor submits a job of method for caller and returns its id.
func submitFor(t *testing.T, s *jobs.Service, caller, method string) string {
	t.Helper()
	res, e := rpc(t, s, caller, schema.MethodJobsSubmit, `{"method":"`+method+`"}`)
	if e != nil {
		t.Fatalf("submit %s as %q: %v", method, caller, e)
	}
	var r schema.JobSubmitResult
	if err := json.Unmarshal(res, &r); err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// TestSubscribeStreamsToTheFinalRecord checks that a subscription answers
// the record as it is, then notifies later versions, the final one last,
// and that another caller's job is not found.
func TestSubscribeStreamsToTheFinalRecord(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	s := newService(t, js)
	release := make(chan struct{})
	startRunner(t, js, newRuntime(t, nc, func(rt *worker.Runtime) error {
		return rt.HandleFunc("wait", func(ctx context.Context, _ *worker.Request) (any, error) {
			worker.Progress(ctx, 50, "halfway")
			select {
			case <-release:
				return "done", nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
	}))
	id := submitFor(t, s, "alice", "wait")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, _, rpcErr := subscribe(ctx, s, "bob", id); !isErr(rpcErr, schema.ErrJobNotFound) {
		t.Fatalf("bob's subscribe to alice's job = %v, want job not found", rpcErr)
	}
	first, stream, rpcErr := subscribe(ctx, s, "alice", id)
	if rpcErr != nil {
		t.Fatal(rpcErr)
	}
	var rec schema.JobRecord
	if err := json.Unmarshal(first, &rec); err != nil || rec.ID != id || rec.State.Final() {
		t.Fatalf("subscribe = %s, want job %s not final yet", first, id)
	}
	var last schema.JobRecord
	var once sync.Once
	if rec.Progress != nil && rec.Progress.Message == "halfway" {
		// The progress was written before the subscription: the record
		// it starts with carries it, and no later notification will.
		once.Do(func() { close(release) })
	}
	stream(ctx, func(method string, params json.RawMessage) {
		if method != schema.MethodJobsProgress {
			t.Errorf("notification %s, want %s", method, schema.MethodJobsProgress)
		}
		if err := json.Unmarshal(params, &last); err != nil {
			t.Fatal(err)
		}
		if last.Progress != nil && last.Progress.Message == "halfway" {
			once.Do(func() { close(release) })
		}
	})
	if last.State != schema.JobSucceeded || string(last.Result) != `"done"` {
		t.Errorf("last notification = %s %s, want succeeded with \"done\"", last.State, last.Result)
	}
}

// TestSubscriptionsPerCaller checks the bounds of open subscriptions: a
// caller at its bound is refused -32002 naming caller_max_subscriptions
// while another caller subscribes, a subscription frees its place when its
// stream ends or, never run, when its context does, and all callers
// together are bounded by max_subscriptions.
func TestSubscriptionsPerCaller(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js, jobs.WithMaxSubscriptions(5, 2))
	ids := map[string]string{}
	for _, caller := range []string{"alice", "bob", "carol", ""} {
		ids[caller] = submitFor(t, s, caller, "queued.forever")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := func(caller string) (func(), *schema.Error) {
		sctx, scancel := context.WithCancel(ctx)
		_, stream, e := subscribe(sctx, s, caller, ids[caller])
		if e != nil {
			scancel()
			return nil, e
		}
		done := make(chan struct{})
		go func() { defer close(done); stream(sctx, func(string, json.RawMessage) {}) }()
		return func() { scancel(); <-done }, nil
	}
	refused := func(caller, limit string, max int) {
		t.Helper()
		_, e := open(caller)
		var d struct {
			Limit        string `json:"limit"`
			Max          int    `json:"max"`
			Retryable    bool   `json:"retryable"`
			RetryAfterMS int    `json:"retry_after_ms"`
		}
		if e == nil || e.Code != schema.CodeOverloaded || json.Unmarshal(e.Data, &d) != nil ||
			d.Limit != limit || d.Max != max || !d.Retryable || d.RetryAfterMS <= 0 {
			t.Fatalf("subscribe of %q = %v, want -32002 naming %s (%d) with retry_after_ms", caller, e, limit, max)
		}
	}
	a1, e1 := open("alice")
	_, e2 := open("alice")
	if e1 != nil || e2 != nil {
		t.Fatalf("alice's first two subscriptions = %v, %v; want both", e1, e2)
	}
	refused("alice", "caller_max_subscriptions", 2)
	if _, e := open("bob"); e != nil {
		t.Fatalf("bob's subscription while alice is at her bound = %v", e)
	}
	a1()
	a3, rpcErr := open("alice")
	if rpcErr != nil {
		t.Fatalf("alice's subscription after one of hers ended = %v", rpcErr)
	}
	// A stream never run gives its place back when its context ends.
	a3()
	nctx, ncancel := context.WithCancel(ctx)
	if _, _, e := subscribe(nctx, s, "alice", ids["alice"]); e != nil {
		t.Fatal(e)
	}
	refused("alice", "caller_max_subscriptions", 2)
	ncancel()
	toolbustest.Eventually(t, func() bool {
		_, e := open("alice")
		if e != nil && !errors.Is(e, schema.ErrOverloaded) {
			t.Fatal(e)
		}
		return e == nil
	}, "alice's place comes back once the context of her stream never run ends")
	// alice 2, bob 1: two more in all, then the total is reached.
	if _, e := open("carol"); e != nil {
		t.Fatal(e)
	}
	if _, e := open(""); e != nil {
		t.Fatal(e)
	}
	refused("carol", "max_subscriptions", 5)
	refused("", "max_subscriptions", 5)
}
