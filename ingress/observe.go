package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/callstats"
	"github.com/toolbus/toolbus/internal/tracelog"
	"github.com/toolbus/toolbus/schema"
)

// tracerName names the ingress's tracer.
const tracerName = "github.com/toolbus/toolbus/ingress"

// traceContext reads and writes W3C trace context: incoming HTTP headers
// and the traceparent of each call on the bus.
var traceContext = propagation.TraceContext{}

// DefaultMetricsMaxMethods is how many method names get a label of their
// own in the ingress's metrics; calls of further names are counted under
// "_other", so that clients sending made-up names cannot grow the metrics
// without bound. The dashboard keeps [callstats.DefaultMaxMethods] apart.
const DefaultMetricsMaxMethods = 1000

// Labels of calls whose method has no label of its own.
const (
	labelOther   = "_other"   // past metrics_max_methods
	labelUnknown = "_unknown" // with discovery: never advertised
	labelInvalid = "_invalid" // not a valid method name, or reserved
)

// observe is the first layer of the chain: it sees every call any
// transport dispatches, extension methods such as rpc.jobs.* included.
// Around each batch and each call it keeps a span, the metrics, the
// dashboard's statistics and the message log, and it adds the trace id to
// every error answer's data so that an agent's report leads an operator to
// the trace.
func (s *Server) observe(next schema.Dispatcher) schema.Dispatcher {
	return schema.DispatcherFunc(func(ctx context.Context, calls []schema.Call, emit func(i int, r schema.Response)) {
		s.observed(ctx, next, calls, emit)
	})
}

// watched is what the observer holds of one call while it runs.
type watched struct {
	label string
	lm    *labelMetrics // nil without metrics
	span  trace.Span
	ctx   context.Context
	start time.Time
}

func (s *Server) observed(ctx context.Context, next schema.Dispatcher, calls []schema.Call, emit func(i int, r schema.Response)) {
	// Attributes are set only on spans that record: with tracing off a
	// call costs no attribute at all.
	ctx, batch := s.tracer.Start(ctx, "toolbus.batch", trace.WithSpanKind(trace.SpanKindServer))
	if batch.IsRecording() {
		batch.SetAttributes(attribute.String("rpc.system", "jsonrpc"), attribute.Int("toolbus.batch.size", len(calls)))
	}
	defer batch.End()
	if s.metrics != nil {
		s.metrics.batchSize.Observe(float64(len(calls)))
	}
	open := make([]watched, len(calls))
	for i := range calls {
		c := &calls[i]
		label := s.methodLabel(c.Method)
		cctx, span := s.tracer.Start(ctx, "toolbus.call "+label, trace.WithSpanKind(trace.SpanKindClient))
		if span.IsRecording() {
			span.SetAttributes(attribute.String("rpc.system", "jsonrpc"), attribute.String("rpc.method", c.Method))
			if !c.IsNotification() {
				span.SetAttributes(attribute.String("rpc.jsonrpc.request_id", string(c.ID)))
			}
		}
		if sc := span.SpanContext(); sc.IsValid() {
			carrier := propagation.MapCarrier{}
			traceContext.Inject(cctx, carrier)
			c.TraceParent = carrier["traceparent"]
		}
		open[i] = watched{label: label, span: span, ctx: cctx, start: time.Now()}
		if c.IsNotification() {
			s.countCall(label, "notification")
			continue
		}
		s.stats.Begin(label)
		if s.metrics != nil {
			open[i].lm = s.metrics.forLabel(label)
			open[i].lm.inFlight.Inc()
		}
		s.logMessage(cctx, "request", c.ID, c.Method, c.Params)
	}
	s.inFlight.Add(int64(countAnswers(calls)))
	answers := schema.NewAnswers(calls)
	// Whatever the dispatcher does (panic included), every open call is
	// closed here, so that the in-flight counts return to zero; the
	// server answers such calls itself.
	defer answers.Close(func(i int) {
		if !calls[i].IsNotification() {
			s.inFlight.Add(-1)
			s.finish(open[i].ctx, open[i].label, open[i].lm, &calls[i],
				schema.Response{ID: calls[i].ID, Error: internalError()}, time.Since(open[i].start))
		}
		open[i].span.End() // notifications' spans end with the batch
	})
	next.Dispatch(ctx, calls, func(i int, r schema.Response) {
		answers.Answer(i, func(first bool) {
			if !first {
				emit(i, r) // the server reports and drops it
				return
			}
			op := &open[i]
			c := &calls[i]
			d := time.Since(op.start)
			s.inFlight.Add(-1)
			if r.Error != nil {
				r.Error = withTraceID(r.Error, op.span.SpanContext())
			}
			s.finish(op.ctx, op.label, op.lm, c, r, d)
			if r.Error != nil && op.span.IsRecording() {
				op.span.SetAttributes(attribute.Int("rpc.jsonrpc.error_code", r.Error.Code))
				op.span.SetStatus(codes.Error, r.Error.Message)
			}
			op.span.End()
			emit(i, r)
		})
	})
}

