package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/discovery"
	"github.com/toolbus/toolbus/ingress/msglog"
	"github.com/toolbus/toolbus/internal/callstats"
	"github.com/toolbus/toolbus/internal/fair"
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

// The options of the spans of a batch and of its calls, made once: a
// slice passed to an interface's variadic method is allocated at each
// call otherwise.
var (
	batchSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	callSpan  = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
)

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
	ctx, batch := s.tracer.Start(ctx, "toolbus.batch", batchSpan...)
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
		// A notification's label gets no series of calls in flight or
		// of durations, so it has no metrics of its own.
		var lm *labelMetrics
		name := ""
		if s.metrics != nil && !c.IsNotification() {
			lm = s.metrics.forLabel(label)
			name = lm.spanName
		} else {
			name = callSpanName(label)
		}
		cctx, span := s.tracer.Start(ctx, name, callSpan...)
		if span.IsRecording() {
			span.SetAttributes(attribute.String("rpc.system", "jsonrpc"), attribute.String("rpc.method", c.Method))
			if !c.IsNotification() {
				span.SetAttributes(attribute.String("rpc.jsonrpc.request_id", string(c.ID)))
			}
		}
		if tp := tracelog.TraceParent(span.SpanContext()); tp != "" {
			c.TraceParent = tp
		}
		open[i] = watched{label: label, span: span, ctx: cctx, start: time.Now()}
		if c.IsNotification() {
			s.countCall(label, "notification")
			continue
		}
		s.stats.Begin(label)
		if lm != nil {
			open[i].lm = lm
			lm.inFlight.Inc()
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
	code, errCode := "ok", 0
	if r.Error != nil {
		r.Error = s.cfg.msglog.HideFailedValue(r.Error)
		code, errCode = s.codes.Label(r.Error.Code), r.Error.Code
	}
	s.stats.End(label, d, errCode)
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

// metrics are the ingress's Prometheus collectors. Every method label is
// bounded (see [DefaultMetricsMaxMethods]).
type metrics struct {
	// byLabel caches each method label's series (*labelMetrics), so that
	// a call resolves them once rather than one by one.
	byLabel      sync.Map
	calls        *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	inFlight     *prometheus.GaugeVec
	batchSize    prometheus.Histogram
	timeouts     *prometheus.CounterVec
	noResponders *prometheus.CounterVec
	// refusals counts answers that name a limit (data.limit), by limit.
	refusals *prometheus.CounterVec
	limits   callstats.Names
}

func newMetrics() *metrics {
	return &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolbus_ingress_calls_total",
			Help: `Calls answered by the ingress, by method and outcome: code is "ok", "notification", or the JSON-RPC error code.`,
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "toolbus_ingress_call_duration_seconds",
			Help:    "Time from dispatching a call to its answer, as the ingress sees it.",
			Buckets: prometheus.ExponentialBucketsRange(0.0005, 300, 20),
		}, []string{"method"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "toolbus_ingress_in_flight",
			Help: "Calls dispatched and not yet answered.",
		}, []string{"method"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "toolbus_ingress_batch_size",
			Help:    "Calls per dispatched message (1 for a single request).",
			Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000},
		}),
		timeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolbus_ingress_timeouts_total",
			Help: "Calls answered -32001 because they missed their deadline.",
		}, []string{"method"}),
		noResponders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolbus_ingress_no_responders_total",
			Help: "Calls no worker was subscribed to take.",
		}, []string{"method"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolbus_limit_refusals_total",
			Help: "Calls, messages and connections refused or closed because a limit was reached, by the limit's name (as data.limit says it).",
		}, []string{"limit"}),
		limits: callstats.Names{Max: maxLimitLabels, Other: labelOther},
	}
}

// maxLimitLabels bounds the limit names counted apart: toolbus has a few
// dozen, and a tool's own error data must not grow the metrics.
const maxLimitLabels = 64

// refused counts one refusal under limit.
func (m *metrics) refused(limit string) {
	m.refusals.WithLabelValues(m.limits.Label(limit)).Inc()
}

