package worker

import (
	"context"
	"encoding/json"
	"math"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/internal/latest"
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
// [WithTracerProvider]). Its caller cannot answer a question: [Ask] in the
// handler fails with [ErrCannotAsk], also when ctx is that of a call that
// can be asked. Invoke returns either a result of valid JSON or an error,
// never both.
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
	// A tool run from another's handler must not ask that call's caller.
	ctx = context.WithValue(ctx, askerKey{}, (*asker)(nil))
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
	return rt.routeForLocked(method)
}

// routeForLocked is [Runtime.routeFor] with rt.mu held.
func (rt *Runtime) routeForLocked(method string) *route {
	if r := rt.exact[method]; r != nil {
		return r
	}
	for _, r := range rt.patterns {
		if schema.MatchMethod(r.pattern, method) {
			return r
		}
	}
	return nil
}

// TryInvoke runs call on this runtime's handler when the runtime can take it
// at once, in the caller's process, without the bus: the runtime is started
// and not shutting down, a registered pattern serves call.Method, and one of
// the method's concurrency slots is free. When it cannot, ok is false and
// nothing ran; the caller then sends the call over the bus, where another
// worker (or this one, once a slot is free) takes it. An aggregator given
// this runtime with aggregator.WithLocal does that for a job's call,
// which reports progress, and starts every other with
// [Runtime.StartLocal]: that is how a one-process deployment skips the
// bus for the tools it serves itself.
//
// A call taken holds its slot and counts as in flight for Shutdown, as a call
// from the bus does, and gets the same panic recovery, error mapping, result
// encoding, result limit, metrics and call statistics. The handler's
// context ends at ctx's end (its deadline is the call's; [Request.Header] is
// nil) and when a Shutdown runs out of time. The handler runs on a runner
// of the runtime's pool, a goroutine apart from the caller's, so
// TryInvoke returns when its context ends even if
// the handler does not listen to it: the answer is then the timeout, the
// cancellation, or -32003 for the shutdown, and the handler keeps its slot
// until it returns. A ctx that has already ended is answered so without
// running the handler. call.Progress, when set, receives what the handler
// reports with [Progress], on TryInvoke's goroutine and never after
// TryInvoke returns; a report replaces one not yet handed on. [Ask] in the
// handler fails with [ErrCannotAsk], as in a synchronous call over the bus.
func (rt *Runtime) TryInvoke(ctx context.Context, call *schema.Call) (result json.RawMessage, rpcErr *schema.Error, ok bool) {
	req := &Request{ID: call.ID, Method: call.Method, Params: call.Params, Caller: call.Caller}
	if err := ctx.Err(); err != nil {
		return nil, rt.errorFor(req, err), true
	}
	r := rt.takeLocal(call.Method, nil)
	if r == nil {
		return nil, nil, false
	}
	if dl, has := ctx.Deadline(); has {
		req.Deadline = dl
	}
	// The handler's context ends with ctx, when TryInvoke returns, and
	// when a Shutdown out of time cancels the runtime's context (the
	// select below watches that).
	hctx, cancel := context.WithCancel(invokeTrace(ctx, call.TraceParent))
	defer cancel()
	hctx = context.WithValue(hctx, askerKey{}, (*asker)(nil))
	var reports chan schema.JobProgress
	if call.Progress != nil {
		reports = make(chan schema.JobProgress, 1)
		hctx = context.WithValue(hctx, progressKey{}, ProgressFunc(func(percent float64, message string) {
			latest.Offer(reports, schema.JobProgress{Percent: percent, Message: message})
		}))
	}
	done := make(chan localAnswer, 1)
	rt.runners.run(func() {
		defer rt.release()
		res, err := rt.handle(hctx, r, req, "call")
		// The slot is free before the answer leaves, so that the
		// caller's next call finds it so.
		<-r.sem
		done <- localAnswer{res, err}
	})
	for {
		select {
		case a := <-done:
			select {
			case p := <-reports:
				call.Progress(p.Percent, p.Message)
			default:
			}
			return a.result, a.err, true
		case p := <-reports:
			call.Progress(p.Percent, p.Message)
		case <-hctx.Done():
			return nil, rt.errorFor(req, hctx.Err()), true
		case <-rt.ctx.Done():
			cancel()
			return nil, unavailable(), true
		}
	}
}

// takeLocal takes, for a call run in the process, a concurrency slot of
// the route that serves method, and counts the call in flight; it
// returns the route, or nil when the runtime cannot take the call at
// once (not started, shutting down, no route, or no free slot). lr, when
// not nil, is kept among the runtime's local runs until [Runtime.unlink].
func (rt *Runtime) takeLocal(method string, lr *localRun) *route {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if !rt.started || rt.closed {
		return nil
	}
	r := rt.routeForLocked(method)
	if r == nil {
		return nil
	}
	select {
	case r.sem <- struct{}{}:
	default:
		return nil
	}
	// Counted under the lock that Shutdown takes to close the runtime, so
	// that its drain waits for this call.
	rt.inflight.Add(1)
	if lr != nil {
		lr.next = rt.locals
		if lr.next != nil {
			lr.next.prev = lr
		}
		rt.locals = lr
	}
	return r
}

