package dashboard

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/toolbus/toolbus/internal/callstats"
)

// The Callers panel shows how the ingress shares itself among its
// callers. The queues and the window are the fairness scheduler's now
// ([Source.Fair]); the counts (calls let in, their wait in the queue,
// refusals) are the ingress's toolbus_fair_* series with each caller
// named ([Source.FairMetrics]), so that the page and /metrics count
// alike. Those count since the ingress started: the dashboard keeps a
// few samples of them as it is read and shows what changed over the
// last [window] (see fairSamples).

// callerAnonymous is the caller label of the fairness series for the
// caller of an ingress without authentication, whose flow has no name;
// callers past the first hundred are counted together as
// [callstats.Other].
const callerAnonymous = "_anonymous"

// The fairness series the panel reads, each with a caller label.
const (
	seriesAdmitted = "toolbus_fair_admitted_total"
	seriesRefused  = "toolbus_fair_refused_total"
	seriesExpired  = "toolbus_fair_expired_total"
	seriesCanceled = "toolbus_fair_canceled_total"
	seriesWait     = "toolbus_fair_wait_seconds"
)

// fairSampleEvery is how often at most the dashboard keeps a sample of
// the counts (at most window/fairSampleEvery samples are kept);
// fairMinSpan is the shortest span it shows counts over: a sample taken
// less than that ago is too recent to take a rate from.
const (
	fairSampleEvery = 5 * time.Second
	fairMinSpan     = time.Second
)

// FairState is the Callers panel: the fairness window the callers share
// and each caller's part of it. It is null in [State] when the ingress
// serves calls in arrival order.
type FairState struct {
	// Window is the window of seats: an operator's view only (it counts
	// every caller's calls), null otherwise.
	Window *FairWindow `json:"window"`
	// Counted reports that the counts are known: they are read from the
	// ingress's metrics, without which every caller's Counts is null.
	Counted bool `json:"counted"`
	// SpanSeconds is the span the counts cover: about the last
	// [State.WindowSeconds] seconds while the dashboard is being read,
	// less just after it was first read. With SinceStart it is the
	// ingress's life: the ingress started within the window, or the
	// dashboard was not read in it.
	SpanSeconds float64 `json:"span_seconds"`
	SinceStart  bool    `json:"since_start"`
	// Error says why the counts could not be read, when they could not.
	Error string `json:"error,omitempty"`
	// Callers holds a row for each caller with calls queued or in the
	// window now, or counted over the span, the one with the most calls
	// let in first. A caller's view holds its own row alone.
	Callers []CallerShare `json:"callers"`
}

// FairWindow is the window of seats: the calls the ingress works on at
// once, which fairness shares among callers.
type FairWindow struct {
	Seats int `json:"seats"`
	// Used counts the seats taken (an exempt caller's calls may take
	// more than there are); Waiting the calls past their hold, out of
	// their seats, waiting on a worker.
	Used    int `json:"used"`
	Waiting int `json:"waiting"`
	// Queued counts every caller's calls and request bodies waiting in
	// the queues now.
	Queued int `json:"queued"`
	// HoldMs is how long a call keeps its seat without an answer now.
	HoldMs float64 `json:"hold_ms"`
}

// CallerShare is one caller's row of the Callers panel.
type CallerShare struct {
	// Caller is the caller's name, "_anonymous" for the caller of an
	// ingress without authentication, or "_other" for the callers past
	// the first hundred, counted together as in the ingress's metrics.
	Caller string `json:"caller"`
	// Weight is the caller's weight, known while it has calls queued or
	// in the window (absent otherwise, and for an exempt caller, which
	// never queues).
	Weight float64 `json:"weight,omitempty"`
	// Queued counts the caller's calls, and request bodies not parsed
	// yet, waiting in its queue now; InWindow its calls in the window.
	Queued   int `json:"queued"`
	InWindow int `json:"in_window"`
	// Counts covers [FairState.SpanSeconds]; null when the counts are
	// not known, or not apart from other callers' (a caller past the
	// first hundred).
	Counts *CallerCounts `json:"counts"`
}

// CallerCounts is what one caller's queue did over a span.
type CallerCounts struct {
	// Admitted counts the calls let into the window, Rate the same per
	// second.
	Admitted int64   `json:"admitted"`
	Rate     float64 `json:"rate"`
	// Share is Admitted's part of every caller's calls let in, 0 to 1:
	// an operator's view only, null otherwise.
	Share *float64 `json:"share"`
	// WaitMeanMs is the mean wait in the queue of the calls let in, and
	// WaitP99Ms its 99th percentile read from the histogram's buckets as
	// Prometheus's histogram_quantile reads them; 0 when none was let in.
	WaitMeanMs float64 `json:"wait_mean_ms"`
	WaitP99Ms  float64 `json:"wait_p99_ms"`
	// Refused counts the calls and bodies refused -32002 for a full
	// queue (caller_max_queued), Expired those answered -32001 at their
	// deadline in the queue, Canceled those whose client went away
	// while they waited.
	Refused  int64 `json:"refused"`
	Expired  int64 `json:"expired"`
	Canceled int64 `json:"canceled"`
}

