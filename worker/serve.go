package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

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
	method, _ := rt.cfg.subjects.Method(msg.Subject)
	rt.receiveMethod(r, msg, method)
}

// receiveMethod is receive for a call of method, "" when its subject names
// none.
func (rt *Runtime) receiveMethod(r *route, msg *nats.Msg, method string) {
	// The call's trace context comes first, so that even the log line of
	// a call that cannot be decoded names its trace.
	ctx := remoteTrace(rt.ctx, msg.Header)
	req, rpcErr := rt.readRequest(msg, method)
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
	h := &held{rt: rt}
	ctx, h.cancel = context.WithCancelCause(ctx)
	if !req.Deadline.IsZero() {
		ctx, h.stopDeadline = context.WithDeadline(ctx, req.Deadline)
	}
	hb := rt.heartbeat(msg)
	rt.track(msg, h)
	select {
	case r.sem <- struct{}{}:
	default:
		if hb.live() {
			h.end()
			r.metrics.refuse(refusedBusy)
			hb.busy(rt.direct)
			return
		}
		select {
		case r.sem <- struct{}{}:
		case <-ctx.Done():
			h.end()
			r.metrics.refuse(rt.refusalOf(ctx.Err()))
			rt.reply(ctx, msg, req, nil, rt.errorFor(req, ctx.Err()))
			return
		}
	}
	if hb.live() {
		ctx = context.WithValue(ctx, progressKey{}, ProgressFunc(hb.report))
	}
	// Only a call that may be asked carries the key: the others need no
	// look at questions at all.
	if msg.Header != nil && msg.Header.Get(schema.HeaderAskKey) != "" {
		if a := rt.askerFor(ctx, r, msg, req, hb); a != nil {
			ctx = context.WithValue(ctx, askerKey{}, a)
		}
	}
	// ctx is final before the probes may read it on their goroutine.
	hb.start(func() {
		rt.logCall(ctx, slog.LevelWarn, "canceled a call nobody listens for any more", req,
			"unheard_beats", hb.misses, "heartbeat", hb.interval)
		r.metrics.orphan()
		h.cancel(ErrCallerGone)
	})
	rt.inflight.Add(1)
	rt.runners.run(func() { rt.serve(ctx, h, r, msg, req, hb) })
}

func (rt *Runtime) serve(ctx context.Context, h *held, r *route, msg *nats.Msg, req *Request, hb *beat) {
	defer rt.release()
	defer h.end()
	result, rpcErr := rt.handle(ctx, r, req, "call")
	hb.stop()
	// The slot is free before the reply leaves, so that a call sent to
	// this worker on the strength of the reply's free count finds it so.
	<-r.sem
	rt.replyFree(ctx, msg, req, result, rpcErr, rt.freeSlots(r, msg))
}

