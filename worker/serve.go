package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/callstats"
	"github.com/toolbus/toolbus/internal/tracelog"
	"github.com/toolbus/toolbus/schema"
)

var nullResult = json.RawMessage("null")

// receive runs on the subscription's delivery goroutine. It decodes the call
// and takes a concurrency slot for it. A method at its limit refuses the
// call with a busy progress message when the aggregator understands one, so
// that the call goes to a worker with room; otherwise the call waits there
// for a slot, which leaves further calls queued in the subscription rather
// than in goroutines of its own. The handler runs on a goroutine of its
// own, acknowledged and with heartbeats when the aggregator asked for them;
// when those find that nobody listens for the answer any more, the
// handler's context is canceled with [ErrCallerGone].
func (rt *Runtime) receive(r *route, msg *nats.Msg) {
	// The call's trace context comes first, so that even the log line of
	// a call that cannot be decoded names its trace.
	ctx := remoteTrace(rt.ctx, msg.Header)
	req, rpcErr := rt.readRequest(msg)
	if rpcErr != nil {
		rt.logCall(ctx, slog.LevelWarn, "undecodable call", nil, "subject", msg.Subject, "err", rpcErr.Message)
		r.metrics.refuse(refusedInvalid)
		rt.reply(ctx, msg, nil, nil, rpcErr)
		return
	}
	if rt.ctx.Err() != nil {
		r.metrics.refuse(refusedShutdown)
		rt.reply(ctx, msg, req, nil, unavailable())
		return
	}
	if !req.Deadline.IsZero() && !time.Now().Before(req.Deadline) {
		rt.logCall(ctx, slog.LevelInfo, "skipped a call already past its deadline", req, "late", time.Since(req.Deadline))
		r.metrics.refuse(refusedLate)
		return
	}
	ctx, cancelCause := context.WithCancelCause(ctx)
	cancel := func() { cancelCause(nil) }
	if !req.Deadline.IsZero() {
		var cancelDeadline context.CancelFunc
		ctx, cancelDeadline = context.WithDeadline(ctx, req.Deadline)
		cancel = func() { cancelDeadline(); cancelCause(nil) }
	}
	hb := rt.heartbeat(msg)
	untrack := rt.track(msg, cancelCause)
	select {
	case r.sem <- struct{}{}:
	default:
		if hb.asked() {
			untrack()
			cancel()
			r.metrics.refuse(refusedBusy)
			hb.busy()
			return
		}
		select {
		case r.sem <- struct{}{}:
		case <-ctx.Done():
			untrack()
			cancel()
			r.metrics.refuse(rt.refusalOf(ctx.Err()))
			rt.reply(ctx, msg, req, nil, rt.errorFor(req, ctx.Err()))
			return
		}
	}
	hb.start(func() {
		rt.logCall(ctx, slog.LevelWarn, "canceled a call nobody listens for any more", req,
			"unheard_beats", hb.misses, "heartbeat", hb.interval)
		r.metrics.orphan()
		cancelCause(ErrCallerGone)
	})
	rt.inflight.Add(1)
	go rt.serve(ctx, func() { untrack(); cancel() }, r, msg, req, hb)
}

func (rt *Runtime) serve(ctx context.Context, cancel func(), r *route, msg *nats.Msg, req *Request, hb *beat) {
	defer rt.release()
	defer func() { <-r.sem }()
	defer cancel()
	result, rpcErr := rt.handle(ctx, r, req, "call")
	hb.stop()
	rt.reply(ctx, msg, req, result, rpcErr)
}

// handle runs r's handler for req inside the call's span and accounts for
// it in the metrics and the call statistics; what names the call in the
// debug log line.
func (rt *Runtime) handle(ctx context.Context, r *route, req *Request, what string) (json.RawMessage, *schema.Error) {
	ctx, span := rt.startSpan(ctx, r, req)
	r.metrics.begin()
	rt.stats.Begin(r.pattern)
	start := time.Now()
	result, rpcErr := rt.run(ctx, r.handler, req)
	d := time.Since(start)
	r.metrics.end(d, rpcErr)
	rt.stats.End(r.pattern, d, rpcErr != nil)
	code := 0
	if rpcErr != nil {
		code = rpcErr.Code
		rt.stats.RecordError(callstats.ErrorAnswer{ID: string(req.ID), Method: req.Method,
			Code: rpcErr.Code, Message: rpcErr.Message, TraceID: tracelog.TraceID(ctx)})
	}
	if rt.log.Enabled(ctx, slog.LevelDebug) {
		rt.logCall(ctx, slog.LevelDebug, what, req, "duration", d, "code", code)
	}
	endSpan(span, rpcErr)
	return result, rpcErr
}