// fairState returns the Callers panel as v may see it at now; nil when
// the ingress has no fairness.
func (d *Dashboard) fairState(v View, now time.Time) *FairState {
	if d.src.Fair == nil {
		return nil
	}
	st := d.src.Fair()
	if st.Seats == 0 {
		return nil
	}
	out := &FairState{Callers: []CallerShare{}}
	rows := map[string]*CallerShare{}
	row := func(caller string) *CallerShare {
		r := rows[caller]
		if r == nil {
			r = &CallerShare{Caller: caller}
			rows[caller] = r
		}
		return r
	}
	queued := 0
	for _, f := range st.Flows {
		name := f.Name
		if name == "" {
			name = callerAnonymous
		}
		r := row(name)
		r.Weight, r.Queued, r.InWindow = f.Weight, f.Queued, f.Inside
		queued += f.Queued
	}
	if v.AllCallers {
		out.Window = &FairWindow{Seats: st.Seats, Used: st.Used, Waiting: st.Waiting, Queued: queued,
			HoldMs: callstats.Millis(st.Hold)}
	}
	if d.src.FairMetrics != nil {
		d.countFair(out, row, rows, v, now)
	}
	for _, r := range rows {
		if v.AllCallers || (r.Caller == v.Caller && v.Caller != callstats.Other) {
			out.Callers = append(out.Callers, *r)
		}
	}
	slices.SortFunc(out.Callers, func(a, b CallerShare) int {
		return cmp.Or(cmp.Compare(admitted(b), admitted(a)), cmp.Compare(b.Queued, a.Queued), cmp.Compare(a.Caller, b.Caller))
	})
	return out
}

// countFair reads the counts since the ingress started, takes from them
// those of the span's start, and puts what changed in the rows: a row
// for each caller that did anything over the span, counts for each row
// whose caller has series of its own.
func (d *Dashboard) countFair(out *FairState, row func(string) *CallerShare, rows map[string]*CallerShare, v View, now time.Time) {
	cur, err := readFairCounts(d.src.FairMetrics.Gather)
	if err != nil {
		out.Error = err.Error()
		return
	}
	base, from := d.fairSamples.take(now, d.src.Stats.Started(), cur)
	out.Counted = true
	out.SinceStart = base == nil
	span := now.Sub(from)
	out.SpanSeconds = span.Seconds()
	changed := map[string]fairCounts{}
	var total float64
	for caller, c := range cur {
		delta := c.minus(base[caller])
		if delta.idle() && rows[caller] == nil {
			continue
		}
		changed[caller] = delta
		total += delta.admitted
	}
	for caller, delta := range changed {
		row(caller).Counts = delta.counts(span, total, v.AllCallers)
	}
}

// admitted is the calls r's caller had let in over the span, -1 when
// not counted.
func admitted(r CallerShare) int64 {
	if r.Counts == nil {
		return -1
	}
	return r.Counts.Admitted
}

// fairCounts are one caller label's fairness counts: since the ingress
// started, or over a span.
type fairCounts struct {
	admitted, refused, expired, canceled float64
	// waits counts the calls whose wait was observed, waitSum their
	// waits in seconds; cum counts, for each bound of bounds (seconds),
	// the waits up to it.
	waits   uint64
	waitSum float64
	bounds  []float64
	cum     []uint64
}

// readFairCounts reads the counts of every caller label from the series
// gather returns (a [prometheus.Gatherer]'s Gather). Families that are
// missing have not counted anything yet. A gathering that failed in part
// still answers with the fairness series it read.
func readFairCounts(gather func() ([]*dto.MetricFamily, error)) (map[string]*fairCounts, error) {
	fams, err := gather()
	out := map[string]*fairCounts{}
	found := false
	for _, f := range fams {
		var set func(c *fairCounts, m *dto.Metric)
		switch f.GetName() {
		case seriesAdmitted:
			set = func(c *fairCounts, m *dto.Metric) { c.admitted = m.GetCounter().GetValue() }
		case seriesRefused:
			set = func(c *fairCounts, m *dto.Metric) { c.refused = m.GetCounter().GetValue() }
		case seriesExpired:
			set = func(c *fairCounts, m *dto.Metric) { c.expired = m.GetCounter().GetValue() }
		case seriesCanceled:
			set = func(c *fairCounts, m *dto.Metric) { c.canceled = m.GetCounter().GetValue() }
		case seriesWait:
			set = func(c *fairCounts, m *dto.Metric) {
				h := m.GetHistogram()
				c.waits, c.waitSum = h.GetSampleCount(), h.GetSampleSum()
				c.bounds, c.cum = c.bounds[:0], c.cum[:0]
				for _, b := range h.GetBucket() {
					if !math.IsInf(b.GetUpperBound(), 1) {
						c.bounds = append(c.bounds, b.GetUpperBound())
						c.cum = append(c.cum, b.GetCumulativeCount())
					}
				}
			}
		default:
			continue
		}
		found = true
		for _, m := range f.GetMetric() {
			caller, ok := callerLabel(m)
			if !ok {
				continue
			}
			c := out[caller]
			if c == nil {
				c = &fairCounts{}
				out[caller] = c
			}
			set(c, m)
		}
	}
	if err != nil && !found {
		return nil, err
	}
	return out, nil
}