// freeSlots returns the headers that tell the aggregator of the call msg
// where to send its next call of r's method: the slot the reply frees
// (rule 10). nil when the call did not ask with [schema.HeaderNameFree],
// or another call has taken the slot already.
func (rt *Runtime) freeSlots(r *route, msg *nats.Msg) nats.Header {
	if msg.Header.Get(schema.HeaderNameFree) == "" {
		return nil
	}
	// The reply names the one slot it frees, if no other call has taken
	// it yet: a reply for every call that ends gives each free slot to
	// one aggregator once, where a count of all the free slots on every
	// reply would promise the same slot many times over.
	if cap(r.sem)-len(r.sem) <= 0 {
		return nil
	}
	return nats.Header{schema.HeaderDirect: []string{rt.direct}, schema.HeaderFree: []string{"1"}}
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
	code := 0
	if rpcErr != nil {
		code = rpcErr.Code
	}
	rt.stats.End(r.pattern, d, code)
	if rpcErr != nil {
		rt.stats.RecordError(callstats.ErrorAnswer{ID: string(req.ID), Method: req.Method,
			Code: rpcErr.Code, Message: rpcErr.Message, TraceID: tracelog.TraceID(ctx)})
	}
	if rt.log.Enabled(ctx, slog.LevelDebug) {
		rt.logCall(ctx, slog.LevelDebug, what, req, "duration_ms", float64(d.Microseconds())/1000, "code", code)
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
	// The params as the call brought them: a handler that replaces
	// req.Params cannot pass its own bytes off as them.
	params := req.Params
	v, err := h.ServeCall(ctx, req)
	if err != nil {
		return nil, rt.errorFor(req, err)
	}
	b, err := encodeResult(v, params)
	if err != nil {
		rt.logCall(ctx, slog.LevelError, "cannot encode a result", req, "err", err)
		return nil, schema.NewError(schema.CodeInternal, "internal error: cannot encode the result: "+err.Error(), nil)
	}
	if limit := rt.maxResultBytes(); int64(len(b)) > limit {
		return nil, schema.LimitError("max_result_bytes", limit, int64(len(b)))
	}
	return b, nil
}

// encodeResult encodes what a handler returned for a call with params. A
// json.RawMessage is the tool's own text, so it is checked here, where a
// call run in the process gets its only check (over the bus the aggregator
// checks the reply again, since workers are not trusted: PROTOCOL.md, rule
// 1). The call's own params, handed back unchanged, are not: the ingress
// checked them. What json.Marshal writes is JSON and is not checked again.
func encodeResult(v any, params json.RawMessage) (json.RawMessage, error) {
	switch v := v.(type) {
	case nil:
		return nullResult, nil
	case json.RawMessage:
		switch {
		case len(v) == 0:
			return nullResult, nil
		case sameBytes(v, params):
		case !json.Valid(v):
			return nil, errors.New("json.RawMessage result is not valid JSON")
		}
		return v, nil
	}
	return json.Marshal(v)
}

// sameBytes reports whether a and b are the same bytes in memory, not
// only equal ones.
func sameBytes(a, b []byte) bool {
	return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0]
}

