package bench

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMatrix checks that the targets take turns in every round, that a
// target's own body is what it is sent, and that a Load given in the
// config runs every round.
func TestMatrix(t *testing.T) {
	var tr turns
	targets := []Target{
		{Name: TargetPlain, URL: serve(t, tr.handler("a", PlainEcho()))},
		{Name: TargetDev, URL: serve(t, tr.handler("b", fakeToolbus{}))},
		{Name: TargetBatch, URL: serve(t, tr.handler("c", fakeToolbus{})), Body: EchoBatch(BatchCalls)},
	}
	var loads int
	rows, err := Matrix(t.Context(), targets, CompareConfig{
		Concurrency: []int{1, 64}, Rounds: 2, Duration: 50 * time.Millisecond, Warmup: -1,
		Load: func(ctx context.Context, cfg LoadConfig) (Result, error) { loads++; return Load(ctx, cfg) },
	})
	if err != nil {
		t.Fatalf("Matrix() error = %v, want nil", err)
	}
	if got, want := tr.log, slices.Repeat([]string{"a", "b", "c"}, 4); !slices.Equal(got, want) {
		t.Errorf("order of targets = %v, want %v", got, want)
	}
	if loads != 12 {
		t.Errorf("Load ran %d times, want 12", loads)
	}
	for _, r := range rows {
		for _, s := range r.Sides {
			if s.Result.Requests == 0 || s.Result.Errors != 0 {
				t.Errorf("%s at %d: %d requests, %d errors (%v), want some and none", s.Target.Name, r.Concurrency, s.Result.Requests, s.Result.Errors, s.Result.FirstError)
			}
		}
	}
	var out strings.Builder
	if err := ReportMatrix(&out, rows); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"toolbus dev added mean latency at concurrency 1", "toolbus dev echo throughput at concurrency 64",
		"a 10-call echo batch costs ≤ 3× one call", "echo latency at concurrency 64"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("ReportMatrix lacks %q:\n%s", w, out.String())
		}
	}
}

// TestMatrixCPU checks that a target's CPU is read around each of its
// rounds, counted at the measured part's share of the round, and shown
// per request; that a failing reading leaves it unknown and says why;
// and that a target without one shows none.
func TestMatrixCPU(t *testing.T) {
	// Each reading is 10ms later than the last: every round reads twice,
	// so that a round measures 10ms.
	ticking := func() func() (time.Duration, error) {
		var n time.Duration
		return func() (time.Duration, error) { n += 10 * time.Millisecond; return n, nil }
	}
	errNoProc := errors.New("no /proc here")
	targets := []Target{
		{Name: TargetPlain, URL: serve(t, PlainEcho()), CPU: ticking()},
		{Name: TargetDev, URL: serve(t, fakeToolbus{}), CPU: ticking()},
		{Name: TargetSplit, URL: serve(t, fakeToolbus{}), CPU: func() (time.Duration, error) { return 0, errNoProc }},
		{Name: TargetProxy, URL: serve(t, PlainEcho())},
	}
	// Warmup and measured part alike: a round's 10ms counts 5ms.
	rows, err := Matrix(t.Context(), targets, CompareConfig{
		Concurrency: []int{1}, Rounds: 3, Duration: 40 * time.Millisecond, Warmup: 40 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("Matrix() error = %v, want nil", err)
	}
	for _, name := range []string{TargetPlain, TargetDev} {
		s, _ := rows[0].Side(name)
		if s.CPU != 15*time.Millisecond || s.CPUError != nil {
			t.Errorf("%s: CPU, CPUError = %v, %v, want 15ms (three rounds of 10ms, half of each measured), nil", name, s.CPU, s.CPUError)
		}
		if got, ok := s.CPUPerRequest(); !ok || got != s.CPU/time.Duration(s.Result.Requests) {
			t.Errorf("%s: CPUPerRequest() = %v, %v, want %v, true", name, got, ok, s.CPU/time.Duration(s.Result.Requests))
		}
	}
	split, _ := rows[0].Side(TargetSplit)
	if !errors.Is(split.CPUError, errNoProc) {
		t.Errorf("split: CPUError = %v, want %v", split.CPUError, errNoProc)
	}
	for _, name := range []string{TargetSplit, TargetProxy} {
		s, _ := rows[0].Side(name)
		if d, ok := s.CPUPerRequest(); ok {
			t.Errorf("%s: CPUPerRequest() = %v, true; want unknown", name, d)
		}
	}
	var out strings.Builder
	if err := ReportMatrix(&out, rows); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"cpu/req", "cpu/req of toolbus split at concurrency 1 unknown: no /proc here"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("ReportMatrix lacks %q:\n%s", w, out.String())
		}
	}
}