// labelMetrics are the series of one method label that every call uses.
type labelMetrics struct {
	inFlight prometheus.Gauge
	duration prometheus.Observer
	// ok is made with the label's first success, so that a label only
	// ever answered with errors has no series of successes.
	okOnce sync.Once
	ok     prometheus.Counter
	calls  *prometheus.CounterVec
	label  string
	// spanName names the spans of the label's calls, made once.
	spanName string
}

// callSpanName returns the name of the span of a call labelled label.
func callSpanName(label string) string { return "toolbus.call " + label }

// succeeded counts one call answered with a result.
func (lm *labelMetrics) succeeded() {
	lm.okOnce.Do(func() { lm.ok = lm.calls.WithLabelValues(lm.label, "ok") })
	lm.ok.Inc()
}

// forLabel returns the series of label, made on first use. Labels are
// bounded (see [DefaultMetricsMaxMethods]), and so is the cache.
func (m *metrics) forLabel(label string) *labelMetrics {
	if v, ok := m.byLabel.Load(label); ok {
		return v.(*labelMetrics)
	}
	v, _ := m.byLabel.LoadOrStore(label, &labelMetrics{
		inFlight: m.inFlight.WithLabelValues(label),
		duration: m.duration.WithLabelValues(label),
		calls:    m.calls,
		label:    label,
		spanName: callSpanName(label),
	})
	return v.(*labelMetrics)
}

func (m *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.calls, m.duration, m.inFlight, m.batchSize, m.timeouts, m.noResponders, m.refusals} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// DefaultMetricsMaxCallers is how many callers get a label of their own
// in the fairness series when callers are named ([WithMetricsCallers]);
// further callers are counted under "_other", so that the series stay
// bounded however many callers there are. The caller of an ingress
// without authentication is "_anonymous".
const DefaultMetricsMaxCallers = 100

// Caller labels of the fairness series.
const (
	labelAnonymous  = "_anonymous" // calls without a caller
	labelAllCallers = "_all"       // every caller together, when callers are not named
)

// WithMetricsCallers names each caller in the toolbus_fair_* series of
// GET /metrics, for at most [DefaultMetricsMaxCallers] of them (default
// off). Off, the series count every caller together under caller="_all":
// /metrics is open without credentials, and a caller's name (an API
// key's, a JWT's subject) tells whoever reaches it who uses the ingress
// and how much. The figures of each caller stay with the ingress either
// way, for the dashboard, which shows them to an operator.
func WithMetricsCallers(on bool) Option {
	return func(c *config) error {
		c.metricsCallers = on
		return nil
	}
}

// fairMetrics are the fairness layer's series: each caller's queue, its
// wait, its share of the window and its refusals, and the window itself.
// The series by caller are kept in a registry of their own, for the
// dashboard ([Server.fairGatherer]); /metrics serves them, or the same
// series of every caller together.
type fairMetrics struct {
	callers  callstats.Names
	byCaller sync.Map // caller label -> *fairCallerMetrics

	named  fairVecs
	byName *prometheus.Registry
	// all counts every caller together for /metrics; nil when /metrics
	// names the callers.
	all    *fairCallerMetrics
	public []prometheus.Collector
}

// fairVecs are the fairness series by caller label.
type fairVecs struct {
	queued   *prometheus.GaugeVec
	wait     *prometheus.HistogramVec
	admitted *prometheus.CounterVec
	refused  *prometheus.CounterVec
	expired  *prometheus.CounterVec
	canceled *prometheus.CounterVec
}

func newFairVecs() fairVecs {
	byCaller := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"caller"})
	}
	return fairVecs{
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "toolbus_fair_queued",
			Help: "Calls, and request bodies not parsed yet, waiting in each caller's queue for a seat.",
		}, []string{"caller"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "toolbus_fair_wait_seconds",
			Help:    "Time a call waited in its caller's queue before it was let into the window.",
			Buckets: prometheus.ExponentialBucketsRange(0.0001, 60, 18),
		}, []string{"caller"}),
		admitted: byCaller("toolbus_fair_admitted_total",
			"Calls let into the window, by caller: each caller's share of the ingress."),
		refused: byCaller("toolbus_fair_refused_total",
			"Calls and request bodies refused -32002 because their caller's queue was full (caller_max_queued)."),
		expired: byCaller("toolbus_fair_expired_total",
			"Calls and request bodies answered -32001 because their deadline came while they waited in their caller's queue; none reached a worker."),
		canceled: byCaller("toolbus_fair_canceled_total",
			"Calls and request bodies whose client went away while they waited in their caller's queue."),
	}
}

