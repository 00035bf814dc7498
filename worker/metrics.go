package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/internal/callstats"
)

// WithMetrics registers the runtime's Prometheus metrics with reg. Default:
// none are registered and the call path does not touch Prometheus at all.
//
// Every metric has the label method, which is the name or pattern a handler
// was registered under ("math.*", never the "math.add" a call named), so
// that the number of series stays that of the handlers:
//
//	toolbus_worker_calls_total{method,code}        counter: handler runs, by answer;
//	                                               code is "ok" for a result, else the
//	                                               JSON-RPC error code, e.g. "-32000", "2001"
//	toolbus_worker_call_duration_seconds{method}   histogram: time in the handler
//	toolbus_worker_in_flight{method}               gauge: handlers running now
//	toolbus_worker_refused_total{method,reason}    counter: calls whose handler never ran
//	toolbus_worker_orphaned_total{method}          counter: calls canceled because nobody
//	                                               listened for their answer any more
//	toolbus_worker_answers_dropped_total{method}   counter: messages on the answer subject
//	                                               of a question ([Ask]) that were not its
//	                                               answer: sealed with another key (a forgery)
//	                                               or naming another question
//
// The reasons of a refusal are "invalid" (the message could not be
// decoded), "shutdown" (the runtime is stopping), "late" (past its deadline
// on arrival), "busy" (every slot taken, refused at once, see
// [Concurrency]), and for a call that waited for a slot and gave up,
// "timeout" (its deadline passed) or "canceled" (the client canceled it).
// A call is orphaned when its ingress died or left before the answer
// ([ErrCallerGone]); its handler's run is counted in calls_total as well.
// Calls run by [Runtime.Invoke] are counted like calls over the bus.
//
// Runtimes of one process may share reg: the second finds the collectors the
// first registered and counts into the same series, so a method served by
// both is counted once per call. A collector of the same name but another
// kind or other labels already in reg makes [New] fail.
func WithMetrics(reg prometheus.Registerer) Option {
	return func(c *config) error {
		if reg == nil {
			return errors.New("worker: nil metrics registerer")
		}
		c.registerer = reg
		return nil
	}
}

// Reasons a call's handler did not run, the reason label of
// toolbus_worker_refused_total.
type refusal int

const (
	refusedInvalid refusal = iota
	refusedShutdown
	refusedLate
	refusedBusy
	refusedTimeout
	refusedCanceled
	numRefusals
)

var refusalReasons = [numRefusals]string{
	refusedInvalid:  "invalid",
	refusedShutdown: "shutdown",
	refusedLate:     "late",
	refusedBusy:     "busy",
	refusedTimeout:  "timeout",
	refusedCanceled: "canceled",
}

// metrics holds the collectors of a runtime, which may be shared with other
// runtimes registered with the same registerer.
type metrics struct {
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inFlight *prometheus.GaugeVec
	refused  *prometheus.CounterVec
	orphaned *prometheus.CounterVec
	dropped  *prometheus.CounterVec
	// codes bounds the code label: a tool may answer any code.
	codes *callstats.Codes
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	calls, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolbus_worker_calls_total",
		Help: `Calls whose handler ran, by the pattern it was registered under and the answer: "ok" or the JSON-RPC error code.`,
	}, []string{"method", "code"}))
	if err != nil {
		return nil, err
	}
	duration, err := register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "toolbus_worker_call_duration_seconds",
		Help:    "Time spent in the handler, by the pattern it was registered under.",
		Buckets: prometheus.ExponentialBucketsRange(0.0005, 60, 16),
	}, []string{"method"}))
	if err != nil {
		return nil, err
	}
	inFlight, err := register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "toolbus_worker_in_flight",
		Help: "Handlers running now, by the pattern they were registered under.",
	}, []string{"method"}))
	if err != nil {
		return nil, err
	}
	refused, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolbus_worker_refused_total",
		Help: "Calls whose handler did not run, by the pattern it was registered under and why: invalid, shutdown, late, busy, timeout, canceled.",
	}, []string{"method", "reason"}))
	if err != nil {
		return nil, err
	}
	orphaned, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolbus_worker_orphaned_total",
		Help: "Calls canceled because nobody listened for their answer any more (their ingress was gone), by the pattern it was registered under.",
	}, []string{"method"}))
	if err != nil {
		return nil, err
	}
	dropped, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolbus_worker_answers_dropped_total",
		Help: "Messages on the answer subject of a question that were not its answer (sealed with another key, or naming another question), by the pattern it was registered under.",
	}, []string{"method"}))
	if err != nil {
		return nil, err
	}
	return &metrics{calls: calls, duration: duration, inFlight: inFlight, refused: refused, orphaned: orphaned,
		dropped: dropped, codes: &callstats.Codes{}}, nil
}

// register registers c with reg, or returns the collector of the same
// description registered before, so that runtimes can share a registry.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	var zero C
	return zero, fmt.Errorf("worker: register metrics: %w", err)
}

// forRoute returns the series of pattern, made now so that they are
// exported at zero before the first call. A nil *metrics returns nil.
func (m *metrics) forRoute(pattern string) *routeMetrics {
	if m == nil {
		return nil
	}
	labels := prometheus.Labels{"method": pattern}
	rm := &routeMetrics{
		calls:    m.calls.MustCurryWith(labels),
		codes:    m.codes,
		duration: m.duration.With(labels),
		inFlight: m.inFlight.With(labels),
		orphaned: m.orphaned.With(labels),
		dropped:  m.dropped.With(labels),
	}
	rm.ok = rm.calls.WithLabelValues("ok")
	for i, reason := range refusalReasons {
		rm.refused[i] = m.refused.WithLabelValues(pattern, reason)
	}
	return rm
}

// refusalOf tells why a call that waited for a slot gave up, from the error
// of its context.
func (rt *Runtime) refusalOf(err error) refusal {
	switch {
	case rt.ctx.Err() != nil:
		return refusedShutdown
	case errors.Is(err, context.DeadlineExceeded):
		return refusedTimeout
	}
	return refusedCanceled
}
