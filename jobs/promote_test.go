package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

func TestRunAsJob(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	s := newService(t, js)
	if s.Promotable(context.Background(), "slow") {
		t.Fatal("Promotable(slow) before any runner = true, want false")
	}
	release := make(chan struct{})
	startRunner(t, js, newRuntime(t, nc, func(rt *worker.Runtime) error {
		if err := echoTools(rt); err != nil {
			return err
		}
		return rt.HandleFunc("slow", func(ctx context.Context, req *worker.Request) (any, error) {
			select {
			case <-release:
				return "done", nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
	}))
	// The promotable list is cached for two seconds.
	toolbustest.Eventually(t, func() bool { return s.Promotable(context.Background(), "slow") }, "Promotable(slow) holds after the runner started")
	if s.Promotable(context.Background(), "nobody.serves") {
		t.Fatal("Promotable(nobody.serves) = true, want false")
	}

	call := func(method, params string) schema.Call {
		return schema.Call{Request: schema.Request{ID: json.RawMessage(`1`), Method: method, Params: json.RawMessage(params)}, Caller: "alice"}
	}
	result, rpcErr := s.RunAsJob(context.Background(), call("echo", `{"n":1}`), 10*time.Second)
	if rpcErr != nil || string(result) != `{"n":1}` {
		t.Fatalf("RunAsJob(echo) = %s, %v; want the result as a sync call", result, rpcErr)
	}

	_, rpcErr = s.RunAsJob(context.Background(), call("slow", `{}`), 300*time.Millisecond)
	if !errors.Is(rpcErr, schema.ErrTimeout) {
		t.Fatalf("RunAsJob(slow) = %v, want timeout", rpcErr)
	}
	var data struct {
		JobID string `json:"job_id"`
	}
	if err := json.Unmarshal(rpcErr.Data, &data); err != nil || data.JobID == "" {
		t.Fatalf("timeout data = %s, want job_id", rpcErr.Data)
	}
	close(release)
	// The job went on and belongs to the caller of the call.
	raw, e2 := rpc(t, s, "alice", schema.MethodJobsGet, `{"id":"`+data.JobID+`"}`)
	if e2 != nil {
		t.Fatalf("get promoted job: %v", e2)
	}
	var rec schema.JobRecord
	json.Unmarshal(raw, &rec)
	if rec.Method != "slow" {
		t.Fatalf("promoted job method = %q, want slow", rec.Method)
	}
	toolbustest.Eventually(t, func() bool {
		raw, _ = rpc(t, s, "alice", schema.MethodJobsGet, `{"id":"`+data.JobID+`"}`)
		json.Unmarshal(raw, &rec)
		return rec.State == schema.JobSucceeded
	}, "the promoted job succeeds")
	if string(rec.Result) != `"done"` {
		t.Fatalf("promoted job result = %s, want \"done\"", rec.Result)
	}
}

// TestPromotableAsksTheMethodCheck: a call of a method that would wait for
// a worker, or that the method check refuses, is not turned into a job;
// it is answered as a call.
func TestPromotableAsksTheMethodCheck(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	check := func(_ context.Context, method string, _ json.RawMessage) (string, *schema.Error) {
		switch method {
		case "echo":
			return "", nil
		case "slow":
			return schema.ReasonNoWorkers, nil
		}
		return "", schema.NewError(schema.CodeMethodNotFound, "unknown", map[string]any{"reason": schema.ReasonUnknownMethod})
	}
	s := newService(t, js, jobs.WithMethodCheck(check))
	startRunner(t, js, newRuntime(t, nc, func(rt *worker.Runtime) error {
		if err := echoTools(rt); err != nil {
			return err
		}
		return rt.HandleFunc("slow", func(context.Context, *worker.Request) (any, error) { return "done", nil })
	}))
	toolbustest.Eventually(t, func() bool { return s.Promotable(context.Background(), "echo") }, "Promotable(echo) holds after the runner started")
	for _, m := range []string{"slow", "gone"} {
		if s.Promotable(context.Background(), m) {
			t.Errorf("Promotable(%s) = true, want false: the method check says it would wait or is refused", m)
		}
	}
}

// TestRunnerNamesTheLegacyConsumer: a consumer left by a job runner of an
// earlier version, whose filter overlaps the new runner's, stops the runner
// with a sentence that says how to remove it.
func TestRunnerNamesTheLegacyConsumer(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	newService(t, js)
	if _, err := js.CreateOrUpdateConsumer(context.Background(), "TOOLBUS_JOBS", jetstream.ConsumerConfig{
		Durable: "run_echo_old", FilterSubject: "toolbus.jobs.run.echo", AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	r, err := jobs.NewRunner(js, newRuntime(t, nc, echoTools), jobs.WithRunnerLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	err = r.Start(context.Background())
	if err == nil {
		shutdownRunner(t, r)
		t.Fatal("Runner.Start beside an overlapping consumer = nil, want an error")
	}
	if !strings.Contains(err.Error(), "nats consumer rm TOOLBUS_JOBS") {
		t.Errorf("Runner.Start = %v, want the command that removes the old consumer", err)
	}
}
