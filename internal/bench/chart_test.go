package bench

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestChartEdges(t *testing.T) {
	tests := []struct {
		name   string
		lo, hi time.Duration
		want   []time.Duration
	}{
		{"four decades take 1-3 steps", time.Microsecond, 9 * time.Millisecond, []time.Duration{
			time.Microsecond, 3 * time.Microsecond, 10 * time.Microsecond, 30 * time.Microsecond, 100 * time.Microsecond,
			300 * time.Microsecond, time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond}},
		{"two and a half decades take 1-2-5 steps", 40 * time.Microsecond, 15 * time.Millisecond, []time.Duration{
			20 * time.Microsecond, 50 * time.Microsecond, 100 * time.Microsecond, 200 * time.Microsecond, 500 * time.Microsecond,
			time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond}},
		{"an edge value opens its bucket", 20 * time.Microsecond, 10 * time.Millisecond, []time.Duration{
			20 * time.Microsecond, 50 * time.Microsecond, 100 * time.Microsecond, 200 * time.Microsecond, 500 * time.Microsecond,
			time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond}},
		{"less than a decade takes finer steps", 20 * time.Millisecond, 38 * time.Millisecond, []time.Duration{
			20 * time.Millisecond, 22400 * time.Microsecond, 25 * time.Millisecond, 28 * time.Millisecond, 31500 * time.Microsecond,
			35500 * time.Microsecond, 40 * time.Millisecond}},
		{"one value", 5 * time.Millisecond, 5 * time.Millisecond, []time.Duration{5 * time.Millisecond, 5600 * time.Microsecond}},
		{"zero counts from 1ns", 0, 90, []time.Duration{1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var want []uint64
			for _, d := range tt.want {
				want = append(want, uint64(d))
			}
			if got := chartEdges(uint64(tt.lo), uint64(tt.hi)); !slices.Equal(got, want) {
				t.Errorf("chartEdges(%v, %v) = %v, want %v", tt.lo, tt.hi, got, want)
			}
		})
	}
}

// TestChartEdgesCover checks, over spans from a few percent to ten decades,
// that the edges enclose the range, rise, and give 8 to 16 rows wherever
// the finest ladder allows as many.
func TestChartEdgesCover(t *testing.T) {
	for lo := uint64(1000); lo < 1e8; lo = lo*7/3 + 1 {
		for span := 1.05; span < 1e10; span *= 1.7 {
			hi := uint64(float64(lo) * span)
			edges := chartEdges(lo, hi)
			rows := len(edges) - 1
			if edges[0] > lo || edges[rows] <= hi {
				t.Fatalf("chartEdges(%d, %d) = %v, want them to enclose the range", lo, hi, edges)
			}
			for i := 1; i < len(edges); i++ {
				if edges[i] <= edges[i-1] {
					t.Fatalf("chartEdges(%d, %d) = %v, want them rising", lo, hi, edges)
				}
			}
			if rows > 16 || (span >= 2 && rows < chartMinRows) {
				t.Errorf("chartEdges(%d, %d) gives %d rows, want %d to 16", lo, hi, rows, chartMinRows)
			}
		}
	}
}

func TestChartCounts(t *testing.T) {
	// Values below 128ns are recorded exactly, so the edges themselves can
	// be tested.
	edges := []uint64{10, 20, 50, 100}
	var h histogram
	for _, v := range []time.Duration{10, 19, 20, 20, 49, 50, 99} {
		h.record(v)
	}
	if got, want := chartCounts(&h, edges), []uint64{2, 3, 2}; !slices.Equal(got, want) {
		t.Errorf("chartCounts(10 19 20 20 49 50 99) = %v, want %v", got, want)
	}

	// Larger values fall in buckets by the middle of their recording
	// bucket; well inside a chart bucket, that is theirs.
	edges = []uint64{uint64(time.Millisecond), uint64(2 * time.Millisecond), uint64(5 * time.Millisecond)}
	h = histogram{}
	for _, v := range []time.Duration{1010 * time.Microsecond, 1500 * time.Microsecond, 1980 * time.Microsecond, 2020 * time.Microsecond, 4900 * time.Microsecond} {
		h.record(v)
	}
	if got, want := chartCounts(&h, edges), []uint64{3, 2}; !slices.Equal(got, want) {
		t.Errorf("chartCounts(1.01ms 1.5ms 1.98ms 2.02ms 4.9ms) = %v, want %v", got, want)
	}

	if got, want := chartCounts(nil, edges), []uint64{0, 0}; !slices.Equal(got, want) {
		t.Errorf("chartCounts(nil) = %v, want %v", got, want)
	}
}

