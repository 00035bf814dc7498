package dashboard

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/callstats"
)

func TestMergeTrends(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	older := &bus.Trends{Start: start, StepSeconds: 10, InFlight: []int64{1, 2, 3},
		Methods: []bus.MethodTrend{{Method: "echo", Calls: []int64{1, 2, 3}, ToolErrors: []int64{0, 1, 0},
			CallerErrors: []int64{0, 0, 0}, InfraErrors: []int64{0, 0, 1}, P99Ms: []float64{1, 5, 2}}}}
	// One step later: its first step is the older one's second.
	newer := &bus.Trends{Start: start.Add(10 * time.Second), StepSeconds: 10, InFlight: []int64{10, 20, 30},
		JobsQueued: []int64{-1, 4, 2},
		Methods: []bus.MethodTrend{{Method: "echo", Calls: []int64{10, 10, 10}, ToolErrors: []int64{0, 0, 0},
			CallerErrors: []int64{1, 0, 0}, InfraErrors: []int64{0, 0, 0}, P99Ms: []float64{3, 3, 3}}}}
	got := mergeTrends([]*bus.Trends{older, newer})
	if !got.Start.Equal(newer.Start) {
		t.Errorf("start = %v, want the newest %v", got.Start, newer.Start)
	}
	if want := []int64{12, 23, 30}; !slices.Equal(got.InFlight, want) {
		t.Errorf("in flight = %v, want %v", got.InFlight, want)
	}
	if want := []int64{-1, 4, 2}; !slices.Equal(got.JobsQueued, want) {
		t.Errorf("jobs queued = %v, want %v", got.JobsQueued, want)
	}
	if len(got.Methods) != 1 {
		t.Fatalf("methods = %+v, want echo alone", got.Methods)
	}
	m := got.Methods[0]
	if want := []int64{12, 13, 10}; !slices.Equal(m.Calls, want) {
		t.Errorf("calls = %v, want %v", m.Calls, want)
	}
	if want := []float64{5, 3, 3}; !slices.Equal(m.P99Ms, want) {
		t.Errorf("p99 = %v, want the largest of each step %v", m.P99Ms, want)
	}
	if m.ToolErrors[0] != 1 || m.CallerErrors[0] != 1 || m.InfraErrors[1] != 1 {
		t.Errorf("errors = tool %v caller %v infra %v", m.ToolErrors, m.CallerErrors, m.InfraErrors)
	}
}

func TestStateGathersCluster(t *testing.T) {
	stats := callstats.New()
	stats.Begin("echo")
	stats.End("echo", time.Millisecond, 0)
	other := stats.Trends(0) // a second replica that saw the same
	gathers := 0
	d := New(Source{ID: "i1", Stats: stats, InFlight: func() int64 { return 0 },
		Gather: func(context.Context) ([]bus.Status, error) {
			gathers++
			return []bus.Status{
				{Kind: bus.KindIngress, ID: "i1", Host: "h1"},
				{Kind: bus.KindIngress, ID: "i2", Host: "h2", Trends: &other},
				{Kind: bus.KindWorker, ID: "w1", Host: "h3", Pid: 7},
			}, nil
		}})
	calls := func(st State) int64 {
		if len(st.Trends.Methods) != 1 {
			t.Fatalf("trends of %s = %+v, want echo's", st.Trends.Scope, st.Trends.Methods)
		}
		return st.Trends.Methods[0].Calls
	}
	st := d.State(context.Background(), Everything(), Query{})
	if st.Trends.Scope != ScopeCluster || calls(st) != 2 {
		t.Errorf("cluster trends: scope %q, %d calls; want %q, 2", st.Trends.Scope, calls(st), ScopeCluster)
	}
	if len(st.Replicas) != 2 || st.Replicas[0].ID != "i1" || st.Replicas[1].Host != "h2" {
		t.Errorf("replicas = %+v, want i1 then i2", st.Replicas)
	}
	st = d.State(context.Background(), Everything(), Query{Replica: "i2"})
	if st.Trends.Scope != "i2" || calls(st) != 1 {
		t.Errorf("replica trends: scope %q, %d calls; want i2, 1", st.Trends.Scope, calls(st))
	}
	bob := View{Caller: "bob", MayCall: func(string) bool { return true }}
	st = d.State(context.Background(), bob, Query{Replica: "i2"})
	if st.Trends.Scope != ScopeCluster || len(st.Replicas) != 0 || st.NATS != nil {
		t.Errorf("a caller's view: scope %q, replicas %v, nats %v; want the cluster's trends alone", st.Trends.Scope, st.Replicas, st.NATS)
	}
	if gathers != 1 {
		t.Errorf("gathered %d times for three states in a row, want 1", gathers)
	}
}