// errorFor maps a handler's error to the error it answers with. It follows
// [schema.ErrorFrom] except that an error without a code of its own is a
// tool error, not an internal one, and that a cancellation caused by the
// runtime stopping is reported as retryable unavailability: the tool did not
// fail, its worker went away. A question the call could not ask
// ([ErrCannotAsk]) is a tool error that says to run the tool as a job, and
// a question its caller dismissed ([ErrAskCanceled]) a cancellation.
func (rt *Runtime) errorFor(req *Request, err error) *schema.Error {
	var e *schema.Error
	if errors.As(err, &e) {
		if e == nil {
			return schema.NewError(schema.CodeInternal, "internal error: the tool returned a nil *schema.Error", nil)
		}
		// The tool's own error: its data is checked once, here, for a
		// call run in the process as for one over the bus. The errors
		// the runtime makes itself hold what json.Marshal wrote.
		return validData(e)
	}
	switch {
	case errors.Is(err, context.Canceled) && rt.ctx.Err() != nil:
		return unavailable()
	case errors.Is(err, context.DeadlineExceeded):
		return schema.NewError(schema.CodeTimeout, "timed out: "+req.Method+" ran past its deadline",
			map[string]any{"retryable": true, "method": req.Method, "reason": schema.ReasonDeadlineInWorker})
	case errors.Is(err, context.Canceled):
		return schema.ErrorFrom(err)
	case errors.Is(err, ErrCannotAsk):
		return schema.NewError(schema.CodeToolError,
			"tool error: "+req.Method+" asks its caller a question, which a synchronous call cannot answer: run it as a job (rpc.jobs.submit)",
			map[string]any{"method": req.Method, "reason": schema.ReasonCannotAsk})
	case errors.Is(err, ErrAskCanceled):
		return schema.NewError(schema.CodeCanceled, "canceled: the caller dismissed the question "+req.Method+" asked",
			map[string]any{"method": req.Method})
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
func (rt *Runtime) readRequest(msg *nats.Msg, method string) (*Request, *schema.Error) {
	env, deadline, err := bus.ReadCall(msg)
	if err != nil {
		return nil, schema.NewError(schema.CodeInvalidRequest, "invalid request: cannot decode the call: "+err.Error(), nil)
	}
	if method == "" || env.Method != method {
		return nil, schema.NewError(schema.CodeInvalidRequest,
			fmt.Sprintf("invalid request: the call envelope names method %q but was published for %q", env.Method, method), nil)
	}
	header := msg.Header
	if _, ok := header[schema.HeaderAskKey]; ok {
		header = withoutAskKey(header)
	}
	req := &Request{
		Method:   method,
		Caller:   env.Caller,
		Deadline: deadline,
		Header:   header,
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
	rt.replyFree(ctx, msg, req, result, rpcErr, nil)
}

// replyFree is reply with the headers of free, when not nil.
func (rt *Runtime) replyFree(ctx context.Context, msg *nats.Msg, req *Request, result json.RawMessage, rpcErr *schema.Error, free nats.Header) {
	if msg.Reply == "" {
		if rpcErr != nil && req != nil {
			rt.logCall(ctx, slog.LevelWarn, "notification failed", req, "code", rpcErr.Code, "message", rpcErr.Message)
		}
		return
	}
	env := schema.ReplyResult(result)
	if rpcErr != nil {
		env = schema.ReplyError(rpcErr)
	}
	err := bus.ReplyWith(msg, env, free)
	if errors.Is(err, nats.ErrMaxPayload) {
		// Only an error's own data or a limit set above the server's can
		// get here; the caller still learns which limit it hit.
		err = bus.ReplyWith(msg, schema.ReplyError(schema.LimitError("max_payload", rt.nc.MaxPayload(), -1)), free)
	}
	if err != nil {
		rt.logCall(ctx, slog.LevelError, "cannot send a reply", req, "subject", msg.Subject, "err", err)
	}
}

// validData returns e, or when e's data is not valid JSON (which the
// aggregator would refuse with the whole reply, and which would break the
// answer of a call run in the process) a copy with data that says so; the
// code and message still reach the caller.
func validData(e *schema.Error) *schema.Error {
	if len(e.Data) == 0 || json.Valid(e.Data) {
		return e
	}
	c := *e
	c.Data = json.RawMessage(`{"data_error":"the tool's error data is not valid JSON"}`)
	return &c
}

// errCanceledByClient is the cause of a handler's context when the client
// gave up on the call.
var errCanceledByClient = errors.New("worker: the client canceled the call")

// subscribeCancels listens on the cluster's cancel subject: a message names
// a call by its [schema.HeaderCallID], and the handler of that call, if this
// runtime holds it, sees its context canceled.
func (rt *Runtime) subscribeCancels() error {
	sub, err := rt.nc.Subscribe(rt.cfg.subjects.Cancel(), func(msg *nats.Msg) {
		id := string(msg.Data)
		rt.callsMu.Lock()
		defer rt.callsMu.Unlock()
		h := rt.calls[id]
		if h == nil {
			rt.rememberEarly(id, time.Now())
		}
		for ; h != nil; h = h.next {
			h.cancel(errCanceledByClient)
		}
	})
	if err != nil {
		return err
	}
	rt.cancelSub = sub
	return nil
}

// held is a call this runtime runs, from its arrival to its end: what
// cancels it, and its place among the attempts of its bus call id that a
// cancel message stops, in one record.
type held struct {
	rt *Runtime
	// id is the call's bus call id ([schema.HeaderCallID]); empty for a
	// call without one, which no cancel message names.
	id string
	// cancel ends the call's context with a cause; stopDeadline, when the
	// call has a deadline, releases its timer.
	cancel       context.CancelCauseFunc
	stopDeadline context.CancelFunc
	// next is another attempt of the same call held here.
	next *held
}

// end untracks h and releases its context.
func (h *held) end() {
	h.rt.untrack(h)
	if h.stopDeadline != nil {
		h.stopDeadline()
	}
	h.cancel(nil)
}

// track registers h under the bus call id msg carries, if any. Every
// attempt of the call this runtime holds is registered: a cancel message
// stops them all.
func (rt *Runtime) track(msg *nats.Msg, h *held) {
	h.id = msg.Header.Get(schema.HeaderCallID)
	if h.id == "" {
		return
	}
	rt.callsMu.Lock()
	defer rt.callsMu.Unlock()
	if rt.calls == nil {
		rt.calls = map[string]*held{}
	}
	h.next = rt.calls[h.id]
	rt.calls[h.id] = h
	if _, ok := rt.early[h.id]; ok {
		delete(rt.early, h.id)
		h.cancel(errCanceledByClient)
	}
}

// untrack removes h from the calls a cancel message may name.
func (rt *Runtime) untrack(h *held) {
	if h.id == "" {
		return
	}
	rt.callsMu.Lock()
	defer rt.callsMu.Unlock()
	switch head := rt.calls[h.id]; {
	case head == h && h.next == nil:
		delete(rt.calls, h.id)
	case head == h:
		rt.calls[h.id] = h.next
	default:
		for p := head; p != nil; p = p.next {
			if p.next == h {
				p.next = h.next
				break
			}
		}
	}
	h.id, h.next = "", nil
}

// Bounds of the cancels kept for calls not seen yet: every worker hears
// every cancel of the cluster, so most name calls other workers hold.
const (
	earlyCancelFor = 10 * time.Second
	maxEarlyCancel = 4096
)

// rememberEarly keeps the cancel of call id, not held here, for
// earlyCancelFor, in case its call arrives after it. rt.callsMu must be
// held.
func (rt *Runtime) rememberEarly(id string, now time.Time) {
	if rt.early == nil {
		rt.early = map[string]time.Time{}
	}
	if len(rt.early) >= maxEarlyCancel {
		for k, at := range rt.early {
			if now.Sub(at) > earlyCancelFor {
				delete(rt.early, k)
			}
		}
		if len(rt.early) >= maxEarlyCancel {
			return
		}
	}
	rt.early[id] = now
}

// stopCancels ends the cancel subscription once no call can be canceled.
func (rt *Runtime) stopCancels() {
	rt.mu.Lock()
	sub := rt.cancelSub
	rt.cancelSub = nil
	rt.mu.Unlock()
	if sub != nil {
		if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			rt.log.Warn("unsubscribe from cancels", "err", err)
		}
	}
}

// Request is one call as a handler sees it. The runtime makes a new Request
// for every call; a handler may keep it after it returns, but must not change
// it while middleware or other code may still read it.
type Request struct {
	// ID is the JSON-RPC id exactly as the client sent it, or nil for a
	// notification. The bytes `null` are a null id, which is a request.
	ID json.RawMessage
	// Method is the concrete method name, even when the handler was
	// registered with a pattern such as "math.*".
	Method string
	// Params holds the raw JSON params, or nil when the call has none.
	// The ingress checked that they are JSON; the runtime does not check
	// them again.
	Params json.RawMessage
	// Caller identifies who sent the call; empty when unauthenticated.
	Caller string
	// Deadline is when the call's answer is due; zero when the call has
	// none. The handler's context ends at the same time.
	Deadline time.Time
	// Header holds the message headers, such as the trace context; nil when
	// the message had none. The key of a call that can be asked
	// (Toolbus-Ask-Key) is left out: it is the runtime's, for [Ask].
	Header nats.Header
}

// IsNotification reports whether the call carries no id and so its answer is
// never sent.
func (r *Request) IsNotification() bool { return r.ID == nil }

// Handler serves calls. ServeCall returns the result, which the runtime
// marshals to JSON (a json.RawMessage is sent unchanged, nil is a null
// result), or an error, which it maps to a JSON-RPC error (see the package
// documentation). ServeCall may be called from many goroutines at once, up to
// the method's concurrency limit; ctx ends at the call's deadline or when the
// runtime stops without waiting any longer.
type Handler interface {
	ServeCall(ctx context.Context, req *Request) (any, error)
}

// HandlerFunc adapts an ordinary function to a [Handler].
type HandlerFunc func(ctx context.Context, req *Request) (any, error)

var _ Handler = HandlerFunc(nil)

// ServeCall calls f(ctx, req).
func (f HandlerFunc) ServeCall(ctx context.Context, req *Request) (any, error) {
	return f(ctx, req)
}

// tracerName names the instrumentation in the spans the runtime makes.
const tracerName = "github.com/toolbus/toolbus/worker"

// WithTracerProvider sets where the spans of calls go. Default:
// otel.GetTracerProvider(), which makes no spans unless the program installs
// a provider with otel.SetTracerProvider (before or after [New]).
//
// Every call, over the bus or through [Runtime.Invoke], runs its handler
// inside a server span named "toolbus.worker <method>". Its parent is the
// W3C trace context of the call's traceparent header (for Invoke: the span
// of its ctx, else the call's TraceParent). The span carries rpc.system
// "jsonrpc", rpc.method, rpc.jsonrpc.request_id (the id's JSON text; "" for
// a null id, absent for a notification) and toolbus.worker.pattern (the
// name or pattern the handler was registered under); an error answer adds
// rpc.jsonrpc.error_code and rpc.jsonrpc.error_message and sets the span's
// status to Error. The handler's ctx holds the span, so spans a tool starts
// from it are its children. The runtime's log lines about a call carry the
// call's trace_id and span_id.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) error {
		if tp == nil {
			return errors.New("worker: nil tracer provider")
		}
		c.tracerProvider = tp
		return nil
	}
}

