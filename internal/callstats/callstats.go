// Package callstats keeps what an operator asks of recent calls: per method,
// the rate, error rate, in-flight count and latency percentiles over the
// last minute, and the newest error answers. The ingress's dashboard and the
// status answers of ingresses and workers read it; Prometheus reads the
// counters and histograms each component exports on its own.
//
// Memory is bounded: a method costs a fixed few kilobytes, the number of
// methods is capped (names past the cap are counted under [Other]), and the
// error list is a ring.
package callstats

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// Defaults of [New].
const (
	// DefaultMaxMethods is how many method names are kept apart; calls of
	// further names are counted under [Other].
	DefaultMaxMethods = 500
	// DefaultRecentErrors is how many error answers are kept.
	DefaultRecentErrors = 50
)

// Other is the name under which calls of methods past the cap are counted.
const Other = "_other"

// The window is slots × slotWidth; a slot is reused once it is older.
const (
	slots     = 12
	slotWidth = 5 * time.Second
	// Window is the span that rates and percentiles cover.
	Window = slots * slotWidth
)

// Latency buckets are quarter-octaves from minLatency: bucket i holds
// latencies below minLatency·2^((i+1)/4), so a percentile read from them is
// within 19% of the true value. The last bucket holds everything above.
const (
	minLatency = 10 * time.Microsecond
	buckets    = 100 // up to 10µs·2^25 ≈ 5.6 minutes
)

// Stats is what [Stats.Snapshot] reports of one method.
type Stats struct {
	Method string
	// Calls and Errors count the window's finished calls and those that
	// were answered with an error; ToolErrors, CallerErrors and
	// InfraErrors split Errors by [schema.Classify].
	Calls, Errors                         int64
	ToolErrors, CallerErrors, InfraErrors int64
	// Rate is Calls per second over the window (or over the time since
	// the first observation, when that is shorter).
	Rate float64
	// P50 and P99 are latency percentiles over the window; zero when it
	// holds no call.
	P50, P99 time.Duration
	// InFlight counts calls begun and not finished.
	InFlight int64
	// Total and TotalErrors count since the start.
	Total, TotalErrors int64
}

// ErrorRate is Errors/Calls, 0 when the window holds no call.
func (s Stats) ErrorRate() float64 { return Ratio(s.Errors, s.Calls) }

