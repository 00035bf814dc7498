package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testwait"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

// localCall is a call of method with the id "local-1" from the caller
// alice, with the given raw params (none when empty).
func localCall(method, params string) *schema.Call {
	c := &schema.Call{Request: schema.Request{ID: json.RawMessage(`"local-1"`), Method: method}, Caller: "alice"}
	if params != "" {
		c.Params = json.RawMessage(params)
	}
	return c
}

// localAnswer is what one TryInvoke returned.
type localAnswer struct {
	result json.RawMessage
	err    *schema.Error
	ok     bool
}

// tryAsync runs TryInvoke on a goroutine of its own and delivers its
// answer on the channel returned.
func tryAsync(ctx context.Context, rt *worker.Runtime, call *schema.Call) <-chan localAnswer {
	ch := make(chan localAnswer, 1)
	go func() {
		res, err, ok := rt.TryInvoke(ctx, call)
		ch <- localAnswer{res, err, ok}
	}()
	return ch
}

// await returns the answer on ch. It fails the test when none comes within
// [testwait.Limit], a bound on a hang and not a timing goal.
func await(t *testing.T, ch <-chan localAnswer, what string) localAnswer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(testwait.Limit):
		t.Fatalf("gave up waiting for %s (%v)", what, testwait.Limit)
		return localAnswer{}
	}
}

// stubborn is a handler that holds a call whose params are "hold" until
// release is closed, without listening to its context, and answers any
// other call at once. Concurrency 1 makes one held call fill the method.
type stubborn struct {
	runs     atomic.Int64
	finished atomic.Int64  // held calls whose handler is returning
	started  chan struct{} // one value per held call, once it runs
	release  chan struct{}
	returned chan struct{} // one value per held call, as it returns
}

func newStubborn() *stubborn {
	return &stubborn{started: make(chan struct{}, 16), release: make(chan struct{}), returned: make(chan struct{}, 16)}
}

func (s *stubborn) ServeCall(_ context.Context, req *worker.Request) (any, error) {
	s.runs.Add(1)
	if string(req.Params) != `"hold"` {
		return "quick", nil
	}
	s.started <- struct{}{}
	<-s.release
	s.finished.Add(1)
	s.returned <- struct{}{}
	return "released", nil
}

// holds waits until s holds the call whose answer comes on answer, and
// fails the test when the answer comes first or nothing does within
// [testwait.Limit].
func (s *stubborn) holds(t *testing.T, answer <-chan localAnswer) {
	t.Helper()
	select {
	case <-s.started:
	case a := <-answer:
		t.Fatalf("TryInvoke = %s, %v, %v before the handler held the call", a.result, a.err, a.ok)
	case <-time.After(testwait.Limit):
		t.Fatalf("gave up waiting for the handler to hold the call (%v)", testwait.Limit)
	}
}

// slotFreed waits until a quick call of method is taken, which it is only
// once the held call has given its slot back.
func slotFreed(t *testing.T, rt *worker.Runtime, method string) {
	t.Helper()
	testwait.Eventually(t, func() bool {
		_, _, ok := rt.TryInvoke(context.Background(), localCall(method, ""))
		return ok
	}, "TryInvoke takes a call of "+method+" again")
}

// TestTryInvokeDeclines checks that TryInvoke leaves a call it cannot take
// to the bus: ok is false, there is no answer, and no handler ran.
func TestTryInvokeDeclines(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	s := newStubborn()
	if err := c.rt.Handle("tool", s); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, method string) {
		t.Helper()
		before := s.runs.Load()
		res, rpcErr, ok := c.rt.TryInvoke(context.Background(), localCall(method, ""))
		if ok || res != nil || rpcErr != nil {
			t.Errorf("TryInvoke(%s) = %s, %v, %v; want nothing, ok false", method, res, rpcErr, ok)
		}
		if got := s.runs.Load() - before; got != 0 {
			t.Errorf("handler ran %d times, want none", got)
		}
	}
	t.Run("not started", func(t *testing.T) { check(t, "tool") })
	c.start(t)
	t.Run("unknown method", func(t *testing.T) { check(t, "nobody") })
	t.Run("started", func(t *testing.T) {
		res, rpcErr, ok := c.rt.TryInvoke(context.Background(), localCall("tool", ""))
		if !ok || rpcErr != nil || string(res) != `"quick"` {
			t.Errorf("TryInvoke(tool) = %s, %v, %v; want \"quick\", ok true", res, rpcErr, ok)
		}
	})
}

