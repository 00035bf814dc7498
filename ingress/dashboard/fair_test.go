package dashboard

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/internal/callstats"
	"github.com/toolbus/toolbus/internal/fair"
)

// fairSeries are the ingress's fairness series, as package ingress
// registers them, for a test to count into.
type fairSeries struct {
	reg                                  *prometheus.Registry
	admitted, refused, expired, canceled *prometheus.CounterVec
	wait                                 *prometheus.HistogramVec
}

func newFairSeries(t *testing.T) *fairSeries {
	t.Helper()
	counter := func(name string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: name}, []string{"caller"})
	}
	s := &fairSeries{
		reg:      prometheus.NewRegistry(),
		admitted: counter(seriesAdmitted), refused: counter(seriesRefused),
		expired: counter(seriesExpired), canceled: counter(seriesCanceled),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: seriesWait, Help: seriesWait,
			Buckets: prometheus.ExponentialBucketsRange(0.0001, 60, 18)}, []string{"caller"}),
	}
	s.reg.MustRegister(s.admitted, s.refused, s.expired, s.canceled, s.wait)
	// A series of another part of the process, which the panel ignores.
	other := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "toolbus_calls_total", Help: "calls"}, []string{"caller"})
	other.WithLabelValues("alice").Add(99)
	s.reg.MustRegister(other)
	return s
}

// let counts n calls of caller let in after waiting wait each.
func (s *fairSeries) let(caller string, n int, wait time.Duration) {
	for range n {
		s.admitted.WithLabelValues(caller).Inc()
		s.wait.WithLabelValues(caller).Observe(wait.Seconds())
	}
}

// fairStats is a scheduler's snapshot: alice, of weight 2, has two calls
// queued and one in the window; bob one in the window.
func fairStats() fair.Stats {
	return fair.Stats{Seats: 128, Used: 2, Waiting: 1, Hold: 4 * time.Millisecond, Flows: []fair.FlowStats{
		{Name: "alice", Weight: 2, Queued: 2, QueuedCost: 2, Inside: 1},
		{Name: "bob", Weight: 1, Inside: 1},
	}}
}