func countAnswers(calls []schema.Call) int {
	n := 0
	for i := range calls {
		if !calls[i].IsNotification() {
			n++
		}
	}
	return n
}

// finish records the end of a call that was dispatched: metrics, the
// dashboard's statistics, recent errors and the message log.
func (s *Server) finish(ctx context.Context, label string, lm *labelMetrics, c *schema.Call, r schema.Response, d time.Duration) {
	if r.Error == nil && len(r.Result) == 0 {
		r.Error = internalError() // what settle will answer
	}
	code := "ok"
	if r.Error != nil {
		r.Error = s.cfg.msglog.HideFailedValue(r.Error)
		code = s.codes.Label(r.Error.Code)
	}
	s.stats.End(label, d, r.Error != nil)
	if lm != nil {
		lm.inFlight.Dec()
		lm.duration.Observe(d.Seconds())
		if r.Error == nil {
			lm.succeeded()
		}
	}
	if r.Error != nil {
		s.countCall(label, code)
	}
	if r.Error != nil {
		s.countError(label, r.Error)
		s.stats.RecordError(callstats.ErrorAnswer{
			ID: string(c.ID), Method: c.Method, Code: r.Error.Code, Message: r.Error.Message,
			TraceID: tracelog.TraceID(ctx), Caller: c.Caller,
		})
		s.logMessage(ctx, "response", c.ID, c.Method, errorBody(r.Error))
		return
	}
	s.logMessage(ctx, "response", c.ID, c.Method, r.Result)
}

// refused records a call of caller the ingress answered without
// dispatching it: a method it never routes, or one admission refused.
// These count in the metrics and the recent errors like any other error
// answer, and carry the caller's trace id, if it sent one. It returns the
// answer to send.
func (s *Server) refused(sc trace.SpanContext, caller string, req *schema.Request, e *schema.Error) *schema.Error {
	label := labelInvalid
	if schema.ValidateMethod(req.Method) == nil && !schema.IsReserved(req.Method) {
		label = s.methodLabel(req.Method)
	}
	s.countCall(label, s.codes.Label(e.Code))
	if req.IsNotification() {
		return e
	}
	e = withTraceID(e, sc)
	s.countError(label, e)
	tid := ""
	if sc.HasTraceID() {
		tid = sc.TraceID().String()
	}
	kept := s.cfg.msglog.HideFailedValue(e)
	s.stats.RecordError(callstats.ErrorAnswer{
		ID: string(req.ID), Method: req.Method, Code: kept.Code, Message: kept.Message, TraceID: tid, Caller: caller,
	})
	return e
}

func (s *Server) countCall(label, code string) {
	if s.metrics != nil {
		s.metrics.calls.WithLabelValues(label, code).Inc()
	}
}