var _ aggregator.Local = (*worker.Deferred)(nil)

// TestDeferred checks that a Deferred declines calls until it is given a
// runtime, and then runs them there.
func TestDeferred(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	s := newStubborn()
	if err := c.rt.Handle("tool", s); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	var d worker.Deferred
	if res, rpcErr, ok := d.TryInvoke(context.Background(), localCall("tool", "")); ok || res != nil || rpcErr != nil || s.runs.Load() != 0 {
		t.Errorf("TryInvoke before Set = %s, %v, %v (%d runs); want nothing, ok false, no run", res, rpcErr, ok, s.runs.Load())
	}
	d.Set(c.rt)
	if res, rpcErr, ok := d.TryInvoke(context.Background(), localCall("tool", "")); !ok || rpcErr != nil || string(res) != `"quick"` {
		t.Errorf("TryInvoke after Set = %s, %v, %v; want \"quick\", ok true", res, rpcErr, ok)
	}
}

// TestTryInvokeAnswersAsInvoke checks that a call taken by TryInvoke gets
// the answer Invoke gives the same call: the same results, the same error
// mapping, panic recovery and result limit.
func TestTryInvokeAnswersAsInvoke(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newCluster(t, bus.EmbeddedConfig{}, worker.WithMaxResultBytes(64), worker.WithMetrics(reg))
	handlers := map[string]worker.HandlerFunc{
		"echo": func(_ context.Context, req *worker.Request) (any, error) { return req.Params, nil },
		"none": func(context.Context, *worker.Request) (any, error) { return nil, nil },
		"fail": func(context.Context, *worker.Request) (any, error) { return nil, errors.New("boom") },
		"coded": func(context.Context, *worker.Request) (any, error) {
			return nil, schema.NewError(2001, "no funds", map[string]any{"balance": 3})
		},
		"panic":    func(context.Context, *worker.Request) (any, error) { panic("bad") },
		"big":      func(context.Context, *worker.Request) (any, error) { return string(make([]byte, 100)), nil },
		"canceled": func(context.Context, *worker.Request) (any, error) { return nil, context.Canceled },
		"math.*":   func(_ context.Context, req *worker.Request) (any, error) { return req.Method, nil },
	}
	for p, h := range handlers {
		if err := c.rt.Handle(p, h); err != nil {
			t.Fatal(err)
		}
	}
	c.start(t)
	for _, tc := range []struct {
		name, method, params string
		// code is the error code both answer, 0 for a result.
		code int
	}{
		{name: "result", method: "echo", params: `{"a":1}`},
		{name: "null result", method: "none"},
		{name: "tool error", method: "fail", code: schema.CodeToolError},
		{name: "own code and data", method: "coded", code: 2001},
		{name: "panic", method: "panic", code: schema.CodeInternal},
		{name: "result limit", method: "big", code: schema.CodeLimitExceeded},
		{name: "handler canceled", method: "canceled", code: schema.CodeCanceled},
		{name: "pattern", method: "math.add"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call := localCall(tc.method, tc.params)
			wantRes, wantErr := c.rt.Invoke(context.Background(), *call, nil)
			okBefore := value(t, reg, "toolbus_worker_calls_total", calls(tc.method, "ok"))
			res, rpcErr, ok := c.rt.TryInvoke(context.Background(), call)
			if !ok {
				t.Fatalf("TryInvoke(%s) declined, want it taken", tc.method)
			}
			if string(res) != string(wantRes) {
				t.Errorf("TryInvoke(%s) result = %s, want %s (Invoke's)", tc.method, res, wantRes)
			}
			switch {
			case wantErr == nil && rpcErr != nil:
				t.Errorf("TryInvoke(%s) error = %v, want none (Invoke's)", tc.method, rpcErr)
			case wantErr != nil && rpcErr == nil:
				t.Errorf("TryInvoke(%s) error = none, want %v (Invoke's)", tc.method, wantErr)
			case wantErr != nil && (rpcErr.Code != wantErr.Code || rpcErr.Message != wantErr.Message || string(rpcErr.Data) != string(wantErr.Data)):
				t.Errorf("TryInvoke(%s) error = %d %q %s, want %d %q %s (Invoke's)", tc.method,
					rpcErr.Code, rpcErr.Message, rpcErr.Data, wantErr.Code, wantErr.Message, wantErr.Data)
			}
			if got := code(rpcErr); got != tc.code {
				t.Errorf("TryInvoke(%s) code = %d, want %d", tc.method, got, tc.code)
			}
			if tc.code == 0 && tc.method == "echo" {
				if got := value(t, reg, "toolbus_worker_calls_total", calls(tc.method, "ok")) - okBefore; got != 1 {
					t.Errorf("calls_total{%s,ok} rose by %v for one local call, want 1", tc.method, got)
				}
			}
		})
	}
}