// Ratio is n/of, 0 when of is 0: an error rate.
func Ratio(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// MethodStatus is s as a status answer reports a method: latencies in
// milliseconds, and Workers nil, which only a registry of workers knows.
func (s Stats) MethodStatus() bus.MethodStatus {
	return bus.MethodStatus{
		Method: s.Method, Rate: s.Rate, Calls: s.Calls, Errors: s.Errors, ErrorRate: s.ErrorRate(),
		ToolErrors: s.ToolErrors, CallerErrors: s.CallerErrors, InfraErrors: s.InfraErrors,
		P50Ms: Millis(s.P50), P99Ms: Millis(s.P99), InFlight: s.InFlight, Total: s.Total,
	}
}

// Millis is d in milliseconds, as status answers and the dashboard give
// latencies.
func Millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ErrorAnswer is one error answer as [Stats.RecordError] keeps it.
type ErrorAnswer struct {
	Time    time.Time
	ID      string
	Method  string
	Code    int
	Message string
	TraceID string
	// Caller is who the answer went to, so that a view of one caller's
	// errors can leave out the others'; empty when unauthenticated.
	Caller string
}

// Set holds the statistics of many methods. Make one with [New]; its
// methods are safe for concurrent use.
type Set struct {
	now        func() time.Time
	maxMethods int
	started    time.Time

	mu       sync.Mutex
	methods  map[string]*method
	inFlight int64 // of every method
	peak     gauge // of inFlight
	jobs     gauge // queued jobs, as RecordJobsQueued was told
	jobsSeen bool
	errs     []ErrorAnswer // ring of cap len
	errNext  int           // where the next error goes
	errN     int           // how many are held
}

type method struct {
	inFlight     int64
	total, fails int64
	ring         [slots]slot
	trend        trend
}

type slot struct {
	start int64 // unix nanoseconds of the slot's start; 0 when unused
	calls uint32
	// errors counts the error answers by class, indexed by schema.Class.
	errors [classes]uint32
	lat    [buckets]uint32
}

// classes is the length of an array indexed by [schema.Class].
const classes = int(schema.ClassInfra) + 1

// Option configures [New].
type Option func(*Set)

// WithClock sets the clock (tests).
func WithClock(now func() time.Time) Option { return func(s *Set) { s.now = now } }

// WithMaxMethods sets how many method names are kept apart (default
// [DefaultMaxMethods]).
func WithMaxMethods(n int) Option {
	return func(s *Set) {
		if n > 0 {
			s.maxMethods = n
		}
	}
}

// WithRecentErrors sets how many error answers are kept (default
// [DefaultRecentErrors]).
func WithRecentErrors(n int) Option {
	return func(s *Set) {
		if n > 0 {
			s.errs = make([]ErrorAnswer, n)
		}
	}
}

// New returns an empty set.
func New(opts ...Option) *Set {
	s := &Set{
		now:        time.Now,
		maxMethods: DefaultMaxMethods,
		methods:    map[string]*method{},
		errs:       make([]ErrorAnswer, DefaultRecentErrors),
		jobs:       gauge{last: -1},
	}
	for _, o := range opts {
		o(s)
	}
	s.started = s.now()
	return s
}

// Started is when the set was made.
func (s *Set) Started() time.Time { return s.started }

// methodLocked returns the entry of name, counting it under [Other] once
// the cap is reached.
func (s *Set) methodLocked(name string) *method {
	if m, ok := s.methods[name]; ok {
		return m
	}
	if len(s.methods) >= s.maxMethods {
		name = Other
		if m, ok := s.methods[name]; ok {
			return m
		}
	}
	m := &method{}
	s.methods[name] = m
	return m
}

// Begin counts a call of name as in flight until [Set.End].
func (s *Set) Begin(name string) {
	now := s.now()
	s.mu.Lock()
	s.methodLocked(name).inFlight++
	s.inFlight++
	s.peak.set(now, s.inFlight)
	s.mu.Unlock()
}

// End records the end of a call begun with [Set.Begin]: its latency and
// the code it was answered with, 0 for a result (see [schema.Classify]).
func (s *Set) End(name string, d time.Duration, code int) {
	now := s.now()
	class := schema.ClassNone
	if code != 0 {
		class = schema.Classify(code)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.methodLocked(name)
	if m.inFlight > 0 {
		m.inFlight--
		s.inFlight--
	}
	s.peak.set(now, s.inFlight)
	m.total++
	if class != schema.ClassNone {
		m.fails++
	}
	sl := m.slotLocked(now)
	sl.calls++
	sl.errors[class]++
	b := bucketOf(d)
	sl.lat[b]++
	m.trend.add(now, class, b)
}

// slotLocked returns the slot for now, clearing it when it holds an older
// period.
func (m *method) slotLocked(now time.Time) *slot {
	start := now.Truncate(slotWidth).UnixNano()
	sl := &m.ring[(start/int64(slotWidth))%slots]
	if sl.start != start {
		*sl = slot{start: start}
	}
	return sl
}

func bucketOf(d time.Duration) int {
	if d < minLatency {
		return 0
	}
	i := int(4 * math.Log2(float64(d)/float64(minLatency)))
	if i >= buckets {
		return buckets - 1
	}
	return i
}

// upper is the upper bound of bucket i.
func upper(i int) time.Duration {
	return time.Duration(float64(minLatency) * math.Exp2(float64(i+1)/4))
}

// RecordError keeps e among the recent error answers, dropping the oldest
// when the ring is full.
func (s *Set) RecordError(e ErrorAnswer) {
	if e.Time.IsZero() {
		e.Time = s.now()
	}
	s.mu.Lock()
	s.errs[s.errNext] = e
	s.errNext = (s.errNext + 1) % len(s.errs)
	if s.errN < len(s.errs) {
		s.errN++
	}
	s.mu.Unlock()
}

// RecentErrors returns the kept error answers, newest first.
func (s *Set) RecentErrors() []ErrorAnswer {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ErrorAnswer, 0, s.errN)
	for k := 1; k <= s.errN; k++ {
		out = append(out, s.errs[(s.errNext-k+len(s.errs))%len(s.errs)])
	}
	return out
}

// Snapshot returns every method's statistics, sorted by name.
func (s *Set) Snapshot() []Stats {
	now := s.now()
	oldest := now.Truncate(slotWidth).Add(-(slots - 1) * slotWidth).UnixNano()
	span := now.Sub(time.Unix(0, oldest)).Seconds()
	if since := now.Sub(s.started).Seconds(); since < span {
		span = since
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Stats, 0, len(s.methods))
	var lat [buckets]uint64
	for name, m := range s.methods {
		st := Stats{Method: name, InFlight: m.inFlight, Total: m.total, TotalErrors: m.fails}
		lat = [buckets]uint64{}
		for i := range m.ring {
			sl := &m.ring[i]
			if sl.start < oldest || sl.calls == 0 {
				continue
			}
			st.Calls += int64(sl.calls)
			st.ToolErrors += int64(sl.errors[schema.ClassTool])
			st.CallerErrors += int64(sl.errors[schema.ClassCaller])
			st.InfraErrors += int64(sl.errors[schema.ClassInfra])
			for b, n := range sl.lat {
				lat[b] += uint64(n)
			}
		}
		st.Errors = st.ToolErrors + st.CallerErrors + st.InfraErrors
		if st.Calls > 0 {
			if span > 0 {
				st.Rate = float64(st.Calls) / max(span, 1)
			}
			st.P50 = percentile(&lat, st.Calls, 0.50)
			st.P99 = percentile(&lat, st.Calls, 0.99)
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Method < out[j].Method })
	return out
}

// percentile returns the upper bound of the bucket that holds the q-th
// latency of n.
func percentile(lat *[buckets]uint64, n int64, q float64) time.Duration {
	rank := uint64(math.Ceil(q * float64(n)))
	if rank == 0 {
		rank = 1
	}
	var seen uint64
	for i, c := range lat {
		seen += c
		if seen >= rank {
			return upper(i)
		}
	}
	return upper(buckets - 1)
}

// DefaultMaxCodes is how many error codes outside the JSON-RPC range a
// [Codes] names apart.
const DefaultMaxCodes = 64

// OtherCode is the label of the codes past the cap.
const OtherCode = "other"

// capped hands out a label for each of the first max keys it is asked
// for, and other for every later one, so that what clients send cannot
// grow a metric's series without bound. Its zero value is ready; it is
// safe for concurrent use.
type capped[K comparable] struct {
	mu   sync.RWMutex
	seen map[K]string
}

// get returns the label of k: its own (made by name) while fewer than max
// keys have one, else other.
func (c *capped[K]) get(k K, max int, name func(K) string, other string) string {
	c.mu.RLock()
	l, ok := c.seen[k]
	c.mu.RUnlock()
	if ok {
		return l
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.seen[k]; ok {
		return l
	}
	if len(c.seen) >= max {
		return other
	}
	if c.seen == nil {
		c.seen = map[K]string{}
	}
	l = name(k)
	c.seen[k] = l
	return l
}

// Codes turns error codes into bounded metric label values: every code of
// the range JSON-RPC and toolbus reserve (-32768 to -32000) is its own
// label, and so are the first [DefaultMaxCodes] other codes seen (a tool's
// business codes such as 2001); later ones are [OtherCode]. The zero value
// is ready to use and safe for concurrent use.
type Codes struct{ set capped[int] }

// Label returns the label of code.
func (c *Codes) Label(code int) string {
	if code >= -32768 && code <= -32000 {
		return strconv.Itoa(code)
	}
	return c.set.get(code, DefaultMaxCodes, strconv.Itoa, OtherCode)
}

// Names hands out at most Max distinct names as labels; calls of later
// names share Other. The zero value of the set is ready once Max and
// Other are set; it is safe for concurrent use.
type Names struct {
	Max   int
	Other string
	set   capped[string]
}

// Label returns name, or Other once Max other names have labels.
func (n *Names) Label(name string) string {
	return n.set.get(name, n.Max, func(s string) string { return s }, n.Other)
}

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