// countError counts the errors the issue of an operator most often is:
// timeouts, calls no worker took, and refusals by a limit.
func (s *Server) countError(label string, e *schema.Error) {
	if s.metrics == nil {
		return
	}
	switch {
	case e.Code == schema.CodeTimeout:
		s.metrics.timeouts.WithLabelValues(label).Inc()
	case isNoResponders(e), isNoWorkers(e):
		s.metrics.noResponders.WithLabelValues(label).Inc()
	default:
		if limit := limitOf(e); limit != "" {
			s.metrics.refused(limit)
		}
	}
}

// countRefusal counts a refusal the ingress makes outside any call: a
// connection closed or turned away by a limit.
func (s *Server) countRefusal(limit string) {
	if s.metrics != nil {
		s.metrics.refused(limit)
	}
}

// limitOf returns the limit an error names in data.limit, or "". Only the
// codes with which toolbus refuses for a limit are read.
func limitOf(e *schema.Error) string {
	switch e.Code {
	case schema.CodeOverloaded, schema.CodeUnavailable, schema.CodeLimitExceeded:
		return e.Limit()
	}
	return ""
}

// methodLabel returns the label calls of method are counted under. With
// discovery, a method no worker ever advertised is "_unknown"; otherwise
// the first [DefaultMetricsMaxMethods] names seen get their own label and
// the rest share "_other".
func (s *Server) methodLabel(method string) string {
	if schema.IsReserved(method) {
		if s.router != nil && s.router.extension(method) != nil {
			return method // the ingress's own methods are a fixed few
		}
		return labelInvalid
	}
	if s.cfg.registry != nil && !s.cfg.registry.Known(method) {
		return labelUnknown
	}
	return s.labels.Label(method)
}

// withTraceID returns e with "trace_id" added to its data, when the call
// was traced and its data is an object (or absent) without one. A tool's
// own data of another JSON type is left as it is. e itself is not changed:
// it may be shared.
func withTraceID(e *schema.Error, sc trace.SpanContext) *schema.Error {
	if !sc.HasTraceID() {
		return e
	}
	tid := sc.TraceID().String()
	data := bytes.TrimSpace(e.Data)
	out := *e
	switch {
	case len(data) == 0 || bytes.Equal(data, []byte("null")):
		out.Data = json.RawMessage(`{"trace_id":"` + tid + `"}`)
	case data[0] == '{':
		var probe map[string]json.RawMessage
		if json.Unmarshal(data, &probe) != nil {
			return e
		}
		if _, ok := probe["trace_id"]; ok {
			return e
		}
		inner := bytes.TrimSpace(data[1:])
		b := make([]byte, 0, len(data)+48)
		b = append(b, `{"trace_id":"`...)
		b = append(b, tid...)
		b = append(b, '"')
		if len(inner) > 0 && inner[0] != '}' {
			b = append(b, ',')
		}
		b = append(b, inner...)
		out.Data = b
	default:
		return e
	}
	return &out
}

// traced extracts the caller's W3C trace context from the request's
// headers, so that the ingress's spans join the agent's trace.
func traced(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("traceparent") != "" {
			r = r.WithContext(traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
		}
		next.ServeHTTP(w, r)
	})
}

// logCallAttrs are the attributes every line about one call carries.
func logCallAttrs(ctx context.Context, id json.RawMessage, method string) []slog.Attr {
	attrs := []slog.Attr{slog.String("id", string(id)), slog.String("method", method)}
	if tid := tracelog.TraceID(ctx); tid != "" {
		attrs = append(attrs, slog.String("trace_id", tid))
	}
	return attrs
}

// isNoResponders reports whether e is the dispatcher's answer for a call
// no worker was subscribed to.
func isNoResponders(e *schema.Error) bool {
	return e.Code == schema.CodeMethodNotFound && e.Reason() == schema.ReasonNoResponders
}

// isNoWorkers reports whether e is discovery's answer for a known method
// no worker serves now.
func isNoWorkers(e *schema.Error) bool {
	return e.Code == schema.CodeUnavailable && e.Reason() == schema.ReasonNoWorkers
}
