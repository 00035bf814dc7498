package jobs

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/internal/callstats"
	"github.com/toolbus/toolbus/schema"
)

// Bounds of the Prometheus metrics.
const (
	// MaxMethodLabels is how many distinct method label values one
	// [Counters] keeps: submit takes any well-formed method name, served or
	// not, so the labels must not grow with what callers send. Methods
	// first seen past it are counted under [OtherMethod].
	MaxMethodLabels = 200
	// OtherMethod is the method label of the methods past
	// [MaxMethodLabels]. It is a well-formed method name, so a method of
	// that very name shares its series.
	OtherMethod = "_other"
	// StatsScrapeTimeout bounds the [Service.Stats] call of one scrape.
	StatsScrapeTimeout = 2 * time.Second
	// StatsCacheTTL is how long the collector of [Service.Collector]
	// answers scrapes from its last [Service.Stats] call, so that frequent
	// scrapes, or several Prometheus servers, cost one call.
	StatsCacheTTL = 5 * time.Second
)

// Counters counts jobs as they are submitted and as they end, and is the
// Prometheus collector of
//
//   - toolbus_jobs_submitted_total{method}: jobs queued by a submit (a
//     submit answered from its idempotency key queues nothing);
//   - toolbus_jobs_finished_total{method,state}: jobs moved to a final
//     state: succeeded or failed by a [Runner], canceled by a [Service].
//
// A [Service] and a [Runner] each count into their own unless given one
// with [WithCounters] or [WithRunnerCounters]. A process that runs both
// should give them the same Counters and register it once (as part of
// [Service.Collector]): a registry takes each metric name from one
// collector only. Make one with [NewCounters]; it is safe for concurrent
// use.
type Counters struct {
	submitted *prometheus.CounterVec
	finished  *prometheus.CounterVec
	methods   callstats.Names
}

var _ prometheus.Collector = (*Counters)(nil)

// NewCounters returns counters at zero.
func NewCounters() *Counters {
	return &Counters{
		submitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolbus_jobs_submitted_total",
			Help: "Jobs queued by rpc.jobs.submit (idempotent replays excluded), by method.",
		}, []string{"method"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolbus_jobs_finished_total",
			Help: "Jobs moved to a final state (succeeded, failed, canceled), by method and state.",
		}, []string{"method", "state"}),
		methods: callstats.Names{Max: MaxMethodLabels, Other: OtherMethod},
	}
}

// Describe implements [prometheus.Collector].
func (c *Counters) Describe(ch chan<- *prometheus.Desc) {
	c.submitted.Describe(ch)
	c.finished.Describe(ch)
}

// Collect implements [prometheus.Collector].
func (c *Counters) Collect(ch chan<- prometheus.Metric) {
	c.submitted.Collect(ch)
	c.finished.Collect(ch)
}

func (c *Counters) addSubmitted(method string) {
	c.submitted.WithLabelValues(c.label(method)).Inc()
}

func (c *Counters) addFinished(method string, state schema.JobState) {
	c.finished.WithLabelValues(c.label(method), string(state)).Inc()
}

// label is the method label of method: itself while fewer than
// [MaxMethodLabels] methods have been seen, [OtherMethod] after.
func (c *Counters) label(method string) string { return c.methods.Label(method) }

// WithCounters makes the service count the jobs it queues and cancels into
// c (default: counters of its own, see [Counters]).
func WithCounters(c *Counters) Option {
	return func(cfg *config) error {
		if c == nil {
			return errors.New("jobs: nil counters")
		}
		cfg.counters = c
		return nil
	}
}

// WithRunnerCounters makes the runner count the jobs it ends into c
// (default: counters of its own, see [Counters]).
func WithRunnerCounters(c *Counters) RunnerOption {
	return func(cfg *runnerConfig) error {
		if c == nil {
			return errors.New("jobs: nil counters")
		}
		cfg.counters = c
		return nil
	}
}

// Collector returns the runner's Prometheus collector: its [Counters].
// Register it where no [Service.Collector] already holds the same
// counters.
func (r *Runner) Collector() prometheus.Collector { return r.cfg.counters }

