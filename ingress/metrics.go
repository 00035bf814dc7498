package ingress

import (
	"github.com/toolbus/toolbus/discovery"

	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/internal/callstats"
)

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
}

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
// and method names, never bodies or callers. With [WithRegistry],
// toolbus_workers{method} counts the live workers per method.
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
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:          promLogger{s},
		Registry:          reg,
		EnableOpenMetrics: true,
	}))
	return nil
}

type promLogger struct{ s *Server }

func (p promLogger) Println(v ...any) { p.s.log.Warn("metrics", "error", v) }