func TestBar(t *testing.T) {
	tests := []struct {
		share float64
		width int
		want  string
	}{
		{0, 4, "    "},
		{1, 4, "████"},
		{0.5, 4, "██  "},
		{0.3125, 4, "█▎  "}, // 10 eighths
		{0.001, 4, "▏   "},  // a count above zero shows
		{1.5, 2, "██"},
		{-1, 2, "  "},
	}
	for _, tt := range tests {
		if got := bar(tt.share, tt.width); got != tt.want {
			t.Errorf("bar(%v, %d) = %q, want %q", tt.share, tt.width, got, tt.want)
		}
	}
}

// measured returns a Result that recorded values.
func measured(values ...time.Duration) Result {
	r := Result{hist: new(histogram)}
	for _, v := range values {
		r.hist.record(v)
	}
	r.setLatencies()
	return r
}

func TestWriteChart(t *testing.T) {
	a := measured(slices.Concat(slices.Repeat([]time.Duration{20}, 8), slices.Repeat([]time.Duration{60}, 4), []time.Duration{110})...)
	b := measured(60, 60, 110)
	tests := []struct {
		name   string
		series []chartSeries
		want   string
	}{
		{"two series share buckets, each scaled to its largest count", []chartSeries{{"a", a}, {"toolbus", b}}, `
title
latency        a                       toolbus
 20ns –  25ns  8 ████████████████████  0
 25ns –  32ns  0                       0
 32ns –  40ns  0                       0
 40ns –  50ns  0                       0
 50ns –  63ns  4 ██████████            2 ████████████████████
 63ns –  80ns  0                       0
 80ns – 100ns  0                       0
100ns – 125ns  1 ██▌                   1 ██████████
a        p50 20ns  p90 60ns   p99 110ns  max 110ns
toolbus  p50 60ns  p90 110ns  p99 110ns  max 110ns
`},
		{"a series without latencies says so", []chartSeries{{"a", Result{}}, {"b", measured(time.Millisecond)}}, `
title
latency          a                       b
   1ms – 1.12ms  0                       1 ████████████████████
a  no latencies
b  p50 1ms  p90 1ms  p99 1ms  max 1ms
`},
		{"nothing to draw", []chartSeries{{"a", Result{}}, {"b", measured()}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sb strings.Builder
			if err := writeChart(&sb, "title", tt.series...); err != nil {
				t.Fatalf("writeChart() error = %v", err)
			}
			if got := sb.String(); got != tt.want {
				t.Errorf("writeChart() =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// TestReportsEndWithCharts checks that the reports of scenarios that
// measure latencies keep their verdicts and add a chart after them.
func TestReportsEndWithCharts(t *testing.T) {
	r := measured(40*time.Microsecond, 50*time.Microsecond, 2*time.Millisecond)
	cs := []Comparison{{Concurrency: 1, Baseline: Side{Target: Target{Name: "plain"}, Result: r}, Subject: Side{Target: Target{Name: "toolbus"}, Result: r}}}
	tests := []struct {
		name   string
		report func(*strings.Builder) error
		title  string
	}{
		{"compare", func(sb *strings.Builder) error { return ReportCompare(sb, cs) }, "echo latency at concurrency 1"},
		{"jobs", func(sb *strings.Builder) error { return ReportJobs(sb, JobsResult{Method: "echo", Poll: r, Submit: r}) }, "jobs latency"},
		{"websocket", func(sb *strings.Builder) error {
			return ReportWebSocket(sb, WebSocketResult{HTTP: Side{Target: Target{Name: "HTTP"}, Result: r}, WS: Side{Target: Target{Name: "WebSocket"}, Result: r}})
		}, "websocket latency"},
		{"overload", func(sb *strings.Builder) error {
			return ReportOverload(sb, OverloadResult{Capacity: 4, Factor: 10, AtCapacity: r, Overloaded: r})
		}, "overload latency of admitted calls"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sb strings.Builder
			if err := tt.report(&sb); err != nil {
				t.Fatalf("report error = %v", err)
			}
			out := sb.String()
			chart := strings.Index(out, "\n\n"+tt.title+"\n")
			if chart < 0 {
				t.Fatalf("report =\n%s\nwant a chart titled %q after a blank line", out, tt.title)
			}
			lastVerdict := max(strings.LastIndex(out, "\nPASS  "), strings.LastIndex(out, "\nMISS  "))
			if lastVerdict > chart {
				t.Errorf("report =\n%s\nwant the chart after the verdicts", out)
			}
			if !strings.Contains(out[chart:], "p90 2ms  p99 2ms  max 2ms") {
				t.Errorf("report =\n%s\nwant the chart's percentiles", out)
			}
		})
	}
}
