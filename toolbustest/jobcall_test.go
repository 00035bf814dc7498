package toolbustest_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

// Jobs reach workers as ordinary calls over the bus, sent by the job
// runner of an ingress.

// jobCall sends one rpc.jobs.* call to the cluster's ingress and returns
// its result, failing the test on an error.
func jobCall(t *testing.T, c *toolbustest.Cluster, method, params string) json.RawMessage {
	t.Helper()
	r := c.Call(t, method, params)
	if r.Error != nil {
		t.Fatalf("%s %s = %v", method, params, r.Error)
	}
	return r.Result
}

func submitJob(t *testing.T, c *toolbustest.Cluster, method, params string) string {
	t.Helper()
	var sub schema.JobSubmitResult
	if err := json.Unmarshal(jobCall(t, c, schema.MethodJobsSubmit, `{"method":"`+method+`","params":`+params+`}`), &sub); err != nil {
		t.Fatal(err)
	}
	return sub.ID
}

func jobRecord(t *testing.T, c *toolbustest.Cluster, id string) schema.JobRecord {
	t.Helper()
	var rec schema.JobRecord
	if err := json.Unmarshal(jobCall(t, c, schema.MethodJobsGet, `{"id":"`+id+`"}`), &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// waitJob polls job id until ok holds for its record, and returns it.
func waitJob(t *testing.T, c *toolbustest.Cluster, id, what string, ok func(schema.JobRecord) bool) schema.JobRecord {
	t.Helper()
	var rec schema.JobRecord
	toolbustest.Eventually(t, func() bool { rec = jobRecord(t, c, id); return ok(rec) }, "job "+id+": "+what)
	return rec
}

// TestJobWaitsForAWorker submits a job of a method no worker serves: it
// stays queued, not counted as an attempt, its record saying that it
// waits for a worker, and it runs once a worker of the method joins.
func TestJobWaitsForAWorker(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithJobs(), toolbustest.WithGateway(func(c *node.GatewayConfig) {
		c.Jobs.WaitBackoff, c.Jobs.MaxWaitBackoff = 10*time.Millisecond, 50*time.Millisecond
	}))
	id := submitJob(t, c, "later.echo", `{"n":1}`)
	rec := waitJob(t, c, id, "waits for a worker", func(r schema.JobRecord) bool { return r.Waiting != "" })
	if rec.State != schema.JobQueued || rec.Waiting != schema.ReasonNoWorkers || rec.Attempts != 0 || rec.StartedAt != nil {
		t.Fatalf("job without a worker = %s waiting %q attempts %d started %v, want queued, waiting %q, no attempt",
			rec.State, rec.Waiting, rec.Attempts, rec.StartedAt, schema.ReasonNoWorkers)
	}
	c.AddWorker(t, func(rt *worker.Runtime) error {
		return rt.HandleFunc("later.echo", func(_ context.Context, req *worker.Request) (any, error) { return req.Params, nil })
	})
	rec = waitJob(t, c, id, "ends", func(r schema.JobRecord) bool { return r.State.Final() })
	if rec.State != schema.JobSucceeded || string(rec.Result) != `{"n":1}` || rec.Attempts != 1 || rec.Waiting != "" {
		t.Fatalf("job once a worker joined = %s %s attempts %d waiting %q, want succeeded {\"n\":1} on the first attempt",
			rec.State, rec.Result, rec.Attempts, rec.Waiting)
	}
}

// TestJobProgressAndCancelOverTheBus runs a job whose tool reports its
// progress with worker.Progress, then cancels it: the progress reaches
// the record, and the cancel reaches the handler as a canceled context.
func TestJobProgressAndCancelOverTheBus(t *testing.T) {
	canceled := make(chan error, 1)
	c := toolbustest.Start(t, toolbustest.WithJobs(), toolbustest.WithTools(func(rt *worker.Runtime) error {
		return rt.HandleFunc("steps", func(ctx context.Context, _ *worker.Request) (any, error) {
			worker.Progress(ctx, 50, "half way")
			<-ctx.Done()
			canceled <- context.Cause(ctx)
			return nil, ctx.Err()
		})
	}))
	id := submitJob(t, c, "steps", `{}`)
	rec := waitJob(t, c, id, "reports progress", func(r schema.JobRecord) bool { return r.Progress != nil })
	if rec.State != schema.JobRunning || *rec.Progress != (schema.JobProgress{Percent: 50, Message: "half way"}) {
		t.Fatalf("running job = %s progress %+v, want running at 50 half way", rec.State, rec.Progress)
	}
	jobCall(t, c, schema.MethodJobsCancel, `{"id":"`+id+`"}`)
	if err := <-canceled; err == nil {
		t.Error("the handler's context ended without a cause")
	}
	if rec := jobRecord(t, c, id); rec.State != schema.JobCanceled {
		t.Fatalf("canceled job = %s, want canceled", rec.State)
	}
}

// TestJobOfALostWorker kills the worker running a job: a job of a
// retry-safe tool runs again on another worker, any other fails as
// interrupted.
func TestJobOfALostWorker(t *testing.T) {
	for _, tc := range []struct {
		name, method string
		want         schema.JobState
		reason       string
	}{
		{name: "retry-safe runs again", method: "idem.work", want: schema.JobSucceeded},
		{name: "not retry-safe fails", method: "once.work", want: schema.JobFailed, reason: schema.ReasonInterruptedNotRetryable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The aggregator publishes a call once, so that the runner is
			// the one to run the job again.
			c := toolbustest.Start(t, toolbustest.WithoutWorker(), toolbustest.WithJobs(),
				toolbustest.WithGateway(func(c *node.GatewayConfig) {
					c.Heartbeat, c.HeartbeatMisses = 50*time.Millisecond, 3
					c.RetrySafe = []string{"idem.*"}
					c.MaxAttempts = 1
				}))
			started := make(chan struct{}, 1)
			release := make(chan struct{})
			first := c.AddWorker(t, func(rt *worker.Runtime) error {
				return rt.HandleFunc(tc.method, func(ctx context.Context, _ *worker.Request) (any, error) {
					started <- struct{}{}
					select {
					case <-release:
					case <-ctx.Done():
					}
					return "first", nil
				})
			})
			t.Cleanup(func() { close(release) })
			id := submitJob(t, c, tc.method, `{}`)
			<-started
			c.AddWorker(t, func(rt *worker.Runtime) error {
				return rt.HandleFunc(tc.method, func(context.Context, *worker.Request) (any, error) { return "second", nil })
			})
			first.Kill()
			rec := waitJob(t, c, id, "ends", func(r schema.JobRecord) bool { return r.State.Final() })
			if rec.State != tc.want {
				t.Fatalf("job of a lost worker = %s %s %v, want %s", rec.State, rec.Result, rec.Error, tc.want)
			}
			switch tc.want {
			case schema.JobSucceeded:
				if string(rec.Result) != `"second"` || rec.Attempts != 2 {
					t.Errorf("job run again = %s attempts %d, want \"second\" on attempt 2", rec.Result, rec.Attempts)
				}
			case schema.JobFailed:
				if got := rec.Error.Reason(); got != tc.reason {
					t.Errorf("failed job reason = %q (%v), want %q", got, rec.Error, tc.reason)
				}
			}
		})
	}
}

// TestJobReachesTheWorkerAsACall checks that a worker gets a job as a
// plain call: its JSON-RPC id is the job's id.
func TestJobReachesTheWorkerAsACall(t *testing.T) {
	ids := make(chan string, 1)
	c := toolbustest.Start(t, toolbustest.WithJobs(), toolbustest.WithTools(func(rt *worker.Runtime) error {
		return rt.HandleFunc("who", func(_ context.Context, req *worker.Request) (any, error) {
			ids <- string(req.ID)
			return http.StatusOK, nil
		})
	}))
	id := submitJob(t, c, "who", `{}`)
	if got := <-ids; got != `"`+id+`"` {
		t.Errorf("the call's id = %s, want the job's id %q", got, id)
	}
	if rec := waitJob(t, c, id, "ends", func(r schema.JobRecord) bool { return r.State.Final() }); rec.State != schema.JobSucceeded {
		t.Errorf("job = %s %v, want succeeded", rec.State, rec.Error)
	}
}
