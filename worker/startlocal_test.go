package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testwait"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

var (
	_ aggregator.LocalStarter = (*worker.Runtime)(nil)
	_ aggregator.LocalStarter = (*worker.Deferred)(nil)
)

// started is one call started with StartLocal: its answers, counted, and
// its stop.
type started struct {
	stop    func()
	ok      bool
	answers atomic.Int64
	answer  chan localAnswer
}

// start starts call on rt with deadline, its answers delivered on the
// started's channel (buffered for more than one, so that a second answer
// is seen rather than blocking the handler).
func start(rt interface {
	StartLocal(*schema.Call, time.Time, func(json.RawMessage, *schema.Error)) (func(), bool)
}, call *schema.Call, deadline time.Time) *started {
	s := &started{answer: make(chan localAnswer, 4)}
	s.stop, s.ok = rt.StartLocal(call, deadline, func(res json.RawMessage, e *schema.Error) {
		s.answers.Add(1)
		s.answer <- localAnswer{res, e, true}
	})
	return s
}

// far is a deadline beyond any test: only its value matters.
func far() time.Time { return time.Now().Add(time.Hour) }

// TestStartLocalAnswersAsInvoke checks that a call started with
// StartLocal gets, once, the answer Invoke gives the same call.
func TestStartLocalAnswersAsInvoke(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{}, worker.WithMaxResultBytes(64))
	handlers := map[string]worker.HandlerFunc{
		"echo":     func(_ context.Context, req *worker.Request) (any, error) { return req.Params, nil },
		"fail":     func(context.Context, *worker.Request) (any, error) { return nil, errors.New("boom") },
		"panic":    func(context.Context, *worker.Request) (any, error) { panic("bad") },
		"big":      func(context.Context, *worker.Request) (any, error) { return string(make([]byte, 100)), nil },
		"canceled": func(context.Context, *worker.Request) (any, error) { return nil, context.Canceled },
	}
	for p, h := range handlers {
		if err := c.rt.Handle(p, h); err != nil {
			t.Fatal(err)
		}
	}
	c.start(t)
	for _, method := range []string{"echo", "fail", "panic", "big", "canceled"} {
		t.Run(method, func(t *testing.T) {
			call := localCall(method, `{"a":1}`)
			wantRes, wantErr := c.rt.Invoke(context.Background(), *call, nil)
			s := start(c.rt, call, far())
			if !s.ok {
				t.Fatalf("StartLocal(%s) declined, want it started", method)
			}
			a := await(t, s.answer, "the answer of "+method)
			if string(a.result) != string(wantRes) || code(a.err) != code(wantErr) {
				t.Errorf("StartLocal(%s) answered %s, %v; Invoke answers %s, %v", method, a.result, a.err, wantRes, wantErr)
			}
			if wantErr != nil && a.err != nil && (a.err.Message != wantErr.Message || string(a.err.Data) != string(wantErr.Data)) {
				t.Errorf("StartLocal(%s) error = %q %s, want %q %s (Invoke's)", method, a.err.Message, a.err.Data, wantErr.Message, wantErr.Data)
			}
			// The slot is free once the answer came: a second call of a
			// concurrency-1 method would be declined otherwise. Then the
			// first call has had its one answer.
			slotFreed(t, c.rt, method)
			if n := s.answers.Load(); n != 1 {
				t.Errorf("StartLocal(%s) answered %d times, want once", method, n)
			}
		})
	}
}

// TestStartLocalDeclines checks that StartLocal leaves a call it cannot
// take at once to the bus: ok is false, no answer ever comes, and no
// handler ran; and that a Deferred declines until it has a runtime.
func TestStartLocalDeclines(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{}, worker.WithConcurrency(1))
	s := newStubborn()
	if err := c.rt.Handle("tool", s); err != nil {
		t.Fatal(err)
	}
	var d worker.Deferred
	check := func(t *testing.T, l interface {
		StartLocal(*schema.Call, time.Time, func(json.RawMessage, *schema.Error)) (func(), bool)
	}, method string) {
		t.Helper()
		before := s.runs.Load()
		st := start(l, localCall(method, ""), far())
		if st.ok || st.stop != nil {
			t.Errorf("StartLocal(%s) = ok %v, stop %v; want declined, no stop", method, st.ok, st.stop != nil)
		}
		if got := s.runs.Load() - before; got != 0 {
			t.Errorf("handler ran %d times, want none", got)
		}
		if n := st.answers.Load(); n != 0 {
			t.Errorf("a declined call was answered %d times", n)
		}
	}
	t.Run("not started", func(t *testing.T) { check(t, c.rt, "tool") })
	c.start(t)
	t.Run("unknown method", func(t *testing.T) { check(t, c.rt, "nobody") })
	t.Run("deferred without a runtime", func(t *testing.T) { check(t, &d, "tool") })
	held := start(c.rt, localCall("tool", `"hold"`), far())
	if !held.ok {
		t.Fatal("StartLocal(tool) declined the first call, want it started")
	}
	<-s.started
	t.Run("slot taken", func(t *testing.T) { check(t, c.rt, "tool") })
	close(s.release)
	if a := await(t, held.answer, "the held call's answer"); a.err != nil || string(a.result) != `"released"` {
		t.Errorf("held call answered %s, %v; want \"released\"", a.result, a.err)
	}
	d.Set(c.rt)
	st := start(&d, localCall("tool", ""), far())
	if !st.ok {
		t.Fatal("Deferred.StartLocal after Set declined")
	}
	if a := await(t, st.answer, "the deferred call's answer"); a.err != nil || string(a.result) != `"quick"` {
		t.Errorf("deferred call answered %s, %v; want \"quick\"", a.result, a.err)
	}
}

