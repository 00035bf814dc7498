package worker

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

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
	return remoteTrace(ctx, nats.Header{schema.HeaderTraceparent: {traceparent}})
}

// spanStart is what the spans of one route's calls begin with, worked out
// once at registration so that a call adds only what is its own.
type spanStart struct {
	// name is the span name, or "" when the pattern has wildcards and the
	// name is that of the method called.
	name string
	// kind and attrs set the kind and the attributes every call of the
	// route has.
	kind, attrs trace.SpanStartOption
}

func newSpanStart(pattern string) spanStart {
	attrs := []attribute.KeyValue{
		attribute.String("rpc.system", "jsonrpc"),
		attribute.String("rpc.jsonrpc.version", "2.0"),
		attribute.String("toolbus.worker.pattern", pattern),
	}
	ss := spanStart{kind: trace.WithSpanKind(trace.SpanKindServer)}
	if !strings.ContainsAny(pattern, "*>") {
		ss.name = "toolbus.worker " + pattern
		attrs = append(attrs, attribute.String("rpc.method", pattern))
	}
	ss.attrs = trace.WithAttributes(attrs...)
	return ss
}

// startSpan starts the server span of a call of r.
func (rt *Runtime) startSpan(ctx context.Context, r *route, req *Request) (context.Context, trace.Span) {
	name := r.span.name
	var own [2]attribute.KeyValue
	n := 0
	if name == "" {
		name = "toolbus.worker " + req.Method
		own[n] = attribute.String("rpc.method", req.Method)
		n++
	}
	if !req.IsNotification() {
		id := string(req.ID)
		if id == "null" {
			// OpenTelemetry's semantic conventions write a null id as "".
			id = ""
		}
		own[n] = attribute.String("rpc.jsonrpc.request_id", id)
		n++
	}
	if n == 0 {
		return rt.tracer.Start(ctx, name, r.span.kind, r.span.attrs)
	}
	return rt.tracer.Start(ctx, name, r.span.kind, r.span.attrs, trace.WithAttributes(own[:n]...))
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