func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(tracerName)
}

// remoteTrace returns ctx with the trace context that h carries, if any.
func remoteTrace(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, bus.HeaderCarrier(h))
}

// invokeTrace returns the parent context of a call run by Invoke: ctx when
// it holds a span, else ctx with the call's own traceparent.
func invokeTrace(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" || trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	if sc, ok := tracelog.ParseTraceParent(traceparent); ok {
		return trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return remoteTrace(ctx, nats.Header{schema.HeaderTraceparent: {traceparent}})
}

// spanStart is what the spans of one route's calls begin with, worked out
// once at registration so that a call adds only what is its own.
type spanStart struct {
	// name is the span name, or "" when the pattern has wildcards and the
	// name is that of the method called.
	name string
	// kind sets the span's kind, in the slice the tracer's variadic
	// Start takes (made here, it is not allocated at each call); attrs
	// are the attributes every call of the route has.
	kind  []trace.SpanStartOption
	attrs []attribute.KeyValue
}

func newSpanStart(pattern string) spanStart {
	ss := spanStart{kind: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}, attrs: []attribute.KeyValue{
		attribute.String("rpc.system", "jsonrpc"),
		attribute.String("rpc.jsonrpc.version", "2.0"),
		attribute.String("toolbus.worker.pattern", pattern),
	}}
	if !strings.ContainsAny(pattern, "*>") {
		ss.name = "toolbus.worker " + pattern
		ss.attrs = append(ss.attrs, attribute.String("rpc.method", pattern))
	}
	return ss
}

