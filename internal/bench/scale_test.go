package bench

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// fakePool records the pool sizes it is set to.
type fakePool struct{ sizes []int }

func (f *fakePool) SetWorkers(_ context.Context, n int) error {
	f.sizes = append(f.sizes, n)
	return nil
}

func TestScale(t *testing.T) {
	url := serve(t, fakeToolbus{})
	pool := &fakePool{}
	r, err := Scale(context.Background(), ScaleConfig{URL: url, Cluster: pool, Workers: []int{1, 2}, Offered: []float64{2, 1},
		Slots: 2, Sleep: 5 * time.Millisecond, Warmup: time.Millisecond, Duration: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("Scale = %v, want nil", err)
	}
	if got, want := pool.sizes, []int{1, 2}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("pool sizes = %v, want %v", got, want)
	}
	wantConc := []int{4, 2, 8, 4}
	if len(r.Points) != len(wantConc) {
		t.Fatalf("Scale measured %d points, want %d", len(r.Points), len(wantConc))
	}
	for i, p := range r.Points {
		if p.Concurrency != wantConc[i] {
			t.Errorf("point %d concurrency = %d, want %d", i, p.Concurrency, wantConc[i])
		}
		if p.Result.Requests == 0 || p.Result.Errors != 0 {
			t.Errorf("point %d answered %d, failed %d, want answers and no failure", i, p.Result.Requests, p.Result.Errors)
		}
		if p.Workers == 1 && p.Ratio != 1 {
			t.Errorf("point %d (one worker) ratio = %v, want 1", i, p.Ratio)
		}
	}
	var out bytes.Buffer
	if err := ReportScale(&out, r); err != nil {
		t.Fatalf("ReportScale = %v", err)
	}
	for _, want := range []string{"scale-out: sleep 5ms", "ratio to N × one worker", "2 workers offered 2× their capacity"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("ReportScale wrote\n%s\nwant it to contain %q", out.String(), want)
		}
	}
}

func TestScaleVerdicts(t *testing.T) {
	r := ScaleResult{Points: []ScalePoint{
		{Workers: 1, Offered: 2, Result: Result{Throughput: 80}},
		{Workers: 2, Offered: 2, Result: Result{Throughput: 150}},
		{Workers: 4, Offered: 2, Result: Result{Throughput: 200}},
		{Workers: 4, Offered: 1, Result: Result{Throughput: 200}},
		{Workers: 8, Offered: 2, Result: Result{Throughput: 620, Errors: 1}},
	}}
	r.setRatios()
	tests := []struct {
		name string
		pass bool
	}{{"2 workers", true}, {"4 workers", false}, {"8 workers", false}}
	vs := r.Verdicts()
	if len(vs) != len(tests) {
		t.Fatalf("Verdicts = %v, want %d", vs, len(tests))
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.HasPrefix(vs[i].Goal, tc.name) || vs[i].Pass != tc.pass {
				t.Errorf("verdict = %v, want %s passing %v", vs[i], tc.name, tc.pass)
			}
		})
	}
}

func TestChartScale(t *testing.T) {
	r := ScaleResult{Points: []ScalePoint{{Workers: 1, Offered: 2, Ratio: 1}, {Workers: 16, Offered: 2, Ratio: 0.5}}}
	var out bytes.Buffer
	if err := ChartScale(&out, r); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("ChartScale wrote %d lines, want 3:\n%s", len(lines), out.String())
	}
	if got := strings.Count(lines[1], "█"); got != scaleChartWidth {
		t.Errorf("ratio 1 bar = %d cells, want %d", got, scaleChartWidth)
	}
	if got := strings.Count(lines[2], "█"); got != scaleChartWidth/2 || !strings.Contains(lines[2], "|") {
		t.Errorf("ratio 0.5 row = %q, want %d cells and the goal mark", lines[2], scaleChartWidth/2)
	}
}

func TestFirstCall(t *testing.T) {
	url := serve(t, fakeToolbus{})
	started := false
	r, err := FirstCall(context.Background(), FirstCallConfig{URL: url, Sleep: time.Millisecond, Callers: 2,
		Start: func(context.Context) error { started = true; return nil }})
	if err != nil || !started {
		t.Fatalf("FirstCall = %v (started %v), want nil after starting", err, started)
	}
	if r.ToAnswer < r.ToCall {
		t.Errorf("FirstCall = %+v, want ToAnswer ≥ ToCall", r)
	}
}

// A missed point whose machine had little idle CPU says so: it measured
// the CPU, not the dispatch. One with idle CPU, or none read, does not.
func TestScaleVerdictNamesABusyCPU(t *testing.T) {
	r := ScaleResult{Points: []ScalePoint{
		{Workers: 1, Offered: 2, Result: Result{Throughput: 80}, Idle: 0.5},
		{Workers: 4, Offered: 2, Result: Result{Throughput: 200}, Idle: 0.02},
		{Workers: 8, Offered: 2, Result: Result{Throughput: 400}, Idle: 0.4},
		{Workers: 16, Offered: 2, Result: Result{Throughput: 800}, Idle: -1},
	}}
	r.setRatios()
	vs := r.Verdicts()
	if len(vs) != 3 {
		t.Fatalf("Verdicts = %v, want 3", vs)
	}
	for i, busy := range []bool{true, false, false} {
		if got := strings.Contains(vs[i].Margin, "% idle"); vs[i].Pass || got != busy {
			t.Errorf("verdict %v: want a miss that names the idle CPU: %v", vs[i], busy)
		}
	}
}

func TestReadCPUTimes(t *testing.T) {
	a, ok := readCPUTimes()
	if !ok {
		if _, err := os.Stat("/proc/stat"); err == nil {
			t.Fatal("readCPUTimes cannot read /proc/stat, which exists")
		}
		t.Skip("no /proc/stat on this system")
	}
	if a.total == 0 || a.idle > a.total {
		t.Fatalf("cpu times %+v: want a total above the idle part", a)
	}
}
