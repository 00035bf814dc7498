package worker

import (
	"context"
	"encoding/json"
	"math"

	"github.com/toolbus/toolbus/schema"
)

// MaxProgressMessageBytes is the longest progress message [Progress] passes
// on; a longer one is cut at a UTF-8 boundary.
const MaxProgressMessageBytes = schema.MaxProgressMessageBytes

// ProgressFunc receives a running call's progress: percent in [0, 100] and
// a short message. It is called from the handler's goroutine and must not
// block for long.
type ProgressFunc func(percent float64, message string)

type progressKey struct{}

// Progress reports the progress of the call that ctx belongs to: over the
// bus, as a progress report to the aggregator that asked for heartbeats
// (PROTOCOL.md, rule 8), which a job's runner records as the job's
// progress; through [Runtime.Invoke], to its progress function. A call
// whose aggregator asked for no heartbeats, or a notification, reports
// nothing. percent is clamped to [0, 100] (NaN counts as 0) and message
// is cut to [MaxProgressMessageBytes]. Progress is safe to call often: at
// most one report every [ProgressInterval] leaves the worker, the newest.
func Progress(ctx context.Context, percent float64, message string) {
	fn, ok := ctx.Value(progressKey{}).(ProgressFunc)
	if !ok || fn == nil {
		return
	}
	switch {
	case math.IsNaN(percent) || percent < 0:
		percent = 0
	case percent > 100:
		percent = 100
	}
	fn(percent, schema.TruncateUTF8(message, MaxProgressMessageBytes))
}

// Invoke runs the handler registered for call.Method once, outside the bus,
// as the job runner does: the same panic recovery, error mapping, result
// encoding and result limit as a call over the bus, and the handler sees a
// [Request] made from call (the ID, method, params and caller; the deadline
// is ctx's). progress, when not nil, receives what the handler reports with
// [Progress].
//
// Invoke does not take one of the method's concurrency slots: the job runner
// bounds how many jobs run at once itself. A method no registered pattern
// serves answers -32601, and a runtime that has been shut down -32003. The
// handler's context is ctx, so cancelling ctx cancels the handler; its span
// is a child of ctx's span, or when ctx has none, of call.TraceParent (see
// [WithTracerProvider]). Invoke returns either a result of valid JSON or an
// error, never both.
func (rt *Runtime) Invoke(ctx context.Context, call schema.Call, progress func(percent float64, message string)) (json.RawMessage, *schema.Error) {
	r := rt.routeFor(call.Method)
	if r == nil {
		return nil, schema.NewError(schema.CodeMethodNotFound, "method not found: no handler for "+call.Method,
			map[string]any{"method": call.Method})
	}
	if rt.ctx.Err() != nil {
		r.metrics.refuse(refusedShutdown)
		return nil, unavailable()
	}
	req := &Request{ID: call.ID, Method: call.Method, Params: call.Params, Caller: call.Caller}
	if dl, ok := ctx.Deadline(); ok {
		req.Deadline = dl
	}
	if progress != nil {
		ctx = context.WithValue(ctx, progressKey{}, ProgressFunc(progress))
	}
	return rt.handle(invokeTrace(ctx, call.TraceParent), r, req, "invoke")
}

// RetrySafe reports whether method is served by a handler registered with
// [RetrySafe], that is, safe to run again after an interrupted job. An
// unknown method is not.
func (rt *Runtime) RetrySafe(method string) bool {
	r := rt.routeFor(method)
	return r != nil && r.retrySafe
}

// routeFor returns the route whose pattern serves method, or nil. Patterns
// never overlap, so there is at most one.
func (rt *Runtime) routeFor(method string) *route {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, r := range rt.routes {
		if schema.MatchMethod(r.pattern, method) {
			return r
		}
	}
	return nil
}
