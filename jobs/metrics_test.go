package jobs_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
)

// gather scrapes c once through a pedantic registry, which also checks
// that what c sends matches what it describes.
func gather(t *testing.T, c prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatalf("Register: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	return byName
}

// sample is the value of the series of name whose labels are the pairs of
// labels ("state", "queued", ...), and whether the scrape holds it.
func sample(mfs map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	for _, m := range mfs[name].GetMetric() {
		if len(m.GetLabel())*2 != len(labels) {
			continue
		}
		match := true
		for i, l := range m.GetLabel() {
			// The registry sorts labels by name, as the callers list them.
			match = match && l.GetName() == labels[2*i] && l.GetValue() == labels[2*i+1]
		}
		if !match {
			continue
		}
		if g := m.GetGauge(); g != nil {
			return g.GetValue(), true
		}
		return m.GetCounter().GetValue(), true
	}
	return 0, false
}

// fakeClock is a clock tests move by hand.
type fakeClock struct{ off atomic.Int64 }

func (c *fakeClock) now() time.Time {
	return time.Unix(1_700_000_000, 0).Add(time.Duration(c.off.Load()))
}
func (c *fakeClock) advance(d time.Duration) { c.off.Add(int64(d)) }

func TestCollector(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	counters := jobs.NewCounters()
	s := newService(t, js, jobs.WithCounters(counters))
	clock := &fakeClock{}
	reads := jobs.HookCollector(s, clock.now)

	// Every state is there from the first scrape, at 0.
	const empty = `
# HELP toolbus_jobs Jobs kept in the record bucket, by state (among the newest records only when toolbus_jobs_stats_truncated is 1).
# TYPE toolbus_jobs gauge
toolbus_jobs{state="canceled"} 0
toolbus_jobs{state="failed"} 0
toolbus_jobs{state="input_required"} 0
toolbus_jobs{state="queued"} 0
toolbus_jobs{state="running"} 0
toolbus_jobs{state="succeeded"} 0
# HELP toolbus_jobs_stats_truncated 1 when more jobs are kept than one look reads, so toolbus_jobs counts only the newest; else 0.
# TYPE toolbus_jobs_stats_truncated gauge
toolbus_jobs_stats_truncated 0
`
	if err := testutil.CollectAndCompare(s.Collector(), strings.NewReader(empty),
		"toolbus_jobs", "toolbus_jobs_stats_truncated", "toolbus_jobs_submitted_total", "toolbus_jobs_finished_total"); err != nil {
		t.Errorf("first scrape: %v", err)
	}

	startRunner(t, js, newRuntime(t, nc, outcomeTools), jobs.WithRunnerCounters(counters))
	waitState(t, s, submit(t, s, "echo", `{}`), schema.JobSucceeded)
	waitState(t, s, submit(t, s, "fail", `{}`), schema.JobFailed)
	submit(t, s, "nobody.serves", `{}`)
	cancelJob(t, s, submit(t, s, "nobody.serves", `{}`))
	// Submits replayed from an idempotency key queue nothing.
	var keyed schema.JobSubmitResult
	for range 3 {
		res, rpcErr := rpc(t, s, "", schema.MethodJobsSubmit, `{"method":"echo","idempotency_key":"k"}`)
		if rpcErr != nil {
			t.Fatalf("submit with a key: %v", rpcErr)
		}
		json.Unmarshal(res, &keyed)
	}
	waitState(t, s, keyed.ID, schema.JobSucceeded)
	// A runner counts a job once its record is written, so a little after
	// the record says it ended.
	toolbustest.Eventually(t, func() bool {
		v, _ := sample(gather(t, s.Collector()), "toolbus_jobs_finished_total", "method", "echo", "state", "succeeded")
		return v == 2
	}, "the runner counts the second echo job")

	// Still within the cache's TTL: the gauges have not moved, the
	// counters have.
	mfs := gather(t, s.Collector())
	if v, _ := sample(mfs, "toolbus_jobs", "state", "queued"); v != 0 {
		t.Errorf("cached toolbus_jobs{state=queued} = %v, want 0", v)
	}
	if v, _ := sample(mfs, "toolbus_jobs_submitted_total", "method", "echo"); v != 2 {
		t.Errorf("toolbus_jobs_submitted_total{method=echo} = %v, want 2", v)
	}

	clock.advance(jobs.StatsCacheTTL)
	mfs = gather(t, s.Collector())
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"toolbus_jobs", []string{"state", "succeeded"}, 2},
		{"toolbus_jobs", []string{"state", "failed"}, 1},
		{"toolbus_jobs", []string{"state", "queued"}, 1},
		{"toolbus_jobs", []string{"state", "canceled"}, 1},
		{"toolbus_jobs", []string{"state", "running"}, 0},
		{"toolbus_jobs_stats_truncated", nil, 0},
		{"toolbus_jobs_open", []string{"method", "nobody.serves", "state", "queued"}, 1},
		{"toolbus_jobs_open", []string{"method", "nobody.serves", "state", "running"}, 0},
		{"toolbus_jobs_submitted_total", []string{"method", "echo"}, 2},
		{"toolbus_jobs_submitted_total", []string{"method", "fail"}, 1},
		{"toolbus_jobs_submitted_total", []string{"method", "nobody.serves"}, 2},
		{"toolbus_jobs_finished_total", []string{"method", "echo", "state", "succeeded"}, 2},
		{"toolbus_jobs_finished_total", []string{"method", "fail", "state", "failed"}, 1},
		{"toolbus_jobs_finished_total", []string{"method", "nobody.serves", "state", "canceled"}, 1},
	} {
		if got, ok := sample(mfs, tc.name, tc.labels...); !ok || got != tc.want {
			t.Errorf("%s%v = %v (present %v), want %v", tc.name, tc.labels, got, ok, tc.want)
		}
	}
	// Methods whose jobs all ended have no backlog series.
	for _, method := range []string{"echo", "fail"} {
		if _, ok := sample(mfs, "toolbus_jobs_open", "method", method, "state", "queued"); ok {
			t.Errorf("toolbus_jobs_open{method=%s} scraped, want no series for a method without open jobs", method)
		}
	}
	if n := reads(); n != 2 {
		t.Errorf("Stats calls after three scrapes over two TTLs = %d, want 2", n)
	}
}