// callersOf asks the data route for the state with key's cookie and
// returns its Callers panel.
func callersOf(t *testing.T, h http.Handler, key string) *FairState {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/ui/api/state", nil)
	r.AddCookie(keyCookie(key))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /ui/api/state with key %q = %d %s, want 200", key, rec.Code, rec.Body)
	}
	var st struct {
		Fair *FairState `json:"fair"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatalf("GET /ui/api/state: %v", err)
	}
	return st.Fair
}

func callerNames(f *FairState) []string {
	var out []string
	for _, c := range f.Callers {
		out = append(out, c.Caller)
	}
	return out
}

// TestCallersRoute checks the Callers panel of the data route: a row for
// each caller with calls queued, in the window or counted, the busiest
// first, with its queue now and its counts; the window and each share
// for an operator; a caller's own row alone for a caller.
func TestCallersRoute(t *testing.T) {
	s := newFairSeries(t)
	s.let("alice", 30, 2*time.Millisecond)
	s.refused.WithLabelValues("alice").Add(4)
	s.expired.WithLabelValues("alice").Add(1)
	s.canceled.WithLabelValues("alice").Add(2)
	s.let("bob", 10, 0)
	s.let(callstats.Other, 5, 0)
	s.admitted.WithLabelValues("carol") // never let in: no row
	h := New(Source{ID: "i1", Stats: callstats.New(), InFlight: func() int64 { return 0 },
		Fair: fairStats, FairMetrics: s.reg}).Handler(&fakeAccess{}, discardLog)

	ops := callersOf(t, h, "ops")
	if ops == nil {
		t.Fatal("an operator's state has no Callers panel, want one")
	}
	if got, want := callerNames(ops), []string{"alice", "bob", callstats.Other}; !slices.Equal(got, want) {
		t.Errorf("an operator's callers = %q, want %q", got, want)
	}
	if w := ops.Window; w == nil || *w != (FairWindow{Seats: 128, Used: 2, Waiting: 1, Queued: 2, HoldMs: 4}) {
		t.Errorf("an operator's window = %+v, want 128 seats, 2 used, 1 waiting, 2 queued, hold 4 ms", w)
	}
	if !ops.Counted || !ops.SinceStart || ops.SpanSeconds <= 0 {
		t.Errorf("counted %v since start %v over %v s, want counts since the ingress started (within the window)", ops.Counted, ops.SinceStart, ops.SpanSeconds)
	}
	alice := ops.Callers[0]
	if alice.Weight != 2 || alice.Queued != 2 || alice.InWindow != 1 {
		t.Errorf("alice: weight %v, queued %d, in window %d; want 2, 2, 1", alice.Weight, alice.Queued, alice.InWindow)
	}
	c := alice.Counts
	if c == nil {
		t.Fatal("alice has no counts, want them")
	}
	if c.Admitted != 30 || c.Refused != 4 || c.Expired != 1 || c.Canceled != 2 {
		t.Errorf("alice: %d let in, %d refused, %d expired, %d canceled; want 30, 4, 1, 2", c.Admitted, c.Refused, c.Expired, c.Canceled)
	}
	if c.Share == nil || math.Abs(*c.Share-30.0/45) > 1e-9 {
		t.Errorf("alice's share = %v, want 30 of 45", c.Share)
	}
	if math.Abs(c.WaitMeanMs-2) > 1e-9 || c.WaitP99Ms <= 1 || c.WaitP99Ms > 3 {
		t.Errorf("alice's wait: mean %v ms, p99 %v ms; want 2 ms and the p99 in the bucket of 2 ms", c.WaitMeanMs, c.WaitP99Ms)
	}
	if c.Rate <= 0 {
		t.Errorf("alice's rate = %v, want more than 0", c.Rate)
	}

	bob := callersOf(t, h, "good") // fakeAccess's caller bob
	if got := callerNames(bob); !slices.Equal(got, []string{"bob"}) {
		t.Errorf("bob's callers = %q, want bob's own row alone", got)
	}
	if bob.Window != nil {
		t.Errorf("bob's window = %+v, want none: it counts every caller's calls", bob.Window)
	}
	if c := bob.Callers[0].Counts; c == nil || c.Admitted != 10 || c.Share != nil {
		t.Errorf("bob's counts = %+v, want 10 let in and no share", c)
	}
}

// TestCallersWithout checks the panel without fairness, and without the
// metrics its counts are read from.
func TestCallersWithout(t *testing.T) {
	off := New(Source{ID: "i1", Stats: callstats.New(), InFlight: func() int64 { return 0 },
		Fair: func() fair.Stats { return fair.Stats{} }})
	if f := off.Overview(Everything()).Fair; f != nil {
		t.Errorf("without fairness the panel = %+v, want none", f)
	}
	noMetrics := New(Source{ID: "i1", Stats: callstats.New(), InFlight: func() int64 { return 0 }, Fair: fairStats})
	f := noMetrics.Overview(Everything()).Fair
	if f == nil || f.Counted || !slices.Equal(callerNames(f), []string{"alice", "bob"}) {
		t.Fatalf("without metrics the panel = %+v, want alice and bob, not counted", f)
	}
	for _, c := range f.Callers {
		if c.Counts != nil {
			t.Errorf("without metrics %s has counts %+v, want none", c.Caller, c.Counts)
		}
	}
}

// TestCallersOverWindow checks that the counts cover the last window
// while the dashboard is read, from the samples it keeps, and the
// ingress's life when it was not read within it.
func TestCallersOverWindow(t *testing.T) {
	s := newFairSeries(t)
	start := time.Now().Add(-time.Hour)
	d := New(Source{ID: "i1", Stats: callstats.New(callstats.WithClock(func() time.Time { return start })),
		InFlight: func() int64 { return 0 }, Fair: fairStats, FairMetrics: s.reg})
	s.let("alice", 100, 0)
	s.refused.WithLabelValues("alice").Add(7)

	at := start.Add(time.Hour)
	first := d.fairState(Everything(), at)
	if !first.SinceStart || first.SpanSeconds != 3600 || first.Callers[0].Counts.Admitted != 100 {
		t.Errorf("first read: since start %v over %v s, alice let in %d; want the hour since the ingress started and 100",
			first.SinceStart, first.SpanSeconds, first.Callers[0].Counts.Admitted)
	}

	s.let("alice", 20, 0)
	later := d.fairState(Everything(), at.Add(10*time.Second))
	c := later.Callers[0].Counts
	if later.SinceStart || later.SpanSeconds != 10 || c.Admitted != 20 || c.Rate != 2 || c.Refused != 0 {
		t.Errorf("10 s later: since start %v over %v s, alice let in %d (%v/s), refused %d; want 20 over the last 10 s (2/s), none refused",
			later.SinceStart, later.SpanSeconds, c.Admitted, c.Rate, c.Refused)
	}

	// Once the first sample is out of the window, the counts start at
	// the next one kept.
	s.let("alice", 5, 0)
	last := d.fairState(Everything(), at.Add(window+5*time.Second))
	if c := last.Callers[0].Counts; last.SpanSeconds != (window-5*time.Second).Seconds() || c.Admitted != 5 {
		t.Errorf("a window later: over %v s alice let in %d; want 5 over %v s, since the read 10 s after the first",
			last.SpanSeconds, c.Admitted, (window - 5*time.Second).Seconds())
	}

	// Not read for longer than the window: the ingress's life again.
	if f := d.fairState(Everything(), at.Add(time.Hour)); !f.SinceStart || f.Callers[0].Counts.Admitted != 125 {
		t.Errorf("an hour later: since start %v, alice let in %d; want the ingress's life, 125", f.SinceStart, f.Callers[0].Counts.Admitted)
	}
}

// TestQuantile checks the 99th percentile against what Prometheus's
// histogram_quantile answers for the same buckets.
func TestQuantile(t *testing.T) {
	bounds := []float64{1, 2, 4}
	tests := []struct {
		name string
		q    float64
		cum  []uint64
		n    uint64
		want float64
	}{
		{"none", 0.99, []uint64{0, 0, 0}, 0, 0},
		{"in the first bucket, from 0", 0.5, []uint64{10, 10, 10}, 10, 0.5},
		{"within a bucket", 0.99, []uint64{0, 50, 100}, 100, 2 + 2*(99-50)/50.0},
		{"at a bound", 0.5, []uint64{50, 100, 100}, 100, 1},
		{"past the highest bound", 0.99, []uint64{0, 0, 10}, 20, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := quantile(tt.q, bounds, tt.cum, tt.n); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("quantile(%v, %v, %v, %d) = %v, want %v", tt.q, bounds, tt.cum, tt.n, got, tt.want)
			}
		})
	}
}