// startSpan starts the server span of a call of r. Its attributes are set
// only when it records: a process that records no spans, as toolbus's
// does with tracing off, pays for none of them.
func (rt *Runtime) startSpan(ctx context.Context, r *route, req *Request) (context.Context, trace.Span) {
	name := r.span.name
	if name == "" {
		name = "toolbus.worker " + req.Method
	}
	ctx, span := rt.tracer.Start(ctx, name, r.span.kind...)
	if !span.IsRecording() {
		return ctx, span
	}
	span.SetAttributes(r.span.attrs...)
	if r.span.name == "" {
		span.SetAttributes(attribute.String("rpc.method", req.Method))
	}
	if !req.IsNotification() {
		id := string(req.ID)
		if id == "null" {
			// OpenTelemetry's semantic conventions write a null id as "".
			id = ""
		}
		span.SetAttributes(attribute.String("rpc.jsonrpc.request_id", id))
	}
	return ctx, span
}

// endSpan ends the span of a call answered with rpcErr, nil for a result.
func endSpan(span trace.Span, rpcErr *schema.Error) {
	if rpcErr != nil && span.IsRecording() {
		span.SetAttributes(
			attribute.Int("rpc.jsonrpc.error_code", rpcErr.Code),
			attribute.String("rpc.jsonrpc.error_message", rpcErr.Message),
		)
		span.SetStatus(codes.Error, rpcErr.Message)
	}
	span.End()
}

