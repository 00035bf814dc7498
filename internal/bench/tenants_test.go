package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/schema"
)

func TestErrorClass(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  *schema.Error
		want string
	}{
		{"limit", &schema.Error{Code: schema.CodeOverloaded, Data: json.RawMessage(`{"limit":"caller_max_in_flight","retry_after_ms":50}`)}, "-32002 caller_max_in_flight"},
		{"reason", &schema.Error{Code: schema.CodeMethodNotFound, Data: json.RawMessage(`{"reason":"invalid_method_name"}`)}, "-32601 invalid_method_name"},
		{"no data", &schema.Error{Code: schema.CodeInternal}, "-32603"},
		{"data not an object", &schema.Error{Code: schema.CodeToolError, Data: json.RawMessage(`"boom"`)}, "-32000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := errorClass(tc.err); got != tc.want {
				t.Errorf("errorClass(%+v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}

func TestTenantsNeedsTwoKeys(t *testing.T) {
	for _, tc := range []struct {
		name          string
		victim, flood string
	}{
		{"no victim key", "", "f"},
		{"no flood key", "v", ""},
		{"the same key", "k", "k"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Tenants(context.Background(), TenantsConfig{URL: "http://127.0.0.1:1/rpc", VictimKey: tc.victim, FloodKey: tc.flood}); err == nil {
				t.Errorf("Tenants with keys %q and %q = nil error, want one", tc.victim, tc.flood)
			}
		})
	}
}

func TestTenantsVerdicts(t *testing.T) {
	quiet := Result{Requests: 3000, Throughput: 1000, P99: time.Millisecond}
	for _, tc := range []struct {
		name          string
		r             TenantsResult
		want          []bool // p99, rate, failed
		wantGotPrefix string // of the first verdict
	}{
		{"all met", TenantsResult{Quiet: quiet, Flooded: Result{Requests: 1200, Throughput: 400, P99: 3 * time.Millisecond}},
			[]bool{true, true, true}, "3ms vs 1ms (3.00×)"},
		{"p99 past 3×", TenantsResult{Quiet: quiet, Flooded: Result{Requests: 1500, Throughput: 500, P99: 3100 * time.Microsecond}},
			[]bool{false, true, true}, "3.1ms vs 1ms (3.10×)"},
		{"rate under 40%", TenantsResult{Quiet: quiet, Flooded: Result{Requests: 1197, Throughput: 399, P99: 2 * time.Millisecond}},
			[]bool{true, false, true}, "2ms vs 1ms (2.00×)"},
		{"a failed call", TenantsResult{Quiet: quiet, Flooded: Result{Requests: 1500, Throughput: 500, P99: time.Millisecond},
			VictimErrors: map[string]int64{"transport": 1}, FirstVictimError: errors.New("connection reset")},
			[]bool{true, true, false}, "1ms vs 1ms (1.00×)"},
		{"starved under the flood", TenantsResult{Quiet: quiet, Flooded: Result{Elapsed: 6 * time.Second}},
			[]bool{false, false, true}, "no call succeeded under the flood"},
		{"nothing without the flood", TenantsResult{Flooded: quiet},
			[]bool{false, false, true}, ""},
		{"alone, judged on its failures only", TenantsResult{Alone: true, Quiet: quiet}, []bool{true}, "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := tc.r.Verdicts()
			var got []bool
			for _, v := range vs {
				got = append(got, v.Pass)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Verdicts() pass = %v, want %v: %v", got, tc.want, vs)
			}
			if vs[0].Got != tc.wantGotPrefix {
				t.Errorf("Verdicts()[0].Got = %q, want %q", vs[0].Got, tc.wantGotPrefix)
			}
		})
	}
}

func TestTenantsVerdictGoals(t *testing.T) {
	vs := TenantsResult{}.Verdicts()
	var goals []string
	for _, v := range vs {
		goals = append(goals, v.Goal)
	}
	want := []string{"victim p99 under the flood ≤ 3× without it", "victim calls/s under the flood ≥ 40% of without it", "victim calls failed = 0"}
	if !slices.Equal(goals, want) {
		t.Errorf("Verdicts() goals = %q, want %q", goals, want)
	}
}

func TestReportTenantsRuns(t *testing.T) {
	quiet := Result{Requests: 3000, Throughput: 1000, P99: time.Millisecond}
	var out strings.Builder
	err := ReportTenantsRuns(&out, []TenantsRun{
		{Deployment: "dev", Fair: true, Result: TenantsResult{Quiet: quiet, Flooded: Result{Requests: 1500, Throughput: 500, P99: 2 * time.Millisecond}}},
		{Deployment: "split", Fair: false, Result: TenantsResult{Quiet: quiet, Flooded: Result{Requests: 60, Throughput: 20, P99: 50 * time.Millisecond}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"deployment  fair  calls/s quiet",
		"p99 PASS, rate PASS, failed PASS",
		"50%", "2.0×",
		"p99 MISS, rate MISS, failed PASS",
		"2%", "50.0×",
	} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("ReportTenantsRuns lacks %q:\n%s", w, out.String())
		}
	}
}

func TestTenantsAlone(t *testing.T) {
	run := func(d time.Duration, n int64) TenantsResult {
		h := new(histogram)
		for range n {
			h.record(d)
		}
		r := Result{Concurrency: 1, Requests: n, Elapsed: time.Second, Throughput: float64(n), hist: h}
		r.setLatencies()
		return TenantsResult{Concurrency: 1, Alone: true, Quiet: r}
	}
	var a TenantsAlone
	a.Deployment = "dev"
	a.Add(true, run(time.Millisecond, 900))
	a.Add(false, run(time.Millisecond, 1000))
	a.Add(false, run(time.Millisecond, 1000))
	a.Add(true, run(time.Millisecond, 1100))
	if a.On.Requests != 2000 || a.Off.Requests != 2000 || a.On.Throughput != 1000 || a.Off.Throughput != 1000 {
		t.Fatalf("after four runs On = %d calls at %.0f/s, Off = %d at %.0f/s, want 2000 at 1000/s each",
			a.On.Requests, a.On.Throughput, a.Off.Requests, a.Off.Throughput)
	}
	// The servers used 2.2 s with fairness on and 2 s off, for 2000 calls
	// each: 1.1 ms and 1 ms a call.
	a.AddCPU(true, time.Second)
	a.AddCPU(false, 2*time.Second)
	a.AddCPU(true, 1200*time.Millisecond)
	var out strings.Builder
	if err := ReportTenantsAlone(&out, []TenantsAlone{a}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "dev         on/off  1.000×") {
		t.Errorf("ReportTenantsAlone lacks the ratio row:\n%s", out.String())
	}
	for _, want := range []string{"server CPU/call", "1.1ms", "1ms", "1.100×"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("ReportTenantsAlone lacks %q:\n%s", want, out.String())
		}
	}
}

// TestProcessCPU reads this process's CPU time, which grows as it works.
func TestProcessCPU(t *testing.T) {
	before, err := processCPU(os.Getpid())
	if err != nil {
		if runtime.GOOS == "linux" {
			t.Fatal(err)
		}
		t.Skipf("no /proc here: %v", err)
	}
	// Work until the kernel has counted at least one more tick.
	for x := uint64(1); ; x = x*6364136223846793005 + 1 {
		if x%(1<<20) != 0 {
			continue
		}
		after, err := processCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after < before {
			t.Fatalf("CPU time went back: %v, then %v", before, after)
		}
		if after > before {
			return
		}
	}
}

// fakeSides records what [tenants] asks of the two callers, in order.
type fakeSides struct {
	log []string
}

func (f *fakeSides) victimRound(_ context.Context, errs *tally) (Result, error) {
	f.log = append(f.log, "victim")
	errs.merge(map[string]int64{"transport": 1}, errors.New("reset"))
	h := new(histogram)
	h.record(time.Millisecond)
	r := Result{Requests: 1, Elapsed: time.Second, hist: h}
	r.setLatencies()
	return r, nil
}

func (f *fakeSides) flood(_ context.Context, round int, answers *tally) (func() error, error) {
	f.log = append(f.log, fmt.Sprintf("flood %d", round))
	return func() error {
		f.log = append(f.log, fmt.Sprintf("stop %d", round))
		answers.merge(map[string]int64{"batch call: ok": 500}, nil)
		return nil
	}, nil
}

// TestTenantsRounds checks that each flooded round starts the flood before
// the victim's round and stops it after, that quiet rounds and a victim
// alone have no flood, and that what each side counted is merged.
func TestTenantsRounds(t *testing.T) {
	cfg, err := TenantsConfig{URL: "http://127.0.0.1:1/rpc", VictimKey: "v", FloodKey: "f"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		alone   bool
		want    []string
		answers int64
	}{
		{"flood", false, []string{"victim", "flood 1", "victim", "stop 1", "victim", "flood 3", "victim", "stop 3"}, 1000},
		{"alone", true, []string{"victim", "victim", "victim", "victim"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f fakeSides
			cfg.Alone = tc.alone
			r, err := tenants(context.Background(), cfg, &f)
			if err != nil {
				t.Fatalf("tenants: %v", err)
			}
			if !slices.Equal(f.log, tc.want) {
				t.Errorf("tenants asked %q, want %q", f.log, tc.want)
			}
			if len(r.Rounds) != 4 || r.VictimErrors["transport"] != 4 || r.FirstVictimError == nil || r.FloodAnswers["batch call: ok"] != tc.answers {
				t.Errorf("tenants = %d rounds, victim errors %v (first %v), flood answers %v; want 4 rounds, 4 transport errors, %d answered",
					len(r.Rounds), r.VictimErrors, r.FirstVictimError, r.FloodAnswers, tc.answers)
			}
			quiet := int64(2)
			if tc.alone {
				quiet = 4
			}
			if r.Quiet.Requests != quiet || r.Flooded.Requests != 4-quiet {
				t.Errorf("tenants merged %d quiet and %d flooded calls, want %d and %d", r.Quiet.Requests, r.Flooded.Requests, quiet, 4-quiet)
			}
		})
	}
}