// TestStartLocalStop checks that stop ends the handler's context, that the
// handler's answer still comes once, and that stop may be called again,
// after the answer too.
func TestStartLocalStop(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	running := make(chan struct{})
	if err := c.rt.HandleFunc("wait", func(ctx context.Context, _ *worker.Request) (any, error) {
		close(running)
		<-ctx.Done()
		return nil, ctx.Err()
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	s := start(c.rt, localCall("wait", ""), far())
	if !s.ok {
		t.Fatal("StartLocal(wait) declined")
	}
	<-running
	s.stop()
	a := await(t, s.answer, "the stopped call's answer")
	if code(a.err) != schema.CodeCanceled {
		t.Errorf("stopped call answered %s, %v; want %d", a.result, a.err, schema.CodeCanceled)
	}
	s.stop()
	slotFreed(t, c.rt, "wait")
	if n := s.answers.Load(); n != 1 {
		t.Errorf("stopped call answered %d times, want once", n)
	}
}

// TestStartLocalRequest checks what the handler of a started call sees:
// the call's id, method, params and caller, the deadline in its Request
// and on its context, the trace of the call's traceparent as its span's
// parent, and an Ask that fails: nobody can answer a question there.
func TestStartLocalRequest(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	type seen struct {
		req      worker.Request
		deadline time.Time
		span     trace.SpanContext
		ask      error
	}
	got := make(chan seen, 1)
	if err := c.rt.HandleFunc("math.*", func(ctx context.Context, req *worker.Request) (any, error) {
		d, _ := ctx.Deadline()
		_, askErr := worker.Ask(ctx, worker.Question{})
		got <- seen{*req, d, trace.SpanContextFromContext(ctx), askErr}
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	deadline := far()
	call := localCall("math.add", `[1,2]`)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	call.TraceParent = "00-" + traceID + "-00f067aa0ba902b7-01"
	s := start(c.rt, call, deadline)
	if !s.ok {
		t.Fatal("StartLocal(math.add) declined")
	}
	await(t, s.answer, "the answer of math.add")
	h := <-got
	if string(h.req.ID) != `"local-1"` || h.req.Method != "math.add" || string(h.req.Params) != `[1,2]` || h.req.Caller != "alice" || h.req.Header != nil {
		t.Errorf("handler saw id %s, method %q, params %s, caller %q, header %v; want \"local-1\", \"math.add\", [1,2], \"alice\", none",
			h.req.ID, h.req.Method, h.req.Params, h.req.Caller, h.req.Header)
	}
	if !h.req.Deadline.Equal(deadline) || !h.deadline.Equal(deadline) {
		t.Errorf("Request.Deadline %v, context deadline %v; want both %v", h.req.Deadline, h.deadline, deadline)
	}
	if !errors.Is(h.ask, worker.ErrCannotAsk) {
		t.Errorf("Ask in a started call = %v, want %v", h.ask, worker.ErrCannotAsk)
	}
	if h.span.TraceID().String() != traceID {
		t.Errorf("handler's trace id = %s, want the traceparent's %s", h.span.TraceID(), traceID)
	}
}

// TestStartLocalShutdownOutOfTime checks that a Shutdown that runs out of
// time answers a started call -32003 at once, even when its handler does
// not listen to its context, and never a second time when the handler
// returns later.
func TestStartLocalShutdownOutOfTime(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	s := newStubborn()
	if err := c.rt.Handle("tool", s); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	held := start(c.rt, localCall("tool", `"hold"`), far())
	if !held.ok {
		t.Fatal("StartLocal(tool) declined")
	}
	<-s.started
	out, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.rt.Shutdown(out); err == nil {
		t.Fatal("Shutdown with an ended context returned no error while a call ran")
	}
	a := await(t, held.answer, "the started call's answer after the shutdown")
	if code(a.err) != schema.CodeUnavailable {
		t.Fatalf("started call at a shutdown out of time = %s, %v; want -32003", a.result, a.err)
	}
	close(s.release)
	select {
	case <-s.returned:
	case <-time.After(testwait.Limit):
		t.Fatalf("gave up waiting for the handler to return (%v)", testwait.Limit)
	}
	// The handler has returned; its answer, if any, is handed on before
	// the call leaves the runtime's count, which Shutdown waits for.
	ctx, done := context.WithTimeout(context.Background(), testwait.Limit)
	defer done()
	if err := c.rt.Shutdown(ctx); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if n := held.answers.Load(); n != 1 {
		t.Errorf("started call answered %d times, want once", n)
	}
}

// TestStartLocalLate checks that a call whose deadline has passed is
// answered so, once, without running its handler, and leaves its slot
// free.
func TestStartLocalLate(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{}, worker.WithConcurrency(1))
	s := newStubborn()
	if err := c.rt.Handle("tool", s); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	st := start(c.rt, localCall("tool", ""), time.Now().Add(-time.Second))
	if !st.ok {
		t.Fatal("StartLocal declined a late call, want it answered")
	}
	a := await(t, st.answer, "the late call's answer")
	if code(a.err) != schema.CodeTimeout || a.result != nil {
		t.Errorf("late call answered %s, %v; want %d", a.result, a.err, schema.CodeTimeout)
	}
	if n := s.runs.Load(); n != 0 {
		t.Errorf("the handler ran %d times for a late call, want none", n)
	}
	slotFreed(t, c.rt, "tool")
	if n := st.answers.Load(); n != 1 {
		t.Errorf("late call answered %d times, want once", n)
	}
}