// TestLocalAnswersAreJSON checks that what a tool returns that is not JSON
// never reaches the caller of a call run in the process, where no
// aggregator checks the answer after the runtime: a raw result is refused
// with -32603, even when the handler put it in place of the params, and
// error data is replaced by data that says so, the code and message kept,
// as over the bus.
func TestLocalAnswersAreJSON(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	handlers := map[string]worker.HandlerFunc{
		"raw": func(context.Context, *worker.Request) (any, error) { return json.RawMessage(`{"a":`), nil },
		"replaced": func(_ context.Context, req *worker.Request) (any, error) {
			req.Params = json.RawMessage(`{"a":`)
			return req.Params, nil
		},
		"data": func(context.Context, *worker.Request) (any, error) {
			return nil, fmt.Errorf("charge: %w", &schema.Error{Code: 2002, Message: "bad", Data: json.RawMessage(`{"a":`)})
		},
	}
	for p, h := range handlers {
		if err := c.rt.Handle(p, h); err != nil {
			t.Fatal(err)
		}
	}
	c.start(t)
	badData := &schema.Error{Code: 2002, Message: "bad", Data: json.RawMessage(`{"data_error":"the tool's error data is not valid JSON"}`)}
	for _, tc := range []struct {
		name, method string
		want         *schema.Error // compared by code, and by message and data when it has data
	}{
		{name: "raw result", method: "raw", want: schema.ErrInternal},
		{name: "params the handler replaced", method: "replaced", want: schema.ErrInternal},
		{name: "error data", method: "data", want: badData},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call := localCall(tc.method, "")
			res, tryErr, ok := c.rt.TryInvoke(context.Background(), call)
			if !ok {
				t.Fatalf("TryInvoke(%s) declined, want it taken", tc.method)
			}
			_, invokeErr := c.rt.Invoke(context.Background(), *call, nil)
			for name, got := range map[string]*schema.Error{"TryInvoke": tryErr, "Invoke": invokeErr} {
				switch {
				case got == nil:
					t.Errorf("%s(%s) = result %s, want error %d", name, tc.method, res, tc.want.Code)
				case got.Code != tc.want.Code:
					t.Errorf("%s(%s) error = %d %q, want code %d", name, tc.method, got.Code, got.Message, tc.want.Code)
				case len(got.Data) > 0 && !json.Valid(got.Data):
					t.Errorf("%s(%s) error data = %s, want JSON", name, tc.method, got.Data)
				case tc.want.Data != nil && (got.Message != tc.want.Message || string(got.Data) != string(tc.want.Data)):
					t.Errorf("%s(%s) error = %q %s, want %q %s", name, tc.method, got.Message, got.Data, tc.want.Message, tc.want.Data)
				}
			}
		})
	}
}

// code is e's code, 0 for no error.
func code(e *schema.Error) int {
	if e == nil {
		return 0
	}
	return e.Code
}