// routeMetrics holds one route's series (worker/metrics.go defines
// them; [metrics.forRoute] makes these), looked up once at registration so
// that a call costs no label lookup unless it fails. A nil *routeMetrics
// (metrics off) does nothing.
type routeMetrics struct {
	calls    *prometheus.CounterVec // curried with the route's method
	codes    *callstats.Codes
	ok       prometheus.Counter
	duration prometheus.Observer
	inFlight prometheus.Gauge
	refused  [numRefusals]prometheus.Counter
	orphaned prometheus.Counter
	dropped  prometheus.Counter
}

// begin counts a call whose handler starts.
func (rm *routeMetrics) begin() {
	if rm != nil {
		rm.inFlight.Inc()
	}
}

// end counts a call whose handler ran for d and answered rpcErr, nil
// for a result.
func (rm *routeMetrics) end(d time.Duration, rpcErr *schema.Error) {
	if rm == nil {
		return
	}
	rm.inFlight.Dec()
	rm.duration.Observe(d.Seconds())
	if rpcErr == nil {
		rm.ok.Inc()
		return
	}
	rm.calls.WithLabelValues(rm.codes.Label(rpcErr.Code)).Inc()
}

// refuse counts a call whose handler never ran, and why.
func (rm *routeMetrics) refuse(why refusal) {
	if rm != nil {
		rm.refused[why].Inc()
	}
}

// orphan counts a call canceled because nobody listened for its answer.
func (rm *routeMetrics) orphan() {
	if rm != nil {
		rm.orphaned.Inc()
	}
}

// dropAnswer counts a message on the answer subject of no call.
func (rm *routeMetrics) dropAnswer() {
	if rm != nil {
		rm.dropped.Inc()
	}
}

// logCall writes a log line about req (nil when the call could not be
// decoded) with its method, id and, when ctx holds a span, trace_id and
// span_id, followed by args.
func (rt *Runtime) logCall(ctx context.Context, level slog.Level, msg string, req *Request, args ...any) {
	if !rt.log.Enabled(ctx, level) {
		return
	}
	all := make([]any, 0, 8+len(args))
	if req != nil {
		all = append(all, "method", req.Method, "id", string(req.ID))
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		all = append(all, "trace_id", sc.TraceID().String(), "span_id", sc.SpanID().String())
	}
	rt.log.Log(ctx, level, msg, append(all, args...)...)
}

// subscribe makes r's queue subscriptions: on the method's subject and on
// the runtime's direct subject (rule 10). rt.mu must be held. A direct
// subscription that NATS refuses (permissions that predate rule 10) only
// means that calls sent there come back no-responders, and the
// aggregator sends them to the queue group instead.
func (rt *Runtime) subscribe(r *route) error {
	// done closes once both subscriptions have closed; each says so
	// once, whether through its closed handler or, when it closed before
	// the handler was set, through IsValid.
	var open sync.WaitGroup
	open.Add(2)
	done := make(chan struct{})
	go func() {
		open.Wait()
		close(done)
	}()
	sub, err := rt.nc.QueueSubscribe(r.subject, rt.cfg.subjects.QueueGroup(), func(msg *nats.Msg) {
		rt.receive(r, msg)
	})
	if err != nil {
		return fmt.Errorf("worker: subscribe %s: %w", r.subject, err)
	}
	closedSub := sync.OnceFunc(open.Done)
	sub.SetClosedHandler(func(string) { closedSub() })
	if !sub.IsValid() {
		closedSub()
	}
	dsub, err := rt.nc.QueueSubscribe(rt.direct+"."+r.pattern, rt.cfg.subjects.QueueGroup(), func(msg *nats.Msg) {
		method, _ := rt.cfg.subjects.DirectMethod(rt.direct, msg.Subject)
		rt.receiveMethod(r, msg, method)
	})
	if err != nil {
		rt.log.Warn("calls sent to this worker alone will come back to the queue group", "subject", rt.direct+"."+r.pattern, "err", err)
		dsub = nil
		open.Done()
	} else {
		closedDsub := sync.OnceFunc(open.Done)
		dsub.SetClosedHandler(func(string) { closedDsub() })
		if !dsub.IsValid() {
			closedDsub()
		}
	}
	r.sub, r.dsub, r.done = sub, dsub, done
	return nil
}

