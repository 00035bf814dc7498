package callstats

import (
	"slices"
	"testing"
	"time"
)

func TestTrends(t *testing.T) {
	c := newClock()
	s := New(WithClock(c.now))
	// Step 1: two calls in flight at once, one tool error, one timeout.
	s.Begin("pay")
	s.Begin("pay")
	s.End("pay", time.Millisecond, 2001)
	s.End("pay", 100*time.Millisecond, -32001)
	// Step 3: one call of another method, one caller error.
	c.add(2 * TrendStep)
	s.Begin("echo")
	s.End("echo", time.Millisecond, -32602)
	s.RecordJobsQueued(3)

	tr := s.Trends(0)
	if len(tr.InFlight) != TrendPoints || tr.StepSeconds != int(TrendStep/time.Second) {
		t.Fatalf("Trends() has %d points of %d s, want %d of %v", len(tr.InFlight), tr.StepSeconds, TrendPoints, TrendStep)
	}
	if got, want := tr.Start.Add((TrendPoints-1)*TrendStep), c.now().Truncate(TrendStep); !got.Equal(want) {
		t.Errorf("last step starts at %v, want %v", got, want)
	}
	last := TrendPoints - 1
	if got, want := tr.InFlight[last-2:], []int64{2, 0, 1}; !slices.Equal(got, want) {
		t.Errorf("in flight of the last three steps = %v, want %v", got, want)
	}
	if got, want := tr.JobsQueued[last-1:], []int64{-1, 3}; !slices.Equal(got, want) {
		t.Errorf("jobs queued of the last two steps = %v, want %v", got, want)
	}
	if len(tr.Methods) != 2 || tr.Methods[0].Method != "echo" || tr.Methods[1].Method != "pay" {
		t.Fatalf("methods = %+v, want echo and pay", tr.Methods)
	}
	pay, echo := tr.Methods[1], tr.Methods[0]
	if pay.Calls[last-2] != 2 || pay.ToolErrors[last-2] != 1 || pay.InfraErrors[last-2] != 1 || pay.CallerErrors[last-2] != 0 {
		t.Errorf("pay's first step = %d calls, %d tool, %d caller, %d infra errors; want 2, 1, 0, 1",
			pay.Calls[last-2], pay.ToolErrors[last-2], pay.CallerErrors[last-2], pay.InfraErrors[last-2])
	}
	if p := pay.P99Ms[last-2]; p < 100 || p > 120 {
		t.Errorf("pay's p99 = %v ms, want about 100", p)
	}
	if echo.Calls[last] != 1 || echo.CallerErrors[last] != 1 || echo.P99Ms[last] == 0 {
		t.Errorf("echo's open step = %d calls, %d caller errors, p99 %v; want 1, 1 and a p99",
			echo.Calls[last], echo.CallerErrors[last], echo.P99Ms[last])
	}

	// Past the span, everything but the gauges' values is forgotten.
	c.add(TrendSpan)
	tr = s.Trends(0)
	if len(tr.Methods) != 0 || tr.InFlight[0] != 0 || tr.JobsQueued[0] != 3 {
		t.Errorf("after the span: methods %v, in flight %d, jobs %d; want none, 0, 3",
			tr.Methods, tr.InFlight[0], tr.JobsQueued[0])
	}
}

func TestTrendsKeepsBusiest(t *testing.T) {
	c := newClock()
	s := New(WithClock(c.now))
	for i, name := range []string{"a", "b", "c"} {
		for range i + 1 {
			s.Begin(name)
			s.End(name, time.Millisecond, 0)
		}
	}
	var names []string
	for _, m := range s.Trends(2).Methods {
		names = append(names, m.Method)
	}
	if want := []string{"b", "c"}; !slices.Equal(names, want) {
		t.Errorf("Trends(2) methods = %q, want %q", names, want)
	}
}