// TestTryInvokeFullSlots checks that TryInvoke never waits for a slot: with
// the method's only slot taken it declines at once, and the call holding
// the slot keeps it until its handler returns.
func TestTryInvokeFullSlots(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newCluster(t, bus.EmbeddedConfig{}, worker.WithMetrics(reg))
	s := newStubborn()
	if err := c.rt.Handle("one", s, worker.Concurrency(1)); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	held := tryAsync(context.Background(), c.rt, localCall("one", `"hold"`))
	s.holds(t, held)
	if got := value(t, reg, "toolbus_worker_in_flight", only("one")); got != 1 {
		t.Errorf("in_flight{one} while a local call runs = %v, want 1", got)
	}
	runs := s.runs.Load()
	for i := range 3 {
		res, rpcErr, ok := c.rt.TryInvoke(context.Background(), localCall("one", ""))
		if ok || res != nil || rpcErr != nil {
			t.Fatalf("TryInvoke #%d with the slot taken = %s, %v, %v; want nothing, ok false", i, res, rpcErr, ok)
		}
	}
	if got := s.runs.Load() - runs; got != 0 {
		t.Errorf("handler ran %d times while the slot was taken, want none", got)
	}
	close(s.release)
	a := await(t, held, "the held call's answer")
	if !a.ok || a.err != nil || string(a.result) != `"released"` {
		t.Errorf("held call = %s, %v, %v; want \"released\", ok true", a.result, a.err, a.ok)
	}
	slotFreed(t, c.rt, "one")
}

// TestTryInvokeReturnsWhenContextEnds checks that TryInvoke answers when
// its context ends even though the handler does not listen to it, and that
// the handler keeps its slot until it returns.
func TestTryInvokeReturnsWhenContextEnds(t *testing.T) {
	tests := []struct {
		name string
		// ctx returns the call's context and a function that makes it end
		// once the handler runs; nil when it ends by itself.
		ctx    func() (context.Context, context.CancelFunc, func())
		code   int
		reason string
	}{
		{
			name: "deadline",
			ctx: func() (context.Context, context.CancelFunc, func()) {
				// The deadline is the event under test; the answer is the
				// same whether it passes before or after the handler
				// starts, since the handler returns only when released.
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				return ctx, cancel, nil
			},
			code:   schema.CodeTimeout,
			reason: schema.ReasonDeadlineInWorker,
		},
		{
			name: "canceled",
			ctx: func() (context.Context, context.CancelFunc, func()) {
				ctx, cancel := context.WithCancel(context.Background())
				return ctx, cancel, cancel
			},
			code: schema.CodeCanceled,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, bus.EmbeddedConfig{})
			s := newStubborn()
			if err := c.rt.Handle("one", s, worker.Concurrency(1)); err != nil {
				t.Fatal(err)
			}
			c.start(t)
			ctx, cancel, end := tc.ctx()
			defer cancel()
			answer := tryAsync(ctx, c.rt, localCall("one", `"hold"`))
			if end != nil {
				s.holds(t, answer)
				end()
			}
			a := await(t, answer, "TryInvoke to return after its context ended")
			if end == nil {
				// The deadline may pass before the handler starts; it
				// starts all the same, as its call has the slot.
				select {
				case <-s.started:
				case <-time.After(testwait.Limit):
					t.Fatalf("gave up waiting for the handler to start (%v)", testwait.Limit)
				}
			}
			if !a.ok || a.result != nil || code(a.err) != tc.code {
				t.Fatalf("TryInvoke = %s, %v, %v; want error %d, ok true", a.result, a.err, a.ok, tc.code)
			}
			if got := reason(t, a.err); got != tc.reason {
				t.Errorf("reason = %q, want %q", got, tc.reason)
			}
			select {
			case <-s.returned:
				t.Fatal("the handler returned before it was released")
			default:
			}
			if _, _, ok := c.rt.TryInvoke(context.Background(), localCall("one", "")); ok {
				t.Errorf("TryInvoke took a call while the abandoned handler still runs; want its slot taken")
			}
			close(s.release)
			<-s.returned
			slotFreed(t, c.rt, "one")
		})
	}
}

