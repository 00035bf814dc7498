package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
)

// answer is a dispatcher that answers every call with its response, and
// keeps the calls it got.
type answer struct {
	resp  schema.Response
	none  bool
	mu    sync.Mutex
	calls []schema.Call
}

func (a *answer) Dispatch(_ context.Context, calls []schema.Call, emit func(int, schema.Response)) {
	a.mu.Lock()
	a.calls = append(a.calls, calls...)
	a.mu.Unlock()
	if !a.none {
		emit(0, a.resp)
	}
}

func TestBusInvokerOutcomes(t *testing.T) {
	toolErr := schema.NewError(2001, "insufficient funds", nil)
	reasoned := func(code int, reason string) *schema.Error {
		return schema.NewError(code, "x", map[string]any{"reason": reason})
	}
	tests := []struct {
		name      string
		resp      schema.Response
		none      bool
		result    string
		wait      string // the WaitError's reason
		interrupt bool
		code      int // the *schema.Error's code
	}{
		{name: "result", resp: schema.Response{Result: json.RawMessage(`{"ok":1}`)}, result: `{"ok":1}`},
		{name: "tool error fails", resp: schema.Response{Error: toolErr}, code: 2001},
		{name: "tool error with a reason of ours fails", resp: schema.Response{Error: reasoned(2001, schema.ReasonWorkerLost)}, code: 2001},
		{name: "no responders waits", resp: schema.Response{Error: reasoned(schema.CodeMethodNotFound, schema.ReasonNoResponders)}, wait: schema.ReasonNoWorkers},
		{name: "no workers waits", resp: schema.Response{Error: reasoned(schema.CodeUnavailable, schema.ReasonNoWorkers)}, wait: schema.ReasonNoWorkers},
		{name: "busy waits", resp: schema.Response{Error: reasoned(schema.CodeOverloaded, schema.ReasonWorkersBusy)}, wait: schema.ReasonWorkersBusy},
		{name: "disconnected waits", resp: schema.Response{Error: reasoned(schema.CodeUnavailable, schema.ReasonBusDisconnected)}, wait: schema.ReasonBusDisconnected},
		{name: "open circuit waits", resp: schema.Response{Error: reasoned(schema.CodeUnavailable, schema.ReasonCircuitOpen)}, wait: schema.ReasonCircuitOpen},
		{name: "in-flight limit waits", resp: schema.Response{Error: schema.NewError(schema.CodeOverloaded, "x", map[string]any{"limit": "max_in_flight"})}, wait: schema.WaitingOverloaded},
		{name: "a tool's own overload fails", resp: schema.Response{Error: schema.NewError(schema.CodeOverloaded, "upstream busy", nil)}, code: schema.CodeOverloaded},
		{name: "worker lost interrupts", resp: schema.Response{Error: reasoned(schema.CodeUnavailable, schema.ReasonWorkerLost)}, interrupt: true},
		{name: "no worker left after a loss interrupts", resp: schema.Response{Error: reasoned(schema.CodeUnavailable, schema.ReasonNoResponders)}, interrupt: true},
		{name: "timeout fails", resp: schema.Response{Error: schema.NewError(schema.CodeTimeout, "timed out", nil)}, code: schema.CodeTimeout},
		{name: "empty result fails", resp: schema.Response{}, code: schema.CodeInternal},
		{name: "no answer fails", none: true, code: schema.CodeInternal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &answer{resp: tc.resp, none: tc.none}
			inv := jobs.NewBusInvoker(d, nil)
			res, err := inv.Invoke(context.Background(), schema.Call{Request: schema.Request{Method: "m"}}, nil)
			var wait *jobs.WaitError
			var interrupted *jobs.InterruptedError
			var rpcErr *schema.Error
			switch {
			case tc.result != "":
				if err != nil || string(res) != tc.result {
					t.Errorf("Invoke = %s, %v, want %s", res, err, tc.result)
				}
			case tc.wait != "":
				if !errors.As(err, &wait) || wait.Reason != tc.wait {
					t.Errorf("Invoke error = %v, want a WaitError for %s", err, tc.wait)
				}
			case tc.interrupt:
				if !errors.As(err, &interrupted) {
					t.Errorf("Invoke error = %v, want an InterruptedError", err)
				}
			default:
				if errors.As(err, &wait) || errors.As(err, &interrupted) || !errors.As(err, &rpcErr) || rpcErr.Code != tc.code {
					t.Errorf("Invoke error = %#v, want a *schema.Error with code %d", err, tc.code)
				}
			}
		})
	}
}