// StartLocal is [Runtime.TryInvoke] without the wait (it is an
// aggregator.LocalStarter): it starts call when the runtime can take it
// at once, on a runner of its pool, and returns at once; answer receives
// what the handler answered, once, when it returns (or -32003 when a
// Shutdown runs out of time first). When the runtime cannot take the
// call, ok is false and nothing ran. A call whose deadline has passed is
// answered so, its handler not run.
//
// The handler's context is the runtime's, as for a call from the bus,
// with the call's trace and deadline; it ends at the deadline, when stop
// is called, and when a Shutdown runs out of time, which also answers
// the call -32003 at once, as TryInvoke does. A call started holds its
// slot and counts as in flight until its handler returns, and gets the
// same panic recovery, error mapping, result encoding, result limit,
// metrics and call statistics as a call from the bus. Whoever starts a
// call watches its deadline and its client: a handler that does not
// listen to its context is answered only when it returns (or when a
// Shutdown runs out of time). [Ask] in the handler fails with
// [ErrCannotAsk] and [Progress] reports nothing: a call that reports
// progress goes to TryInvoke.
func (rt *Runtime) StartLocal(call *schema.Call, deadline time.Time, answer func(json.RawMessage, *schema.Error)) (stop func(), ok bool) {
	lr := &localRun{answer: answer,
		req: Request{ID: call.ID, Method: call.Method, Params: call.Params, Caller: call.Caller, Deadline: deadline}}
	r := rt.takeLocal(call.Method, lr)
	if r == nil {
		return nil, false
	}
	if !deadline.After(time.Now()) {
		// Late already: answered so, the handler not run, as a call
		// from the bus whose deadline passed is.
		<-r.sem
		rt.unlink(lr)
		lr.finish(nil, rt.errorFor(&lr.req, context.DeadlineExceeded))
		rt.release()
		return func() {}, true
	}
	// The runtime's context holds no asker, so [Ask] fails with
	// ErrCannotAsk: unlike TryInvoke's, this context has no caller's
	// context above it whose call could be asked.
	hctx, cancel := context.WithDeadline(invokeTrace(rt.ctx, call.TraceParent), deadline)
	rt.runners.run(func() {
		res, err := rt.handle(hctx, r, &lr.req, "call")
		// The slot is free before the answer leaves, so that the
		// caller's next call finds it so.
		<-r.sem
		cancel()
		rt.unlink(lr)
		lr.finish(res, err)
		rt.release()
	})
	return cancel, true
}

// localRun is a call started by [Runtime.StartLocal]: its request, whom
// to answer, and its place among the runtime's local runs, which a
// Shutdown out of time answers.
type localRun struct {
	req        Request
	answer     func(json.RawMessage, *schema.Error)
	answered   atomic.Bool
	prev, next *localRun
}

// finish answers the call, unless it was answered already.
func (lr *localRun) finish(result json.RawMessage, e *schema.Error) {
	if lr.answered.CompareAndSwap(false, true) {
		lr.answer(result, e)
	}
}

// unlink takes lr out of the runtime's local runs.
func (rt *Runtime) unlink(lr *localRun) {
	rt.mu.Lock()
	if lr.prev != nil {
		lr.prev.next = lr.next
	} else if rt.locals == lr {
		rt.locals = lr.next
	}
	if lr.next != nil {
		lr.next.prev = lr.prev
	}
	lr.prev, lr.next = nil, nil
	rt.mu.Unlock()
}

// answerLocals answers -32003 every call started by StartLocal whose
// handler still runs: a Shutdown ran out of time, and the runtime's
// context, their handlers' parent, has ended.
func (rt *Runtime) answerLocals() {
	rt.mu.Lock()
	var runs []*localRun
	for lr := rt.locals; lr != nil; lr = lr.next {
		runs = append(runs, lr)
	}
	rt.mu.Unlock()
	for _, lr := range runs {
		lr.finish(nil, unavailable())
	}
}

// localAnswer is what the handler of a [Runtime.TryInvoke] call answered.
type localAnswer struct {
	result json.RawMessage
	err    *schema.Error
}

// Deferred offers calls to a runtime set after whoever offers them was
// made, as `toolbus dev` makes its ingress's aggregator before its worker:
// it is an aggregator.Local. Until [Deferred.Set], TryInvoke declines
// every call (ok false, so the call goes over the bus), and afterwards it
// is the runtime's [Runtime.TryInvoke]. The zero value is ready to use;
// it is safe for concurrent use.
type Deferred struct{ rt atomic.Pointer[Runtime] }

// Set hands the calls d is offered to rt from now on.
func (d *Deferred) Set(rt *Runtime) { d.rt.Store(rt) }

// Go runs f on a runner of the runtime's pool, a goroutine that keeps its
// grown stack from one function to the next (it is an
// aggregator.LocalGoroutines): an aggregator waits there for the calls it
// hands to [Runtime.TryInvoke]. It never waits for a runner. After
// Shutdown f still runs, on a goroutine that exits once f returns.
func (rt *Runtime) Go(f func()) { rt.runners.run(f) }

// Go is [Runtime.Go] of the runtime [Deferred.Set] gave, and a goroutine
// of its own before one was given.
func (d *Deferred) Go(f func()) {
	if rt := d.rt.Load(); rt != nil {
		rt.Go(f)
		return
	}
	go f()
}

// StartLocal is [Runtime.StartLocal] of the runtime [Deferred.Set] gave,
// and declines the call before one was given.
func (d *Deferred) StartLocal(call *schema.Call, deadline time.Time, answer func(json.RawMessage, *schema.Error)) (stop func(), ok bool) {
	rt := d.rt.Load()
	if rt == nil {
		return nil, false
	}
	return rt.StartLocal(call, deadline, answer)
}

// TryInvoke is [Runtime.TryInvoke] of the runtime [Deferred.Set] gave,
// and declines the call before one was given.
func (d *Deferred) TryInvoke(ctx context.Context, call *schema.Call) (result json.RawMessage, rpcErr *schema.Error, ok bool) {
	rt := d.rt.Load()
	if rt == nil {
		return nil, nil, false
	}
	return rt.TryInvoke(ctx, call)
}