// TestOutsideVerdicts judges made-up rows against each goal.
func TestOutsideVerdicts(t *testing.T) {
	side := func(name string, rps float64, mean time.Duration) Side {
		return Side{Target: Target{Name: name}, Result: Result{Requests: 1, Throughput: rps, Mean: mean}}
	}
	rows := []Row{
		{Concurrency: 1, Sides: []Side{side(TargetPlain, 10, 100*time.Microsecond), side(TargetProxy, 5, 300*time.Microsecond),
			side(TargetDev, 5, 150*time.Microsecond), side(TargetSplit, 4, 310*time.Microsecond)}},
		{Concurrency: 64, Sides: []Side{side(TargetPlain, 1000, 0), side(TargetProxy, 200, 0),
			side(TargetDev, 600, 0), side(TargetSplit, 300, 0), side(TargetBatch, 150, 0)}},
	}
	want := map[string]bool{
		"toolbus dev added mean latency":           true, // +50µs
		"toolbus split mean latency":               false,
		"toolbus dev echo throughput":              true,  // 0.6×
		"toolbus split echo throughput":            false, // 1.5×
		"a 10-call echo batch costs ≤ 3× one call": false, // 4×
	}
	vs := OutsideVerdicts(rows)
	if len(vs) != len(want) {
		t.Fatalf("OutsideVerdicts() = %d verdicts, want %d: %v", len(vs), len(want), vs)
	}
	for _, v := range vs {
		for prefix, pass := range want {
			if strings.HasPrefix(v.Goal, prefix) && v.Pass != pass {
				t.Errorf("%s: Pass = %v, want %v", v, v.Pass, pass)
			}
		}
	}
}

// TestResultJSON checks that a result travels from a load generator
// process with its histogram.
func TestResultJSON(t *testing.T) {
	h := new(histogram)
	for _, d := range []time.Duration{time.Microsecond, 50 * time.Microsecond, 3 * time.Millisecond} {
		h.record(d)
	}
	r := Result{Concurrency: 4, Requests: 3, Errors: 1, FirstError: http.ErrBodyNotAllowed, Elapsed: time.Second, Throughput: 3, hist: h}
	r.setLatencies()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got Result
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("Unmarshal(%s) = %v", b, err)
	}
	if got.P99 != r.P99 || got.Mean != r.Mean || got.Requests != 3 || got.FirstError == nil || *got.hist != *h {
		t.Errorf("round trip = %+v, want %+v", got, r)
	}
}

// TestPinned checks the commands of pinned servers and load generators:
// the program under taskset on each side's CPUs; and that without
// taskset the error says so.
func TestPinned(t *testing.T) {
	t.Run("without taskset", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		if _, _, err := pinned([]string{"/bin/toolbus"}, "0", "1"); !errors.Is(err, exec.ErrNotFound) {
			t.Errorf("pinned without taskset: err = %v, want one wrapping %v", err, exec.ErrNotFound)
		}
	})
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		t.Skipf("pinning needs taskset (%v): install util-linux", err)
	}
	server, load, err := pinned([]string{"/bin/toolbus", "--x"}, "0", "1-3")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{taskset, "-c", "0", "/bin/toolbus", "--x"}; !slices.Equal(server, want) {
		t.Errorf("server = %q, want %q", server, want)
	}
	if want := []string{taskset, "-c", "1-3", "/bin/toolbus", "--x"}; !slices.Equal(load, want) {
		t.Errorf("load = %q, want %q", load, want)
	}
	var listErr *cpuListError
	if _, _, err := pinned([]string{"/bin/toolbus"}, "0", "99999"); !errors.As(err, &listErr) || listErr.flag != "--load-cpus" {
		t.Errorf("pinned with a CPU list taskset refuses: err = %v, want a *cpuListError of --load-cpus", err)
	}
}

// TestFloodNice checks that --flood-nice puts the flood's load generator,
// and only it, under nice, and that without the flag neither is.
func TestFloodNice(t *testing.T) {
	nice, err := exec.LookPath("nice")
	if err != nil {
		t.Skipf("--flood-nice needs nice (%v): install coreutils", err)
	}
	load := []string{"/bin/toolbus"}
	for _, tc := range []struct {
		niceness      int
		victim, flood []string
	}{
		{0, load, load},
		{19, load, []string{nice, "-n", "19", "/bin/toolbus"}},
	} {
		tb := &tenantsBench{cfg: TenantsRunConfig{FloodNice: tc.niceness}, load: load}
		for side, want := range map[string][]string{victimSide: tc.victim, floodSide: tc.flood} {
			got, err := tb.loadCommand(side)
			if err != nil || !slices.Equal(got, want) {
				t.Errorf("--flood-nice %d: the %s's command = %q, %v; want %q", tc.niceness, side, got, err, want)
			}
		}
	}
}