func (v fairVecs) collectors() []prometheus.Collector {
	return []prometheus.Collector{v.queued, v.wait, v.admitted, v.refused, v.expired, v.canceled}
}

// forLabel returns the series of label.
func (v fairVecs) forLabel(label string) *fairCallerMetrics {
	return &fairCallerMetrics{
		queuedG:   v.queued.WithLabelValues(label),
		waitH:     v.wait.WithLabelValues(label),
		admittedC: v.admitted.WithLabelValues(label),
		refusedC:  v.refused.WithLabelValues(label),
		expiredC:  v.expired.WithLabelValues(label),
		canceledC: v.canceled.WithLabelValues(label),
	}
}

// newFairMetrics returns the series of sched's window and queues, which
// name the callers on /metrics when named is set.
func newFairMetrics(sched *fair.Scheduler[fairRef], named bool) (*fairMetrics, error) {
	m := &fairMetrics{
		callers: callstats.Names{Max: DefaultMetricsMaxCallers, Other: labelOther},
		named:   newFairVecs(),
		byName:  prometheus.NewRegistry(),
	}
	for _, c := range m.named.collectors() {
		if err := m.byName.Register(c); err != nil {
			return nil, err
		}
	}
	if named {
		m.public = m.named.collectors()
	} else {
		all := newFairVecs()
		m.all = all.forLabel(labelAllCallers)
		m.public = all.collectors()
	}
	m.public = append(m.public, &fairWindowCollector{sched: sched})
	return m, nil
}