// Collector returns the service's Prometheus collector. On top of the
// service's [Counters] it exports, from [Service.Stats]:
//
//   - toolbus_jobs{state}: kept jobs by state, one series for each of
//     queued, running, succeeded, failed and canceled (0 when none);
//   - toolbus_jobs_open{method,state}: jobs not ended, by method, with a
//     series for each of queued and running, for every method label with
//     such a job (none for the others): each tool's backlog, which an
//     autoscaler reads to start workers (deploy/README.md). The method
//     labels are those of the [Counters], bounded the same way;
//   - toolbus_jobs_stats_truncated: 1 when more jobs are kept than
//     [MaxStatsRecords], so toolbus_jobs and toolbus_jobs_open count only
//     the newest, else 0.
//
// Every ingress reads the same records, so each exports the cluster's
// counts: across replicas take the largest, not the sum.
//
// A scrape calls Stats, bounded by [StatsScrapeTimeout], unless the last
// call was less than [StatsCacheTTL] ago: then it answers from that call,
// so frequent scrapes cost one call; concurrent scrapes wait for one call.
// When Stats fails, the two gauges are left out of the scrape (until the
// next call) and a warning is logged, rather than reporting an invalid
// metric: the jobs metrics are mixed into a process's others, and an
// invalid metric fails the whole scrape under promhttp's default error
// handling, as client_golang's process collector avoids by default
// (ProcessCollectorOpts.ReportErrors). Alert on the gauges' absence.
//
// Every call returns the same collector.
func (s *Service) Collector() prometheus.Collector { return s.collector }

// statsCollector is the collector of [Service.Collector].
type statsCollector struct {
	counters  *Counters
	log       *slog.Logger
	jobs      *prometheus.Desc
	open      *prometheus.Desc
	truncated *prometheus.Desc
	// stats and now are Service.Stats and time.Now, replaced in tests.
	stats func(context.Context, int) (Stats, error)
	now   func() time.Time

	mu   sync.Mutex
	last *Stats // nil when the last call failed
	at   time.Time
}

var _ prometheus.Collector = (*statsCollector)(nil)

func newStatsCollector(s *Service) *statsCollector {
	return &statsCollector{
		counters: s.cfg.counters,
		log:      s.log,
		jobs: prometheus.NewDesc("toolbus_jobs",
			"Jobs kept in the record bucket, by state (among the newest records only when toolbus_jobs_stats_truncated is 1).",
			[]string{"state"}, nil),
		open: prometheus.NewDesc("toolbus_jobs_open",
			"Jobs not ended (queued or running), by method and state: each tool's backlog, the cluster's as every ingress sees it (among the newest records only when toolbus_jobs_stats_truncated is 1).",
			[]string{"method", "state"}, nil),
		truncated: prometheus.NewDesc("toolbus_jobs_stats_truncated",
			"1 when more jobs are kept than one look reads, so toolbus_jobs counts only the newest; else 0.",
			nil, nil),
		stats: s.Stats,
		now:   time.Now,
	}
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	c.counters.Describe(ch)
	ch <- c.jobs
	ch <- c.open
	ch <- c.truncated
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	c.counters.Collect(ch)
	st := c.read()
	if st == nil {
		return
	}
	for _, state := range allStates {
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(st.ByState[state]), string(state))
	}
	// Methods past the label bound share OtherMethod's series.
	open := make(map[string]OpenJobs, len(st.Open))
	for method, o := range st.Open {
		label := c.counters.label(method)
		sum := open[label]
		sum.Queued += o.Queued
		sum.Running += o.Running
		open[label] = sum
	}
	for label, o := range open {
		ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(o.Queued), label, string(schema.JobQueued))
		ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(o.Running), label, string(schema.JobRunning))
	}
	truncated := 0.0
	if st.Truncated {
		truncated = 1
	}
	ch <- prometheus.MustNewConstMetric(c.truncated, prometheus.GaugeValue, truncated)
}

// read returns the cached stats, or calls Stats when they are older than
// the cache's TTL; nil when that call failed. A failure is cached too, so
// that JetStream being away costs one timeout per TTL, not per scrape.
func (c *statsCollector) read() *Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if !c.at.IsZero() && now.Sub(c.at) < StatsCacheTTL {
		return c.last
	}
	// A scrape carries no context; its own timeout bounds the call.
	ctx, cancel := context.WithTimeout(context.Background(), StatsScrapeTimeout)
	defer cancel()
	st, err := c.stats(ctx, 0)
	c.at, c.last = now, nil
	if err != nil {
		c.log.Warn("jobs metrics left out of a scrape", "err", err)
		return nil
	}
	c.last = &st
	return c.last
}