func TestBusInvokerCall(t *testing.T) {
	d := &answer{resp: schema.Response{Result: json.RawMessage(`1`)}}
	inv := jobs.NewBusInvoker(d, func(m string) bool { return m == "safe" })
	if got := inv.Methods(); len(got) != 1 || got[0] != ">" {
		t.Errorf("Methods() = %q, want [>]", got)
	}
	if !inv.RetrySafe("safe") || inv.RetrySafe("other") {
		t.Error("RetrySafe does not follow the function it was given")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	var reported atomic.Bool
	call := schema.Call{Request: schema.Request{ID: json.RawMessage(`"j1"`), Method: "m"}, Caller: "alice"}
	if _, err := inv.Invoke(ctx, call, func(float64, string) { reported.Store(true) }); err != nil {
		t.Fatal(err)
	}
	got := d.calls[0]
	if got.Caller != "alice" || string(got.ID) != `"j1"` || got.Timeout < 59*time.Minute || got.Timeout > time.Hour {
		t.Errorf("dispatched call = caller %q id %s timeout %v, want alice, \"j1\", about an hour", got.Caller, got.ID, got.Timeout)
	}
	if got.Progress == nil {
		t.Fatal("dispatched call has no Progress")
	}
	got.Progress(1, "")
	if !reported.Load() {
		t.Error("the call's Progress does not reach the job's progress function")
	}
}

// script is an invoker whose runs answer in turn what its steps say.
type script struct {
	mu    sync.Mutex
	steps []func() (json.RawMessage, error)
	runs  int
	safe  bool
}

func (s *script) Invoke(context.Context, schema.Call, func(float64, string)) (json.RawMessage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	step := s.steps[min(s.runs, len(s.steps)-1)]
	s.runs++
	return step()
}

func (s *script) Methods() []string            { return []string{">"} }
func (s *script) RetrySafe(method string) bool { return s.safe }

func TestRunnerOutcomesOfAnInvoker(t *testing.T) {
	noWorkers := func() (json.RawMessage, error) {
		return nil, &jobs.WaitError{Reason: schema.ReasonNoWorkers, Err: schema.NewError(schema.CodeMethodNotFound, "no worker", nil)}
	}
	lost := func() (json.RawMessage, error) {
		return nil, &jobs.InterruptedError{Err: schema.NewError(schema.CodeUnavailable, "lost", nil)}
	}
	ok := func() (json.RawMessage, error) { return json.RawMessage(`"ok"`), nil }
	tests := []struct {
		name     string
		steps    []func() (json.RawMessage, error)
		safe     bool
		state    schema.JobState
		attempts int
		reason   string
	}{
		{name: "waits without counting attempts", steps: []func() (json.RawMessage, error){noWorkers, noWorkers, noWorkers, ok},
			state: schema.JobSucceeded, attempts: 1},
		{name: "a lost retry-safe run runs again", steps: []func() (json.RawMessage, error){lost, ok}, safe: true,
			state: schema.JobSucceeded, attempts: 2},
		{name: "a lost run that is not retry-safe fails", steps: []func() (json.RawMessage, error){lost, ok},
			state: schema.JobFailed, attempts: 1, reason: schema.ReasonInterruptedNotRetryable},
		{name: "lost on every attempt", steps: []func() (json.RawMessage, error){lost}, safe: true,
			state: schema.JobFailed, attempts: jobs.DefaultMaxAttempts, reason: schema.ReasonAttemptsExhausted},
		{name: "any other error fails", steps: []func() (json.RawMessage, error){func() (json.RawMessage, error) { return nil, errors.New("boom") }},
			state: schema.JobFailed, attempts: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := startServer(t, "")
			_, js := connect(t, e)
			s := newService(t, js)
			inv := &script{steps: tc.steps, safe: tc.safe}
			startRunner(t, js, inv, jobs.WithWaitBackoff(time.Millisecond, 5*time.Millisecond))
			id := submit(t, s, "m", `{}`)
			rec := waitFor(t, s, id, "ends", func(r *schema.JobRecord) bool { return r.State.Final() })
			if rec.State != tc.state || rec.Attempts != tc.attempts || rec.Waiting != "" {
				t.Fatalf("job = %s attempts %d waiting %q (%v), want %s after %d attempts", rec.State, rec.Attempts, rec.Waiting, rec.Error, tc.state, tc.attempts)
			}
			if tc.reason != "" && rec.Error.Reason() != tc.reason {
				t.Errorf("job error = %v, want reason %s", rec.Error, tc.reason)
			}
		})
	}
}

// TestRunnerWaitingJobOutlivesMaxDeliver keeps a job waiting for a worker
// for more deliveries than the consumer allows one message: it is queued
// afresh rather than dropped, and runs once a worker is there.
func TestRunnerWaitingJobOutlivesMaxDeliver(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js)
	steps := []func() (json.RawMessage, error){}
	for range 3 * jobs.DefaultMaxDeliver {
		steps = append(steps, func() (json.RawMessage, error) {
			return nil, &jobs.WaitError{Reason: schema.ReasonNoWorkers, Err: schema.NewError(schema.CodeMethodNotFound, "no worker", nil)}
		})
	}
	steps = append(steps, func() (json.RawMessage, error) { return json.RawMessage(`1`), nil })
	inv := &script{steps: steps}
	startRunner(t, js, inv, jobs.WithWaitBackoff(time.Millisecond, 2*time.Millisecond))
	id := submit(t, s, "m", `{}`)
	rec := waitFor(t, s, id, "ends", func(r *schema.JobRecord) bool { return r.State.Final() })
	if rec.State != schema.JobSucceeded || rec.Attempts != 1 {
		t.Fatalf("job = %s attempts %d (%v), want succeeded on its first attempt", rec.State, rec.Attempts, rec.Error)
	}
	// The runner stores the final record before it acknowledges the job's
	// message: the message leaves the queue just after.
	toolbustest.Eventually(t, func() bool { return queuedMessages(t, js) == 0 }, "the job's message leaves the queue once the job succeeded")
}
