package callstats

import (
	"cmp"
	"slices"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// The trends keep TrendPoints steps of TrendStep: the last 15 minutes, in
// a ring per method and per gauge, so their memory is fixed.
const (
	TrendStep   = 10 * time.Second
	TrendPoints = 90
	// TrendSpan is how far back the trends reach.
	TrendSpan = TrendPoints * TrendStep
	// DefaultTrendMethods is how many methods [Set.Trends] reports at
	// most: the busiest over [TrendSpan]. It keeps a status answer well
	// below NATS's default payload limit (a method costs about 2 kB).
	DefaultTrendMethods = 40
)

// trendIndex is the ring index of the step that starts at start.
func trendIndex(start int64) int { return int((start / int64(TrendStep)) % TrendPoints) }

// trend is one method's history: per step, the calls, errors by class and
// the 99th latency percentile. Only the open step keeps its latency
// histogram; a step's percentile is fixed when the next one opens.
type trend struct {
	open int64 // start of the open step, unix nanoseconds; 0 before any call
	lat  [buckets]uint32
	ring [TrendPoints]point
}

type point struct {
	start  int64
	calls  uint32
	errors [classes]uint32
	p99    time.Duration // of a closed step
}

func (t *trend) add(now time.Time, class schema.Class, bucket int) {
	start := now.Truncate(TrendStep).UnixNano()
	if t.open != start {
		t.close()
		t.open = start
		t.ring[trendIndex(start)] = point{start: start}
	}
	p := &t.ring[trendIndex(start)]
	p.calls++
	p.errors[class]++
	t.lat[bucket]++
}

// close fixes the percentile of the open step and empties its histogram.
func (t *trend) close() {
	if t.open == 0 {
		return
	}
	if p := &t.ring[trendIndex(t.open)]; p.start == t.open {
		p.p99 = t.p99()
	}
	t.lat = [buckets]uint32{}
}

func (t *trend) p99() time.Duration {
	var lat [buckets]uint64
	var n int64
	for i, c := range t.lat {
		lat[i] = uint64(c)
		n += int64(c)
	}
	if n == 0 {
		return 0
	}
	return percentile(&lat, n, 0.99)
}

// gauge is the history of a value that changes now and then: per step,
// its value when the step opened, its peak and its value at the end. A
// step in which it never changed holds the value it had.
type gauge struct {
	last int64 // the value now; -1 for unknown
	ring [TrendPoints]gaugePoint
}

type gaugePoint struct {
	start          int64
	open, max, end int64
}

func (g *gauge) set(now time.Time, v int64) {
	start := now.Truncate(TrendStep).UnixNano()
	p := &g.ring[trendIndex(start)]
	if p.start != start {
		*p = gaugePoint{start: start, open: g.last, max: g.last}
	}
	p.max = max(p.max, v)
	p.end = v
	g.last = v
}

// series returns the peak of each of the n steps from first on; a step
// with no change holds the value at the start of the next one that has
// a change, or the value now.
func (g *gauge) series(first int64, n int) []int64 {
	out := make([]int64, n)
	carry := g.last
	for i := n - 1; i >= 0; i-- {
		ts := first + int64(i)*int64(TrendStep)
		if p := &g.ring[trendIndex(ts)]; p.start == ts {
			out[i] = p.max
			carry = p.open
		} else {
			out[i] = carry
		}
	}
	return out
}

// RecordJobsQueued notes how many jobs are queued now, for the jobs
// series of [Set.Trends].
func (s *Set) RecordJobsQueued(n int64) {
	now := s.now()
	s.mu.Lock()
	s.jobs.set(now, n)
	s.jobsSeen = true
	s.mu.Unlock()
}

// Trends returns the last [TrendSpan] in steps of [TrendStep], oldest
// first, the last step being the one under way: the peak of calls in
// flight, the jobs queued (when [Set.RecordJobsQueued] was ever called)
// and, for the busiest maxMethods methods with calls in the span (at most
// [DefaultTrendMethods] when maxMethods <= 0), their calls, errors by
// class and 99th latency percentiles, sorted by name.
func (s *Set) Trends(maxMethods int) bus.Trends {
	if maxMethods <= 0 {
		maxMethods = DefaultTrendMethods
	}
	now := s.now()
	last := now.Truncate(TrendStep)
	first := last.Add(-(TrendPoints - 1) * TrendStep)
	firstNs := first.UnixNano()
	out := bus.Trends{Start: first, StepSeconds: int(TrendStep / time.Second)}
	type busy struct {
		name  string
		calls int64
		m     *method
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out.InFlight = s.peak.series(firstNs, TrendPoints)
	if s.jobsSeen {
		out.JobsQueued = s.jobs.series(firstNs, TrendPoints)
	}
	var list []busy
	for name, m := range s.methods {
		var n int64
		for i := range m.trend.ring {
			if p := &m.trend.ring[i]; p.start >= firstNs {
				n += int64(p.calls)
			}
		}
		if n > 0 {
			list = append(list, busy{name, n, m})
		}
	}
	slices.SortFunc(list, func(a, b busy) int {
		if c := cmp.Compare(b.calls, a.calls); c != 0 {
			return c
		}
		return cmp.Compare(a.name, b.name)
	})
	if len(list) > maxMethods {
		list = list[:maxMethods]
	}
	slices.SortFunc(list, func(a, b busy) int { return cmp.Compare(a.name, b.name) })
	for _, b := range list {
		mt := bus.MethodTrend{Method: b.name, Calls: make([]int64, TrendPoints), ToolErrors: make([]int64, TrendPoints),
			CallerErrors: make([]int64, TrendPoints), InfraErrors: make([]int64, TrendPoints), P99Ms: make([]float64, TrendPoints)}
		t := &b.m.trend
		for i := range TrendPoints {
			ts := firstNs + int64(i)*int64(TrendStep)
			p := &t.ring[trendIndex(ts)]
			if p.start != ts {
				continue
			}
			mt.Calls[i] = int64(p.calls)
			mt.ToolErrors[i] = int64(p.errors[schema.ClassTool])
			mt.CallerErrors[i] = int64(p.errors[schema.ClassCaller])
			mt.InfraErrors[i] = int64(p.errors[schema.ClassInfra])
			p99 := p.p99
			if ts == t.open {
				p99 = t.p99()
			}
			mt.P99Ms[i] = Millis(p99)
		}
		out.Methods = append(out.Methods, mt)
	}
	if out.Methods == nil {
		out.Methods = []bus.MethodTrend{}
	}
	return out
}