// register registers the series /metrics serves on reg.
func (m *fairMetrics) register(reg prometheus.Registerer) error {
	for _, c := range m.public {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// forCaller returns the series of caller, made on first use. Caller
// labels are bounded (see [DefaultMetricsMaxCallers]), and so is the
// cache.
func (m *fairMetrics) forCaller(caller string) *fairCallerMetrics {
	if caller == "" {
		caller = labelAnonymous
	}
	label := m.callers.Label(caller)
	if v, ok := m.byCaller.Load(label); ok {
		return v.(*fairCallerMetrics)
	}
	cm := m.named.forLabel(label)
	cm.all = m.all
	v, _ := m.byCaller.LoadOrStore(label, cm)
	return v.(*fairCallerMetrics)
}

// fairCallerMetrics are the fairness series of one caller label, and
// those of every caller together they count into too. Its methods do
// nothing on nil: an ingress without metrics.
type fairCallerMetrics struct {
	queuedG   prometheus.Gauge
	waitH     prometheus.Observer
	admittedC prometheus.Counter
	refusedC  prometheus.Counter
	expiredC  prometheus.Counter
	canceledC prometheus.Counter
	all       *fairCallerMetrics // nil when /metrics names the callers
}

// queued counts n entries into the caller's queue.
func (c *fairCallerMetrics) queued(n int) {
	if c != nil && n > 0 {
		c.queuedG.Add(float64(n))
		c.all.queued(n)
	}
}

// admitted counts an entry out of the queue into the window after wait;
// a body, which is no call, counts in the queue alone.
func (c *fairCallerMetrics) admitted(wait time.Duration, body bool) {
	if c == nil {
		return
	}
	c.queuedG.Dec()
	if !body {
		c.waitH.Observe(wait.Seconds())
		c.admittedC.Inc()
	}
	c.all.admitted(wait, body)
}

// admittedAtOnce counts n calls let into the window without a wait,
// never queued ([fair.Scheduler.AdmitAlone]).
func (c *fairCallerMetrics) admittedAtOnce(n int) {
	if c == nil {
		return
	}
	for range n {
		c.waitH.Observe(0)
	}
	c.admittedC.Add(float64(n))
	c.all.admittedAtOnce(n)
}

// expired counts an entry out of the queue at its deadline.
func (c *fairCallerMetrics) expired() {
	if c != nil {
		c.queuedG.Dec()
		c.expiredC.Inc()
		c.all.expired()
	}
}

// canceled counts an entry out of the queue whose client went away.
func (c *fairCallerMetrics) canceled() {
	if c != nil {
		c.queuedG.Dec()
		c.canceledC.Inc()
		c.all.canceled()
	}
}

// refused counts n entries that did not fit in the queue.
func (c *fairCallerMetrics) refused(n int) {
	if c != nil && n > 0 {
		c.refusedC.Add(float64(n))
		c.all.refused(n)
	}
}

// fairWindowCollector exports the window: its seats, those taken, the
// calls past their hold waiting on workers, and the hold.
type fairWindowCollector struct {
	sched *fair.Scheduler[fairRef]
}

var (
	fairSeatsDesc = prometheus.NewDesc("toolbus_fair_seats",
		"Seats of the fairness window: the calls the ingress works on at once (--fair-seats).", nil, nil)
	fairUsedDesc = prometheus.NewDesc("toolbus_fair_seats_used",
		"Seats of the fairness window taken (an exempt caller's calls may take more than there are).", nil, nil)
	fairWaitingDesc = prometheus.NewDesc("toolbus_fair_waiting",
		"Calls past their hold without an answer: out of the window, waiting on a worker.", nil, nil)
	fairHoldDesc = prometheus.NewDesc("toolbus_fair_hold_seconds",
		"How long a call keeps its seat without an answer before it counts as waiting on a worker (adapts within --fair-hold-min and --fair-hold-max).", nil, nil)
	fairRoundsDesc = prometheus.NewDesc("toolbus_fair_rounds_total",
		"Rounds of --fair-round calls after which the window waited for the ingress to read its connections again, while more than one caller was busy.", nil, nil)
)

func (w *fairWindowCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- fairSeatsDesc
	ch <- fairUsedDesc
	ch <- fairWaitingDesc
	ch <- fairHoldDesc
	ch <- fairRoundsDesc
}

func (w *fairWindowCollector) Collect(ch chan<- prometheus.Metric) {
	st := w.sched.Stats(time.Now())
	ch <- prometheus.MustNewConstMetric(fairSeatsDesc, prometheus.GaugeValue, float64(st.Seats))
	ch <- prometheus.MustNewConstMetric(fairUsedDesc, prometheus.GaugeValue, float64(st.Used))
	ch <- prometheus.MustNewConstMetric(fairWaitingDesc, prometheus.GaugeValue, float64(st.Waiting))
	ch <- prometheus.MustNewConstMetric(fairHoldDesc, prometheus.GaugeValue, st.Hold.Seconds())
	ch <- prometheus.MustNewConstMetric(fairRoundsDesc, prometheus.CounterValue, float64(st.Rounds))
}

// workersCollector exports the registry's live workers per method.
type workersCollector struct {
	reg  *discovery.Registry
	desc *prometheus.Desc
}

func (w *workersCollector) Describe(ch chan<- *prometheus.Desc) { ch <- w.desc }

// Collect reports every method ever advertised, 0 for those whose workers
// have all gone, so that "toolbus_workers == 0" finds them.
func (w *workersCollector) Collect(ch chan<- prometheus.Metric) {
	live := map[string]int{}
	for _, t := range w.reg.Catalog().Tools {
		live[t.Name] = t.Workers
	}
	for _, name := range w.reg.Names() {
		ch <- prometheus.MustNewConstMetric(w.desc, prometheus.GaugeValue, float64(live[name]), name)
	}
}

// WithMetrics registers the ingress's metrics on reg and serves everything
// reg holds at GET /metrics, in the Prometheus text format (or OpenMetrics
// when the scraper asks). The route is open like the probes, even with
// [WithAuth], so that a scraper needs no key: it holds counts, durations
// and method names, never bodies, and no caller's name unless
// [WithMetricsCallers] allows it in the fairness series. With
// [WithRegistry], toolbus_workers{method} counts the live workers per
// method.
func WithMetrics(reg *prometheus.Registry) Option {
	return func(c *config) error {
		if reg == nil {
			return errors.New("ingress: nil metrics registry")
		}
		c.metrics = reg
		return nil
	}
}

// WithTracerProvider sets where the ingress's spans go: one span per
// dispatched message ("toolbus.batch") and one per call ("toolbus.call
// <method>"), whose W3C traceparent travels with the call to the worker.
// Without it the global provider is used (otel.GetTracerProvider), which
// records nothing unless the program installs one. An incoming traceparent
// header makes the batch span a child of the caller's.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) error {
		if tp == nil {
			return errors.New("ingress: nil tracer provider")
		}
		c.tracerProvider = tp
		return nil
	}
}