func TestCollectorCache(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js)
	clock := &fakeClock{}
	reads := jobs.HookCollector(s, clock.now)
	queued := func() float64 {
		t.Helper()
		v, ok := sample(gather(t, s.Collector()), "toolbus_jobs", "state", "queued")
		if !ok {
			t.Fatal("scrape without toolbus_jobs{state=queued}")
		}
		return v
	}

	for _, tc := range []struct {
		name    string
		advance time.Duration
		submit  bool
		queued  float64
		reads   int64
	}{
		{name: "first scrape reads", queued: 0, reads: 1},
		{name: "scrape within the TTL answers from the cache", advance: time.Second, submit: true, queued: 0, reads: 1},
		{name: "just before the TTL", advance: jobs.StatsCacheTTL - time.Second - time.Nanosecond, queued: 0, reads: 1},
		{name: "at the TTL reads again", advance: time.Nanosecond, queued: 1, reads: 2},
		{name: "and caches again", submit: true, queued: 1, reads: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock.advance(tc.advance)
			if tc.submit {
				submit(t, s, "nobody.serves", `{}`)
			}
			if got := queued(); got != tc.queued {
				t.Errorf("toolbus_jobs{state=queued} = %v, want %v", got, tc.queued)
			}
			if got := reads(); got != tc.reads {
				t.Errorf("Stats calls = %d, want %d", got, tc.reads)
			}
		})
	}
}

func TestCollectorStatsFails(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	s := newService(t, js)
	clock := &fakeClock{}
	jobs.HookCollector(s, clock.now)
	submit(t, s, "nobody.serves", `{}`)
	nc.Close()
	// The scrape goes on without the gauges: the counters are still there.
	mfs := gather(t, s.Collector())
	if _, ok := mfs["toolbus_jobs"]; ok {
		t.Error("toolbus_jobs scraped without JetStream, want it left out")
	}
	if v, _ := sample(mfs, "toolbus_jobs_submitted_total", "method", "nobody.serves"); v != 1 {
		t.Errorf("toolbus_jobs_submitted_total{method=nobody.serves} = %v, want 1", v)
	}
}

func TestRunnerCollector(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	s := newService(t, js)
	r := startRunner(t, js, newRuntime(t, nc, echoTools))
	waitState(t, s, submit(t, s, "echo", `{}`), schema.JobSucceeded)
	// The runner counts what it ends; the submit is the service's.
	if got := testutil.ToFloat64(r.Collector()); got != 1 {
		t.Errorf("runner's toolbus_jobs_finished_total = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(s.Collector(), "toolbus_jobs_finished_total"); got != 0 {
		t.Errorf("service's toolbus_jobs_finished_total series = %d, want 0", got)
	}
}

func TestMethodLabelCap(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js)
	for i := range jobs.MaxMethodLabels + 2 {
		submit(t, s, fmt.Sprintf("m%d", i), `{}`)
	}
	submit(t, s, "m0", `{}`)
	mfs := gather(t, s.Collector())
	if got := len(mfs["toolbus_jobs_submitted_total"].GetMetric()); got != jobs.MaxMethodLabels+1 {
		t.Errorf("toolbus_jobs_submitted_total has %d series, want %d and %s", got, jobs.MaxMethodLabels, jobs.OtherMethod)
	}
	for _, tc := range []struct {
		method string
		want   float64
	}{
		{"m0", 2},
		{fmt.Sprint("m", jobs.MaxMethodLabels-1), 1},
		{jobs.OtherMethod, 2},
	} {
		if got, _ := sample(mfs, "toolbus_jobs_submitted_total", "method", tc.method); got != tc.want {
			t.Errorf("toolbus_jobs_submitted_total{method=%s} = %v, want %v", tc.method, got, tc.want)
		}
		// Every job is queued (nobody serves them), under the same
		// bounded labels.
		if got, _ := sample(mfs, "toolbus_jobs_open", "method", tc.method, "state", "queued"); got != tc.want {
			t.Errorf("toolbus_jobs_open{method=%s,state=queued} = %v, want %v", tc.method, got, tc.want)
		}
	}
	if got := len(mfs["toolbus_jobs_open"].GetMetric()); got != 2*(jobs.MaxMethodLabels+1) {
		t.Errorf("toolbus_jobs_open has %d series, want queued and running of %d labels and %s", got, jobs.MaxMethodLabels, jobs.OtherMethod)
	}
}

func TestCountersOptions(t *testing.T) {
	e := startServer(t, "")
	nc, js := connect(t, e)
	if _, err := jobs.New(js, jobs.WithCounters(nil)); err == nil {
		t.Error("New(WithCounters(nil)) succeeded, want an error")
	}
	if _, err := jobs.NewRunner(js, newRuntime(t, nc, echoTools), jobs.WithRunnerCounters(nil)); err == nil {
		t.Error("NewRunner(WithRunnerCounters(nil)) succeeded, want an error")
	}
}