func TestStateWithoutCluster(t *testing.T) {
	stats := callstats.New()
	d := New(Source{ID: "i1", Stats: stats, InFlight: func() int64 { return 0 },
		Gather: func(context.Context) ([]bus.Status, error) { return nil, errors.New("no bus") }})
	st := d.State(context.Background(), Everything(), Query{})
	if st.Cluster != "no bus" || st.Trends == nil || st.Trends.Points != callstats.TrendPoints {
		t.Errorf("state = cluster error %q, trends %+v; want the error and this replica's trends", st.Cluster, st.Trends)
	}
	if !strings.Contains(st.Trends.InFlightSVG, "<polyline") {
		t.Errorf("in-flight chart %q has no line", st.Trends.InFlightSVG)
	}
}

func TestGroupErrors(t *testing.T) {
	now := time.Now()
	errs := []ErrorState{
		{Time: now, ID: "3", Method: "pay", Code: 2001, Message: "insufficient funds"},
		{Time: now.Add(-time.Second), ID: "2", Method: "echo", Code: -32001, Message: "timed out"},
		{Time: now.Add(-2 * time.Second), ID: "1", Method: "pay", Code: 2001, Message: "insufficient funds"},
	}
	got := groupErrors(errs)
	if len(got) != 2 || got[0].Count != 2 || got[0].ID != "3" || got[0].Class != "tool" ||
		got[1].Count != 1 || got[1].Class != "infra" {
		t.Errorf("groupErrors = %+v, want pay ×2 (tool, newest id 3), then echo ×1 (infra)", got)
	}
}

func TestChart(t *testing.T) {
	got := chart(10, 12, 0, series{"a", []float64{0, 1, -1, 2, -1, -1}})
	if n := strings.Count(got, "<polyline"); n != 2 {
		t.Errorf("chart has %d lines, want 2 around the gap: %s", n, got)
	}
	if !strings.Contains(got, `points="0.0,11.0 2.0,6.0"`) || !strings.Contains(got, `points="6.0,1.0 9.0,1.0"`) {
		t.Errorf("chart = %s, want the first run from the bottom up and the lone top point as a dash", got)
	}
}

// TestClusterErrors: the recent errors are the whole cluster's, newest
// first, each caller seeing only its own; this replica's own status is
// not counted twice.
func TestClusterErrors(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	own := []ErrorState{{Time: t0.Add(2 * time.Second), ID: "1", Method: "echo", Code: -32001, Message: "timed out"}}
	list := []bus.Status{
		{Kind: bus.KindIngress, ID: "self", RecentErrors: []bus.ErrorStatus{{Time: t0.Add(2 * time.Second), ID: "1", Method: "echo", Code: -32001, Caller: "alice"}}},
		{Kind: bus.KindIngress, ID: "other", RecentErrors: []bus.ErrorStatus{
			{Time: t0.Add(3 * time.Second), ID: "7", Method: "sum", Code: 2001, Message: "bad", Caller: "alice"},
			{Time: t0.Add(1 * time.Second), ID: "8", Method: "sum", Code: 2001, Message: "bad", Caller: "bob"},
		}},
		{Kind: bus.KindWorker, ID: "w", RecentErrors: []bus.ErrorStatus{{Time: t0, ID: "9", Method: "x", Caller: "alice"}}},
	}
	ids := func(es []ErrorState) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.ID)
		}
		return out
	}
	d := New(Source{ID: "self", Stats: callstats.New(), InFlight: func() int64 { return 0 }})
	if got := ids(d.clusterErrors(own, list, View{AllCallers: true})); !slices.Equal(got, []string{"7", "1", "8"}) {
		t.Errorf("operator sees %v, want 7, 1, 8 (newest first, no worker's, self once)", got)
	}
	if got := ids(d.clusterErrors(own, list, View{Caller: "alice"})); !slices.Equal(got, []string{"7", "1"}) {
		t.Errorf("alice sees %v, want her own 7 and this replica's 1", got)
	}
}