// reason is the reason member of e's data, "" when it has none.
func reason(t *testing.T, e *schema.Error) string {
	t.Helper()
	if e == nil || len(e.Data) == 0 {
		return ""
	}
	r, _ := dataMember(t, e, "reason").(string)
	return r
}

// TestShutdownWaitsForLocalCalls checks that a call taken by TryInvoke
// counts as in flight: Shutdown returns only once its handler has
// returned, and afterwards TryInvoke declines.
func TestShutdownWaitsForLocalCalls(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	s := newStubborn()
	if err := c.rt.Handle("one", s); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	held := tryAsync(context.Background(), c.rt, localCall("one", `"hold"`))
	s.holds(t, held)

	// Shutdown's goroutine reads whether the handler has finished as
	// Shutdown returns, so that a Shutdown that did not wait is caught
	// whenever it returns.
	type shutdownResult struct {
		err      error
		finished int64
	}
	shut := make(chan shutdownResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testwait.Limit)
		defer cancel()
		err := c.rt.Shutdown(ctx)
		shut <- shutdownResult{err, s.finished.Load()}
	}()
	testwait.Eventually(t, func() bool {
		err := c.rt.Ready()
		return errors.Is(err, worker.ErrDraining) || errors.Is(err, worker.ErrClosed)
	}, "Shutdown closes the runtime to new calls")
	select {
	case r := <-shut:
		t.Fatalf("Shutdown returned %v while a local call was running", r.err)
	default:
	}
	close(s.release)
	r := <-shut
	if r.err != nil {
		t.Fatalf("Shutdown = %v, want nil", r.err)
	}
	if r.finished != 1 {
		t.Errorf("Shutdown returned before the local call's handler did")
	}
	if a := await(t, held, "the local call's answer"); !a.ok || a.err != nil || string(a.result) != `"released"` {
		t.Errorf("local call during Shutdown = %s, %v, %v; want \"released\", ok true", a.result, a.err, a.ok)
	}
	runs := s.runs.Load()
	if res, rpcErr, ok := c.rt.TryInvoke(context.Background(), localCall("one", "")); ok || res != nil || rpcErr != nil {
		t.Errorf("TryInvoke after Shutdown = %s, %v, %v; want nothing, ok false", res, rpcErr, ok)
	}
	if got := s.runs.Load() - runs; got != 0 {
		t.Errorf("handler ran %d times after Shutdown, want none", got)
	}
}