// callerLabel returns the value of m's caller label.
func callerLabel(m *dto.Metric) (string, bool) {
	for _, l := range m.GetLabel() {
		if l.GetName() == "caller" {
			return l.GetValue(), true
		}
	}
	return "", false
}

// minus returns what changed from base to c; base nil is nothing
// counted.
func (c *fairCounts) minus(base *fairCounts) fairCounts {
	if base == nil {
		base = &fairCounts{}
	}
	out := fairCounts{
		admitted: c.admitted - base.admitted, refused: c.refused - base.refused,
		expired: c.expired - base.expired, canceled: c.canceled - base.canceled,
		waitSum: c.waitSum - base.waitSum, bounds: c.bounds, cum: slices.Clone(c.cum),
	}
	if c.waits >= base.waits {
		out.waits = c.waits - base.waits
	}
	if slices.Equal(c.bounds, base.bounds) {
		for i := range out.cum {
			out.cum[i] -= min(base.cum[i], out.cum[i])
		}
	}
	return out
}

// idle reports whether nothing was counted.
func (c fairCounts) idle() bool {
	return c.admitted == 0 && c.refused == 0 && c.expired == 0 && c.canceled == 0
}

// counts is c over span, of which total calls of every caller were let
// in; share tells whether to give the caller's part of them.
func (c fairCounts) counts(span time.Duration, total float64, share bool) *CallerCounts {
	out := &CallerCounts{Admitted: int64(c.admitted), Refused: int64(c.refused), Expired: int64(c.expired),
		Canceled: int64(c.canceled)}
	if s := span.Seconds(); s > 0 {
		out.Rate = c.admitted / s
	}
	if share {
		part := 0.0
		if total > 0 {
			part = c.admitted / total
		}
		out.Share = &part
	}
	if c.waits > 0 {
		out.WaitMeanMs = c.waitSum / float64(c.waits) * 1000
		out.WaitP99Ms = quantile(0.99, c.bounds, c.cum, c.waits) * 1000
	}
	return out
}

// quantile returns the q-quantile of n observations of which cum[i] are
// at most bounds[i], as Prometheus's histogram_quantile does: linearly
// within the bucket that holds it (the first one starting at 0), and the
// highest bound when it lies past it.
func quantile(q float64, bounds []float64, cum []uint64, n uint64) float64 {
	if n == 0 || len(bounds) == 0 {
		return 0
	}
	rank := q * float64(n)
	lower, below := 0.0, 0.0
	for i, upper := range bounds {
		in := float64(cum[i])
		if in >= rank {
			if in == below {
				return upper
			}
			return lower + (upper-lower)*(rank-below)/(in-below)
		}
		lower, below = upper, in
	}
	return lower
}

// fairSamples are the fairness counts as the dashboard read them, at
// most one every [fairSampleEvery], over the last [window]: the counts
// of now are taken from the oldest. Its methods are safe for concurrent
// use.
type fairSamples struct {
	mu   sync.Mutex
	list []fairSample // oldest first
}

type fairSample struct {
	at     time.Time
	counts map[string]*fairCounts
}

// take keeps cur, read at now, as a sample unless one was kept less
// than [fairSampleEvery] before, and returns the counts to take cur's
// from and when they were read: the oldest sample within the window;
// nil and started (nothing counted when the ingress started) when the
// ingress started within the window, or no sample is old enough.
func (s *fairSamples) take(now, started time.Time, cur map[string]*fairCounts) (map[string]*fairCounts, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	from := now.Add(-window)
	old := 0
	for old < len(s.list) && s.list[old].at.Before(from) {
		old++
	}
	s.list = slices.Delete(s.list, 0, old)
	base, at := map[string]*fairCounts(nil), started
	if started.Before(from) && len(s.list) > 0 && now.Sub(s.list[0].at) >= fairMinSpan {
		base, at = s.list[0].counts, s.list[0].at
	}
	if n := len(s.list); n == 0 || now.Sub(s.list[n-1].at) >= fairSampleEvery {
		s.list = append(s.list, fairSample{at: now, counts: cur})
	}
	return base, at
}