// setupMetrics registers the collectors and the /metrics route.
func (s *Server) setupMetrics() error {
	reg := s.cfg.metrics
	if reg == nil {
		return nil
	}
	s.metrics = newMetrics()
	if err := s.metrics.register(reg); err != nil {
		return err
	}
	if s.cfg.registry != nil {
		wc := &workersCollector{reg: s.cfg.registry, desc: prometheus.NewDesc("toolbus_workers",
			"Live workers advertising each method (discovery).", []string{"method"}, nil)}
		if err := reg.Register(wc); err != nil {
			return err
		}
	}
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "toolbus_ingress_connections",
		Help: "Connections open on the listeners of Serve, WebSocket connections included (bounded per client address by max_conns_per_addr).",
	}, func() float64 { return float64(s.conns.Open()) })
	if err := reg.Register(open); err != nil {
		return err
	}
	held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "toolbus_ingress_bytes_in_flight",
		Help: "Bytes of answers the ingress holds that are not written to their clients yet (bounded by max_bytes_in_flight, and per caller by caller_max_bytes_in_flight).",
	}, func() float64 { return float64(s.bytes.Total()) })
	if err := reg.Register(held); err != nil {
		return err
	}
	if f := s.cfg.fair; f != nil {
		fm, err := newFairMetrics(f.sched, s.cfg.metricsCallers)
		if err != nil {
			return err
		}
		if err := fm.register(reg); err != nil {
			return err
		}
		f.metrics = fm
	}
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:          promLogger{s},
		Registry:          reg,
		EnableOpenMetrics: true,
	}))
	return nil
}

type promLogger struct{ s *Server }

func (p promLogger) Println(v ...any) { p.s.log.Warn("metrics", "error", v) }

// WithMessageLog turns on logging of the bodies that pass through the
// ingress (see [msglog.Config]): each matching call's params as it is
// dispatched and its result or error as it is answered, one line each at
// level INFO, carrying the call's id, method and trace id. Its redaction
// list also hides a failed value in the recent errors of the dashboard. It
// fails when [msglog.Config.Validate] does.
func WithMessageLog(m msglog.Config) Option {
	return func(c *config) error {
		l, err := msglog.New(m)
		if err != nil {
			return err
		}
		c.msglog = l
		c.logMessages = len(m.Methods) > 0
		return nil
	}
}

// logMessage writes one message log line when the log is on for method.
func (s *Server) logMessage(ctx context.Context, direction string, id json.RawMessage, method string, body json.RawMessage) {
	m := s.cfg.msglog
	if !s.cfg.logMessages || !m.Logs(method) || !s.log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	attrs := logCallAttrs(ctx, id, method)
	attrs = append(attrs, slog.String("direction", direction))
	attrs = append(attrs, m.Body(body)...)
	s.log.LogAttrs(ctx, slog.LevelInfo, "message", attrs...)
}

// errorBody is the logged form of an error answer.
func errorBody(e *schema.Error) json.RawMessage {
	b, err := json.Marshal(e)
	if err != nil {
		return nil
	}
	return b
}