// TestTryInvokeProgress checks that what a handler reports with
// [worker.Progress] reaches call.Progress, clamped and cut as for Invoke,
// on TryInvoke's goroutine. A report replaces one not yet handed on, so the
// handler waits for each to arrive before the next; the last, sent just
// before the handler returns, still arrives before the answer.
func TestTryInvokeProgress(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	seen := make(chan struct{}, 1)
	if err := c.rt.HandleFunc("build", func(ctx context.Context, _ *worker.Request) (any, error) {
		worker.Progress(ctx, -5, "start")
		<-seen
		worker.Progress(ctx, 42.5, "half")
		<-seen
		worker.Progress(ctx, 150, string(make([]byte, 2000)))
		return "built", nil
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	type report struct {
		percent float64
		n       int
	}
	var got []report
	call := localCall("build", "")
	call.Progress = func(p float64, m string) {
		got = append(got, report{p, len(m)})
		seen <- struct{}{}
	}
	res, rpcErr, ok := c.rt.TryInvoke(context.Background(), call)
	if !ok || rpcErr != nil || string(res) != `"built"` {
		t.Fatalf("TryInvoke(build) = %s, %v, %v; want \"built\", ok true", res, rpcErr, ok)
	}
	want := []report{{0, 5}, {42.5, 4}, {100, worker.MaxProgressMessageBytes}}
	if !slices.Equal(got, want) {
		t.Errorf("progress reports = %v, want %v", got, want)
	}
}

// TestTryInvokeRequest checks what the handler of a local call sees: the
// call's id, concrete method, params and caller, the context's deadline,
// and no message headers, since no message carried the call.
func TestTryInvokeRequest(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	seen := make(chan worker.Request, 1)
	ctxDeadline := make(chan time.Time, 1)
	if err := c.rt.HandleFunc("math.*", func(ctx context.Context, req *worker.Request) (any, error) {
		seen <- *req
		d, _ := ctx.Deadline()
		ctxDeadline <- d
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	// A deadline far beyond the test: only its value matters.
	deadline := time.Now().Add(time.Hour)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	call := localCall("math.add", `[1,2]`)
	if _, rpcErr, ok := c.rt.TryInvoke(ctx, call); !ok || rpcErr != nil {
		t.Fatalf("TryInvoke(math.add) = %v, %v; want a result, ok true", rpcErr, ok)
	}
	req := <-seen
	if string(req.ID) != `"local-1"` || req.Method != "math.add" || string(req.Params) != `[1,2]` || req.Caller != "alice" {
		t.Errorf("handler saw id %s, method %q, params %s, caller %q; want \"local-1\", \"math.add\", [1,2], \"alice\"",
			req.ID, req.Method, req.Params, req.Caller)
	}
	if !req.Deadline.Equal(deadline) {
		t.Errorf("Request.Deadline = %v, want %v", req.Deadline, deadline)
	}
	if d := <-ctxDeadline; !d.Equal(deadline) {
		t.Errorf("handler's context deadline = %v, want %v", d, deadline)
	}
	if req.Header != nil {
		t.Errorf("Request.Header = %v, want nil", req.Header)
	}
}

// TestTryInvokeShutdownOutOfTime checks that a Shutdown that runs out of
// time cancels the context of a local call's handler, as it does for a
// call from the bus, and that TryInvoke then answers -32003.
func TestTryInvokeShutdownOutOfTime(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	started := make(chan struct{})
	if err := c.rt.HandleFunc("wait", func(ctx context.Context, _ *worker.Request) (any, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	answer := tryAsync(context.Background(), c.rt, localCall("wait", ""))
	<-started
	out, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.rt.Shutdown(out); err == nil {
		t.Fatal("Shutdown with an ended context returned no error while a call ran")
	}
	a := await(t, answer, "the local call's answer after the shutdown")
	if !a.ok || code(a.err) != schema.CodeUnavailable {
		t.Fatalf("local call at a shutdown out of time = %s, %v, %v; want -32003", a.result, a.err, a.ok)
	}
}

// TestTryInvokeEndedContext checks that a call whose context has already
// ended is answered so without running its handler.
func TestTryInvokeEndedContext(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	var runs atomic.Int64
	if err := c.rt.HandleFunc("count", func(context.Context, *worker.Request) (any, error) {
		runs.Add(1)
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, rpcErr, ok := c.rt.TryInvoke(ctx, localCall("count", ""))
	if !ok || res != nil || code(rpcErr) != schema.CodeCanceled {
		t.Fatalf("TryInvoke with an ended context = %s, %v, %v; want -32004, ok true", res, rpcErr, ok)
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("the handler ran %d times, want none", n)
	}
}

// TestTryInvokeNoProgressAfterAnswer checks that a report the handler
// makes after TryInvoke returned (its context ended first) never reaches
// call.Progress.
func TestTryInvokeNoProgressAfterAnswer(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	started, report, reported := make(chan struct{}), make(chan struct{}), make(chan struct{})
	if err := c.rt.HandleFunc("late", func(ctx context.Context, _ *worker.Request) (any, error) {
		close(started)
		<-report
		worker.Progress(ctx, 50, "too late")
		close(reported)
		return "done", nil
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	var calls atomic.Int64
	call := localCall("late", "")
	call.Progress = func(float64, string) { calls.Add(1) }
	ctx, cancel := context.WithCancel(context.Background())
	answer := tryAsync(ctx, c.rt, call)
	<-started
	cancel()
	if a := await(t, answer, "the canceled call's answer"); code(a.err) != schema.CodeCanceled {
		t.Fatalf("canceled local call = %s, %v; want -32004", a.result, a.err)
	}
	close(report)
	<-reported
	if n := calls.Load(); n != 0 {
		t.Fatalf("call.Progress was called %d times after the answer, want none", n)
	}
}