// run calls the handler and encodes what it returns. It returns either a
// result of valid JSON or an error, never both and never neither.
func (rt *Runtime) run(ctx context.Context, h Handler, req *Request) (result json.RawMessage, rpcErr *schema.Error) {
	defer func() {
		if p := recover(); p != nil {
			rt.logCall(ctx, slog.LevelError, "handler panicked", req, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			result, rpcErr = nil, schema.NewError(schema.CodeInternal, "internal error: the tool panicked", nil)
		}
	}()
	v, err := h.ServeCall(ctx, req)
	if err != nil {
		return nil, rt.errorFor(req, err)
	}
	b, err := encodeResult(v)
	if err != nil {
		rt.logCall(ctx, slog.LevelError, "cannot encode a result", req, "err", err)
		return nil, schema.NewError(schema.CodeInternal, "internal error: cannot encode the result: "+err.Error(), nil)
	}
	if limit := rt.maxResultBytes(); int64(len(b)) > limit {
		return nil, schema.LimitError("max_result_bytes", limit, int64(len(b)))
	}
	return b, nil
}

func encodeResult(v any) (json.RawMessage, error) {
	switch v := v.(type) {
	case nil:
		return nullResult, nil
	case json.RawMessage:
		if len(v) == 0 {
			return nullResult, nil
		}
		if !json.Valid(v) {
			return nil, errors.New("json.RawMessage result is not valid JSON")
		}
		return v, nil
	}
	return json.Marshal(v)
}

// errorFor maps a handler's error to the error it answers with. It follows
// [schema.ErrorFrom] except that an error without a code of its own is a
// tool error, not an internal one, and that a cancellation caused by the
// runtime stopping is reported as retryable unavailability: the tool did not
// fail, its worker went away.
func (rt *Runtime) errorFor(req *Request, err error) *schema.Error {
	var e *schema.Error
	if errors.As(err, &e) {
		if e == nil {
			return schema.NewError(schema.CodeInternal, "internal error: the tool returned a nil *schema.Error", nil)
		}
		return e
	}
	switch {
	case errors.Is(err, context.Canceled) && rt.ctx.Err() != nil:
		return unavailable()
	case errors.Is(err, context.DeadlineExceeded):
		return schema.NewError(schema.CodeTimeout, "timed out: "+req.Method+" ran past its deadline",
			map[string]any{"retryable": true, "method": req.Method, "reason": schema.ReasonDeadlineInWorker})
	case errors.Is(err, context.Canceled):
		return schema.ErrorFrom(err)
	}
	return schema.NewError(schema.CodeToolError, "tool error: "+err.Error(), nil)
}

func unavailable() *schema.Error {
	return schema.NewError(schema.CodeUnavailable, "unavailable: the worker is shutting down",
		map[string]any{"retryable": true})
}

// maxResultBytes returns the result limit; by default it follows the
// largest message of the server the connection is on now.
func (rt *Runtime) maxResultBytes() int64 {
	if rt.cfg.maxResultBytes > 0 {
		return rt.cfg.maxResultBytes
	}
	mp := rt.nc.MaxPayload()
	if mp <= 0 {
		// Not connected yet: assume NATS's default largest message.
		mp = 1 << 20
	}
	return max(mp-ResultHeadroom, mp/2)
}

// readRequest decodes a call message into a Request, or returns the -32600
// error it is answered with.
func (rt *Runtime) readRequest(msg *nats.Msg) (*Request, *schema.Error) {
	env, deadline, err := bus.ReadCall(msg)
	if err != nil {
		return nil, schema.NewError(schema.CodeInvalidRequest, "invalid request: cannot decode the call: "+err.Error(), nil)
	}
	method, ok := rt.cfg.subjects.Method(msg.Subject)
	if !ok || env.Method != method {
		return nil, schema.NewError(schema.CodeInvalidRequest,
			fmt.Sprintf("invalid request: envelope method %q does not match subject %q", env.Method, msg.Subject), nil)
	}
	req := &Request{
		Method:   method,
		Caller:   env.Caller,
		Deadline: deadline,
		Header:   msg.Header,
	}
	if len(env.ID) > 0 {
		req.ID = env.ID
	}
	if len(env.Params) > 0 {
		req.Params = env.Params
	}
	return req, nil
}

// reply answers msg with either result or rpcErr; req is nil when the call
// could not be decoded. A notification is not answered, but its error is
// logged so that it is never lost without a trace. ctx serves the log lines.
func (rt *Runtime) reply(ctx context.Context, msg *nats.Msg, req *Request, result json.RawMessage, rpcErr *schema.Error) {
	if msg.Reply == "" {
		if rpcErr != nil && req != nil {
			rt.logCall(ctx, slog.LevelWarn, "notification failed", req, "code", rpcErr.Code, "message", rpcErr.Message)
		}
		return
	}
	env := schema.ReplyResult(result)
	if rpcErr != nil {
		env = schema.ReplyError(validData(rpcErr))
	}
	err := bus.Reply(msg, env)
	if errors.Is(err, nats.ErrMaxPayload) {
		// Only an error's own data or a limit set above the server's can
		// get here; the caller still learns which limit it hit.
		err = bus.Reply(msg, schema.ReplyError(schema.LimitError("max_payload", rt.nc.MaxPayload(), -1)))
	}
	if err != nil {
		rt.logCall(ctx, slog.LevelError, "cannot send a reply", req, "subject", msg.Subject, "err", err)
	}
}

// validData returns e, or when e's data is not valid JSON (which a receiver
// would reject with the whole reply) a copy with data that says so; the code
// and message still reach the caller.
func validData(e *schema.Error) *schema.Error {
	if len(e.Data) == 0 || json.Valid(e.Data) {
		return e
	}
	c := *e
	c.Data = json.RawMessage(`{"data_error":"the tool's error data is not valid JSON"}`)
	return &c
}
