package jobs

import (
	"context"
	"encoding/json"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// BusInvoker is the [Invoker] of a runner in an ingress: it sends each job
// to a worker as an ordinary call over the bus, through a dispatcher such
// as an aggregator, so that any worker that speaks the call protocol runs
// jobs, in any language and without JetStream access of its own. The call
// carries the job's id as its JSON-RPC id, its caller, its trace context,
// the deadline of ctx and a progress function; canceling ctx cancels the
// call. It serves every method (the pattern ">"). Its methods are safe for
// concurrent use.
type BusInvoker struct {
	d         schema.Dispatcher
	retrySafe func(method string) bool
}

var _ Invoker = (*BusInvoker)(nil)

// NewBusInvoker returns an invoker that dispatches jobs through d. The
// deadline d gives a call must reach the job's longest run time
// ([WithMaxRunTime]): an aggregator's maximum timeout shortens it.
// retrySafe tells which methods may run again after their worker was lost
// mid-run; nil: none.
func NewBusInvoker(d schema.Dispatcher, retrySafe func(method string) bool) *BusInvoker {
	if retrySafe == nil {
		retrySafe = func(string) bool { return false }
	}
	return &BusInvoker{d: d, retrySafe: retrySafe}
}

// Methods returns ">": a runner of a BusInvoker takes the jobs of every
// method.
func (b *BusInvoker) Methods() []string { return []string{">"} }

// RetrySafe reports whether method may run again after an interrupted
// run.
func (b *BusInvoker) RetrySafe(method string) bool { return b.retrySafe(method) }

// Invoke dispatches call and maps its answer: a result succeeds; an
// answer that says nothing ran (no worker subscribed or known, every
// worker busy, the ingress at an in-flight limit, the bus unreachable, a
// circuit open) is a [WaitError]; the loss of the worker mid-call is an
// [InterruptedError]; any other error, the tool's own included, fails the
// job with it.
func (b *BusInvoker) Invoke(ctx context.Context, call schema.Call, progress func(percent float64, message string)) (json.RawMessage, error) {
	call.Progress = progress
	if dl, ok := ctx.Deadline(); ok {
		call.Timeout = max(time.Until(dl), time.Millisecond)
	}
	var resp schema.Response
	answered := false
	b.d.Dispatch(ctx, []schema.Call{call}, func(_ int, r schema.Response) { resp, answered = r, true })
	switch {
	case !answered:
		return nil, schema.NewError(schema.CodeInternal, "internal error: the job's call got no answer",
			map[string]any{"reason": schema.ReasonNoAnswer, "method": call.Method})
	case resp.Error == nil && len(resp.Result) == 0:
		return nil, schema.NewError(schema.CodeInternal, "internal error: the job's call got an empty result",
			map[string]any{"reason": schema.ReasonBadReply, "method": call.Method})
	case resp.Error == nil:
		return resp.Result, nil
	}
	return nil, classify(resp.Error)
}

// classify tells, from the answer toolbus itself gave a call, whether the
// call ran: a tool's own error passes through.
func classify(e *schema.Error) error {
	reason := e.Reason()
	switch {
	case reason == schema.ReasonWorkerLost && e.Code == schema.CodeUnavailable:
		return &InterruptedError{Err: e}
	case reason == schema.ReasonNoResponders && e.Code == schema.CodeMethodNotFound,
		reason == schema.ReasonNoWorkers && e.Code == schema.CodeUnavailable:
		return &WaitError{Reason: schema.ReasonNoWorkers, Err: e}
	case reason == schema.ReasonNoResponders && e.Code == schema.CodeUnavailable:
		// A retry-safe call whose first worker was lost found none left
		// for the next attempt: the first may have run.
		return &InterruptedError{Err: e}
	case reason == schema.ReasonWorkersBusy && e.Code == schema.CodeOverloaded,
		reason == schema.ReasonBusDisconnected && e.Code == schema.CodeUnavailable,
		reason == schema.ReasonCircuitOpen && e.Code == schema.CodeUnavailable:
		return &WaitError{Reason: reason, Err: e}
	case e.Code == schema.CodeOverloaded && inFlightLimits[e.Limit()]:
		return &WaitError{Reason: schema.WaitingOverloaded, Err: e}
	}
	return e
}

// inFlightLimits are the limits of an aggregator that refuse a call before
// it is published.
var inFlightLimits = map[string]bool{"max_in_flight": true, "caller_max_in_flight": true, "method_max_in_flight": true}