// unsubscribe undoes subscribe after a failed start.
func (r *route) unsubscribe(log *slog.Logger) {
	for _, s := range []*nats.Subscription{r.sub, r.dsub} {
		if s == nil {
			continue
		}
		if err := s.Unsubscribe(); err != nil {
			log.Warn("unsubscribe after a failed start", "subject", s.Subject, "err", err)
		}
	}
	r.sub, r.dsub, r.done = nil, nil, nil
}

// release ends the accounting of one call.
func (rt *Runtime) release() {
	if rt.inflight.Add(-1) == 0 && rt.draining.Load() {
		rt.markIdle()
	}
}

// runnerIdle is how long a runner waits for the next call before it
// exits.
const runnerIdle = time.Second

// runners runs the handlers of calls, and the waits of an aggregator for
// its local calls ([Runtime.Go]), on goroutines that outlive one call.
// A new goroutine starts with a small stack and grows it by copying as the
// call's path deepens (tracing, decoding, the handler, the answer's
// encoding); a goroutine started for every call paid that again each
// time, about a fifth of the CPU of a flood of short calls. A runner keeps
// its grown stack for the next call. A runner idle for [runnerIdle], or
// once done is closed, exits, so that a burst leaves no goroutines behind
// for long. It is safe for concurrent use.
type runners struct {
	work chan func()
	done <-chan struct{}
	// started and live count the runners started and those not exited.
	started, live atomic.Int64
}

func newRunners(done <-chan struct{}) *runners {
	return &runners{work: make(chan func()), done: done}
}

// run runs f on an idle runner, or on a new one when none is idle. It
// never waits for a runner.
func (p *runners) run(f func()) {
	select {
	case p.work <- f:
	default:
		p.started.Add(1)
		p.live.Add(1)
		go p.loop(f)
	}
}

func (p *runners) loop(f func()) {
	defer p.live.Add(-1)
	idle := time.NewTimer(runnerIdle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(runnerIdle)
		var ok bool
		if f, ok = p.next(idle); !ok {
			return
		}
	}
}

// parkedStack is how much stack an idle runner holds in use while it
// waits for its next call (see [runners.next]).
const parkedStack = 2048

// next waits for the runner's next call: false once it has been idle for
// [runnerIdle] or done is closed. It waits with parkedStack bytes of its
// frame in use. The garbage collector halves the stack of a goroutine
// that uses less than a quarter of it when scanned, and an idle runner
// parked in a shallow select uses almost none; under a flood the
// collector runs many times a second, so every runner lost its grown
// stack between two calls and copied it back in the next (10–13% of the
// CPU of `toolbus dev` under 500-call batches). A stack of up to 8 KiB,
// which a call's path needs, is a quarter in use here, so it is kept.
// Zeroing the frame costs far less than one copy of the stack.
//
//go:noinline
func (p *runners) next(idle *time.Timer) (func(), bool) {
	var frame [parkedStack]byte
	holdStack(&frame)
	select {
	case f := <-p.work:
		return f, true
	case <-idle.C:
		return nil, false
	case <-p.done:
		return nil, false
	}
}

// holdStack keeps b, an array of its caller's frame, from being
// optimised away.
//
//go:noinline
func holdStack(b *[parkedStack]byte) { b[0] = 1 }
